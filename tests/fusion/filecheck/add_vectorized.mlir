// A contiguous float32 add is vectorized to the host's vector width in the optimized LLVM IR
// behind the slot-ABI entry point: a + alpha * b is one fused multiply-add, as ATen's vector loop.
// RUN: %neuron_kernel_mlir llvm elementwise add Float Float 1 c c c -- Float Float | FileCheck %s

// CHECK: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// CHECK: load <{{[0-9]+}} x float>
// CHECK: call <{{[0-9]+}} x float> @llvm.fma.v{{[0-9]+}}f32(
// CHECK: store <{{[0-9]+}} x float>

// bfloat16 math runs in f32 and rounds back with integer operations (arith-expand), so kernels
// need no compiler-runtime routine for the truncation.
// RUN: %neuron_kernel_mlir lowered elementwise mul BFloat16 BFloat16 1 c c c -- BFloat16 BFloat16 | FileCheck %s

// CHECK: llvm.func @kernel(
// CHECK: llvm.load {{.*}} -> bf16
// CHECK: llvm.fmul {{.*}} : f32
// CHECK: llvm.lshr
// CHECK-NOT: llvm.fptrunc {{.*}} to bf16
// CHECK: llvm.store {{.*}} : bf16, !llvm.ptr

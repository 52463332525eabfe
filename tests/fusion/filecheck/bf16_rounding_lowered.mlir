// bfloat16 lives in memory as its 16 bits (i16): widening is a shift, and math runs in f32 and
// rounds back with integer operations, so no bf16 value reaches LLVM (whose x86 backend would
// call __truncsfbf2, a compiler-runtime routine GCC 12's libgcc lacks).
// RUN: %neuron_kernel_mlir lowered elementwise mul BFloat16 BFloat16 1 c c c -- BFloat16 BFloat16 | FileCheck %s

// CHECK: llvm.func @kernel(
// CHECK: llvm.load {{.*}} -> i16
// CHECK: llvm.shl
// CHECK: llvm.bitcast {{.*}} : i32 to f32
// CHECK: llvm.fmul {{.*}} : f32
// CHECK: llvm.lshr
// CHECK-NOT: bf16
// CHECK: llvm.store {{.*}} : i16, !llvm.ptr
// CHECK-NOT: bf16

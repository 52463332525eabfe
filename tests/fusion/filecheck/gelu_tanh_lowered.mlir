// gelu(approximate="tanh") after the lowering pipeline: only the LLVM dialect is left, and tanh
// is a libm call the kernel declares without side effects (so LLVM may vectorize it).
// RUN: %neuron_kernel_mlir lowered elementwise gelu Float Float 1 c c -- Float 1 | FileCheck %s

// CHECK: llvm.func @tanhf(f32) -> f32 attributes {memory = #llvm.memory_effects<other = none
// CHECK: llvm.func @kernel(
// CHECK-NOT: linalg.
// CHECK-NOT: scf.
// CHECK: llvm.call @tanhf

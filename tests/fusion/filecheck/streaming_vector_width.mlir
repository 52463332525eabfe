// Elementwise kernels that call no math function stream memory, and are given 256-bit vectors
// (fusion/streaming_vector_width.h): an add, and a fused multiply-add chain. Kernels that call
// vector math keep the host's width (tanh, a fused GELU-like chain), and reductions keep it too.
// RUN: %neuron_kernel_mlir llvm elementwise add Float Float 1 c c c -- Float Float | FileCheck %s --check-prefix=STREAM
// RUN: %neuron_kernel_mlir llvm fused 1 'mul(x0,s1)' 'add(m0,x2)!' | FileCheck %s --check-prefix=STREAM
// RUN: %neuron_kernel_mlir llvm elementwise tanh Float Float 1 c c -- Float | FileCheck %s --check-prefix=MATH
// RUN: %neuron_kernel_mlir llvm fused 1 'mul(x0,s1)' 'tanh(m0)' 'add(m1,x2)!' | FileCheck %s --check-prefix=MATH
// RUN: %neuron_kernel_mlir llvm reduction sum Float 1 1 Float -- Float | FileCheck %s --check-prefix=MATH

// STREAM: define void @neuron_kernel(ptr {{.*}}) {{.*}} #[[ATTRS:[0-9]+]] {
// STREAM: store <8 x float>
// STREAM: attributes #[[ATTRS]] = { {{.*}}"prefer-vector-width"="256"

// MATH-NOT: "prefer-vector-width"

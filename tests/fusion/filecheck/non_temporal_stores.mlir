// Elementwise kernels over unit-stride rank-1 operands whose body is plain arithmetic get a
// second path for outputs of 32 MiB or more (fusion/non_temporal_stores.h): 64-byte
// non-temporal vector stores at 64-byte boundaries, then an sfence; a 0-dim input (broadcast) is
// read once. A kernel that calls a math function (tanh), one with a strided operand and one of
// rank 2 keep their single loop.
// RUN: %neuron_kernel_mlir llvm elementwise add Float Float 1 c c c -- Float Float | FileCheck %s --check-prefix=STREAM
// RUN: %neuron_kernel_mlir llvm fused 1 'mul(x0,s1)' 'add(m0,x2)!' | FileCheck %s --check-prefix=STREAM
// RUN: %neuron_kernel_mlir llvm elementwise add Double Double 1 c c c -- Double Double | FileCheck %s --check-prefix=DOUBLE
// RUN: %neuron_kernel_mlir llvm elementwise tanh Float Float 1 c c -- Float | FileCheck %s --check-prefix=PLAIN
// RUN: %neuron_kernel_mlir llvm elementwise add Float Float 1 c c b -- Float Float | FileCheck %s --check-prefix=STREAM
// RUN: %neuron_kernel_mlir llvm elementwise add Float Float 1 c c s -- Float Float | FileCheck %s --check-prefix=PLAIN
// RUN: %neuron_kernel_mlir llvm elementwise add Float Float 2 c c c -- Float Float | FileCheck %s --check-prefix=PLAIN

// STREAM: store <16 x float> %{{[0-9]+}}, ptr %{{[0-9]+}}, align 64, {{.*}}!nontemporal
// STREAM: call void @llvm.x86.sse.sfence()
// STREAM-NEXT: ret void

// DOUBLE: store <8 x double> %{{[0-9]+}}, ptr %{{[0-9]+}}, align 64, !nontemporal

// PLAIN-NOT: nontemporal
// PLAIN-NOT: sfence

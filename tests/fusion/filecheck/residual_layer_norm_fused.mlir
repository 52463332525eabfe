// A residual add feeding a layer norm, fused (prologue fusion, fusion/fused_kernel.h): one loop
// nest over the rows, the sum x + r computed where each pass loads it (from the two window
// inputs %e0 and %e1), never stored: the only stores are the row's mean and rstd and the
// normalized row. The residual sum has no memref at all (no %x0 argument).
// RUN: %neuron_kernel_mlir mlir fused-reduction layer_norm 1 1 m0 c c -- 'add(x0,x1)' | FileCheck %s
// RUN: %neuron_kernel_mlir llvm fused-reduction layer_norm 1 1 m0 c c -- 'add(x0,x1)' | FileCheck %s --check-prefix=LLVM

// CHECK: func.func @kernel(%o0: memref<?xf32, {{.*}}>, %o1: memref<?xf32, {{.*}}>, %o2: memref<?x?xf32, {{.*}}>, %x1: {{.*}}, %x2: {{.*}}, %e0: {{.*}}, %e1: {{.*}}, %p0: f64, %q0_0: f64, %count: i64, %begin: index, %end: index)
// CHECK-NOT: memref.alloc
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// The mean pass: x + r from the inputs.
// CHECK: iter_args({{.*}}) -> (f32) {
// CHECK: memref.load %e0[%i0, %j0_0]
// CHECK: memref.load %e1[%i0, %j0_0]
// CHECK: arith.addf
// CHECK-NOT: memref.store
// The deviation pass, computing it again from the rows in cache.
// CHECK: iter_args({{.*}}) -> (f32, f32) {
// CHECK: memref.load %e0[%i0, %j1_0]
// CHECK-NOT: memref.store {{.*}}, %x
// CHECK-NOT: memref.store {{.*}}, %e
// CHECK: memref.store {{.*}}, %o0[%i0]
// CHECK: memref.store {{.*}}, %o1[%i0]
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK: memref.load %e0[%i0, %w0]
// CHECK: memref.store {{.*}}, %o2[%i0, %w0]
// CHECK-NOT: memref.store
// CHECK-NOT: scf.for %i0

// Every pass vectorized, with no runtime overlap check (the memrefs are declared free of
// aliasing).
// LLVM-NOT: vector.memcheck
// LLVM: fadd reassoc <8 x float>
// LLVM: store <8 x float>

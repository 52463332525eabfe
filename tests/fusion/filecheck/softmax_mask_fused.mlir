// Attention's scaled and masked softmax, softmax(x * scale + mask), fused (prologue fusion): the
// scaled, masked score is computed where each pass loads it and never stored; the mask is read
// over the common dimensions [batch * heads, rows, columns] (fusion/common_dims.h), broadcast
// over the first by its stride. One exp per element: the exp-sum pass stores exp into the
// output and the write pass rescales it in place. The max pass is a vector max (maxnum with nnan
// and nsz) with a NaN flag, its result made NaN after the pass where the flag is set.
// RUN: %neuron_kernel_mlir mlir fused-reduction softmax 2 1 m1 -- 'mul(x0,s1)' 'add(m0,x2)' | FileCheck %s
// RUN: %neuron_kernel_mlir llvm fused-reduction softmax 2 1 m1 -- 'mul(x0,s1)' 'add(m0,x2)' | FileCheck %s --check-prefix=LLVM

// CHECK: func.func @kernel(%o0: memref<?x?x?xf32, {{.*}}>, %e0: {{.*}}, %e1: {{.*}}, %e2: {{.*}}, %q1_0: f64, %count: i64, %begin: index, %end: index)
// CHECK-NOT: memref.alloc
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: scf.for %i1 = %c0 to %K1 step %c1 {
// CHECK: memref.load %e0[%i0, %i1, %j0_0]
// CHECK: memref.load %e2[%i0, %i1, %j0_0]
// CHECK: llvm.intr.maxnum({{.*}}) {fastmathFlags = #llvm.fastmath<nnan, nsz>}
// CHECK: arith.cmpf uno
// CHECK-NOT: memref.store
// CHECK: arith.constant 0x7FC00000 : f32
// CHECK-NEXT: arith.select %P0_0#1, {{.*}}, %P0_0#0 : f32
// CHECK: iter_args({{.*}}) -> (f32) {
// CHECK: memref.load %e2[%i0, %i1, %j1_0]
// CHECK: math.exp
// CHECK: memref.store {{.*}}, %o0[%i0, %i1, %j1_0]
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK-NOT: math.exp
// CHECK-NOT: memref.load %e
// CHECK: memref.load %o0[%i0, %i1, %w0]
// CHECK: memref.store {{.*}}, %o0[%i0, %i1, %w0]
// CHECK-NOT: memref.store

// LLVM-NOT: vector.memcheck
// LLVM-DAG: call nnan nsz <{{[0-9]+}} x float> @llvm.maxnum.v{{[0-9]+}}f32
// LLVM-DAG: call <{{[0-9]+}} x float> @_ZGV{{[a-z]}}N{{[0-9]+}}v_expf

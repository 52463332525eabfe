// RMSNorm written by hand, x * rsqrt(mean(x * x) + eps) * w, fused: the square is computed
// where the mean loads it (prologue), + eps and rsqrt run once per row on the stored mean
// (epilogue over the kept dimensions), and the two products in a pass over the row's elements
// (row epilogue), which reads the row's rsqrt from a register: one loop nest per row, only the
// mean (the reduction's output) and the result stored, nothing allocated.
// RUN: %neuron_kernel_mlir mlir fused-reduction mean 1 1 m0 -- 'mul(x0,x0)' epilogue 'add(o0,s1)' 'rsqrt(m0)' rows 'mul(x0,k1)' 'mul(m0,x1)!' | FileCheck %s
// RUN: %neuron_kernel_mlir llvm fused-reduction mean 1 1 m0 -- 'mul(x0,x0)' epilogue 'add(o0,s1)' 'rsqrt(m0)' rows 'mul(x0,k1)' 'mul(m0,x1)!' | FileCheck %s --check-prefix=LLVM

// CHECK: func.func @kernel(%o0: memref<?xf32, {{.*}}>, %e0: {{.*}}, %z0: {{.*}}, %ro1: memref<?x?xf32, {{.*}}>, %rx0: {{.*}}, %rx1: {{.*}}, %r0_0: f64, %count: i64, %begin: index, %end: index)
// CHECK-NOT: memref.alloc
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: iter_args
// CHECK: memref.load %e0[%i0, %j0_0]
// CHECK-NOT: memref.store
// CHECK: scf.yield
// CHECK: memref.store {{.*}}, %o0[%i0]
// CHECK: math.sqrt
// CHECK: %[[RSQRT:.*]] = arith.divf
// CHECK-NEXT: scf.for %rw0 = %c0 to %R0 step %c1 {
// CHECK: memref.load %rx0[%i0, %rw0]
// CHECK: arith.mulf {{.*}}, %[[RSQRT]]
// CHECK: memref.store {{.*}}, %ro1[%i0, %rw0]
// CHECK-NOT: memref.store
// CHECK-NOT: scf.for

// LLVM-NOT: vector.memcheck
// LLVM: fmul <{{[0-9]+}} x float>

// A softmax whose output is scaled and shifted, softmax(x) * s + b, fused (epilogue fusion):
// the scale and the shift run where the softmax's write pass stores each element, in the same
// loop, and only the shifted value is stored besides the softmax's own output (which the
// program may keep); the scaled intermediate is never written, and nothing is allocated.
// RUN: %neuron_kernel_mlir mlir fused-reduction softmax 1 1 c -- epilogue 'mul(o0,s0)' 'add(m0,x1)!' | FileCheck %s
// RUN: %neuron_kernel_mlir llvm fused-reduction softmax 1 1 c -- epilogue 'mul(o0,s0)' 'add(m0,x1)!' | FileCheck %s --check-prefix=LLVM

// CHECK: func.func @kernel(%o0: memref<?x?xf32, {{.*}}>, %x0: {{.*}}, %y1: memref<?x?xf32, {{.*}}>, %z0: {{.*}}, %z1: {{.*}}, %r1_0: f64, %count: i64, %begin: index, %end: index)
// CHECK-NOT: memref.alloc
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: math.exp
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK-NOT: scf.for
// CHECK: %[[SOFTMAX:.*]] = arith.mulf
// CHECK-NEXT: memref.store %[[SOFTMAX]], %o0[%i0, %w0]
// CHECK: memref.load %z0[%i0, %c0]
// CHECK: memref.load %z1[%i0, %w0]
// CHECK: %[[SCALED:.*]] = arith.mulf %[[SOFTMAX]],
// CHECK: %[[SHIFTED:.*]] = math.fma %{{.*}}, %{{.*}}, %[[SCALED]] : f32
// CHECK-NEXT: memref.store %[[SHIFTED]], %y1[%i0, %w0]
// CHECK-NOT: memref.store
// CHECK-NOT: scf.for

// LLVM-NOT: vector.memcheck
// LLVM: fmul <{{[0-9]+}} x float>

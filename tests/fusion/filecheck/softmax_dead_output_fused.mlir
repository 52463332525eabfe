// softmax(x) * s + b where nothing else reads the softmax's output (dead outputs,
// fusion/fused_kernel.h): the kernel takes no memref for that output and never stores it. The
// exps its sum pass computes are kept for the write pass in the memory of the shifted result
// (%y1, float32 like the exps), which the write pass then overwrites at the same element: one
// exp per element, and the only memory written is the result's.
// RUN: %neuron_kernel_mlir mlir fused-reduction softmax 1 1 c -- epilogue 'mul(o0,s0)' 'add(m0,x1)!' dead 0 | FileCheck %s
// RUN: %neuron_kernel_mlir llvm fused-reduction softmax 1 1 c -- epilogue 'mul(o0,s0)' 'add(m0,x1)!' dead 0 | FileCheck %s --check-prefix=LLVM

// CHECK: func.func @kernel(%x0: memref<?x?xf32, {{.*}}>, %y1: memref<?x?xf32, {{.*}}>, %z0: {{.*}}, %z1: {{.*}}, %r1_0: f64, %count: i64, %begin: index, %end: index)
// CHECK-NOT: memref.alloc
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: %[[EXP:.*]] = math.exp
// CHECK: %[[KEPT:.*]] = arith.select {{.*}}, %[[EXP]] : f32
// CHECK-NEXT: memref.store %[[KEPT]], %y1[%i0, %j1_0]
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK-NOT: math.exp
// CHECK: %[[LOADED:.*]] = memref.load %y1[%i0, %w0]
// CHECK: %[[SOFTMAX:.*]] = arith.mulf %[[LOADED]],
// CHECK: %[[SCALED:.*]] = arith.mulf %[[SOFTMAX]],
// CHECK: %[[SHIFTED:.*]] = math.fma %{{.*}}, %{{.*}}, %[[SCALED]] : f32
// CHECK-NEXT: memref.store %[[SHIFTED]], %y1[%i0, %w0]
// CHECK-NOT: memref.store
// CHECK-NOT: %o0

// LLVM-NOT: vector.memcheck
// LLVM: fmul <{{[0-9]+}} x float>

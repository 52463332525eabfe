// A float32 sum over the inner dimension: scf loops over the kept rows in [begin, end), an
// iter_args loop accumulating in f64 (reassociable, so LLVM may vectorize it), one rounding to
// f32 at the store.
// RUN: %neuron_kernel_mlir mlir reduction sum Float 1 1 Float -- Float | FileCheck %s

// CHECK: func.func @kernel(%o0: memref<?xf32, strided<[1], offset: ?>>, %x0: memref<?x?xf32, strided<[?, 1], offset: ?>>, %count: i64, %begin: index, %end: index)
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: %[[ZERO:.*]] = arith.constant 0x0000000000000000 : f64
// CHECK: scf.for %j0_0 = %c0 to %R0 step %c1 iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (f64) {
// CHECK: %[[X:.*]] = memref.load %x0[%i0, %j0_0]
// CHECK: %[[WIDE:.*]] = arith.extf %[[X]] : f32 to f64
// CHECK: arith.addf %[[ACC]], %[[WIDE]] fastmath<reassoc> : f64
// CHECK: arith.truncf {{.*}} : f64 to f32
// CHECK: memref.store {{.*}}, %o0[%i0]

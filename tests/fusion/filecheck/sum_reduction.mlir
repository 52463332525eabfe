// A float32 sum over the inner dimension: scf loops over the kept rows in [begin, end); the row
// in blocks of 2048 elements, each summed in float32 by a reassociable iter_args loop (which LLVM
// vectorizes at 16 lanes, four vectors interleaved), its sum widened and added to an f64 total
// (a block whose float32 sum is not finite is summed again in f64); one rounding to f32 at the
// store. A float64 sum has no blocks, nor has a row strided in memory.
// RUN: %neuron_kernel_mlir mlir reduction sum Float 1 1 Float -- Float | FileCheck %s
// RUN: %neuron_kernel_mlir llvm reduction sum Float 1 1 Float -- Float | FileCheck %s --check-prefix=LLVM
// RUN: %neuron_kernel_mlir mlir reduction mean Float 1 1 Float -- Float | FileCheck %s --check-prefix=MEAN
// RUN: %neuron_kernel_mlir mlir reduction sum Double 1 1 Double -- Double | FileCheck %s --check-prefix=DOUBLE
// RUN: %neuron_kernel_mlir mlir reduction sum Float 1 1 Float -- Float strided | FileCheck %s --check-prefix=DOUBLE

// CHECK: func.func @kernel(%o0: memref<?xf32, strided<[1], offset: ?>>, %x0: memref<?x?xf32, strided<[?, 1], offset: ?>>, %count: i64, %begin: index, %end: index)
// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: %[[ZERO:.*]] = arith.constant 0x0000000000000000 : f64
// CHECK: %[[BLOCK:.*]] = arith.constant 2048 : index
// CHECK: scf.for %[[B:.*]] = %c0 to %R0 step %[[BLOCK]] iter_args(%[[TOTAL:.*]] = %[[ZERO]]) -> (f64) {
// CHECK: %[[LEFT:.*]] = arith.subi %R0, %[[B]] : index
// CHECK: %[[WIDTH:.*]] = arith.minui %[[LEFT]], %[[BLOCK]] : index
// CHECK: %[[ZERO32:.*]] = arith.constant 0x00000000 : f32
// CHECK: %[[SUM:.*]]:1 = scf.for %[[U:.*]] = %c0 to %[[WIDTH]] step %c1 iter_args(%[[ACC:.*]] = %[[ZERO32]]) -> (f32) {
// CHECK: %j0_0 = arith.addi %[[B]], %[[U]] : index
// CHECK: %[[X:.*]] = memref.load %x0[%i0, %j0_0]
// CHECK-NOT: arith.extf
// CHECK: arith.addf %[[ACC]], %[[X]] fastmath<reassoc> : f32
// CHECK: %[[ABS:.*]] = math.absf %[[SUM]]#0 : f32
// CHECK: %[[FINITE:.*]] = arith.cmpf olt, %[[ABS]], {{.*}} : f32
// CHECK: %[[WIDE:.*]] = arith.extf %[[SUM]]#0 : f32 to f64
// CHECK: %[[CHECKED:.*]]:1 = scf.if %[[FINITE]] -> (f64) {
// CHECK: scf.yield %[[WIDE]] : f64
// CHECK: } else {
// CHECK: scf.for {{.*}} = %c0 to %[[WIDTH]] step %c1 iter_args({{.*}}) -> (f64) {
// CHECK: arith.extf {{.*}} : f32 to f64
// CHECK: arith.addf %[[TOTAL]], %[[CHECKED]]#0 : f64
// CHECK: arith.truncf {{.*}} : f64 to f32
// CHECK: memref.store {{.*}}, %o0[%i0]

// LLVM: fadd reassoc <16 x float>
// LLVM: fadd reassoc <16 x float>
// LLVM: fadd reassoc <16 x float>
// LLVM: fadd reassoc <16 x float>

// MEAN: arith.addf {{.*}} fastmath<reassoc> : f32
// MEAN: arith.extf {{.*}} : f32 to f64
// MEAN: arith.divf {{.*}} : f64

// DOUBLE-NOT: arith.constant 2048
// DOUBLE: scf.for %j0_0 = %c0 to %R0 step %c1 iter_args
// DOUBLE: arith.addf {{.*}} fastmath<reassoc> : f64

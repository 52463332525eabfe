// softmax: a max pass, an exp-sum pass (summed in float32 for a float32 row, as ATen does) that
// also stores each exp(x - max) into the output, then
// a nest that rescales the row in place: one exp per element, as ATen does (the write pass
// reads the stored value back, computing no exp of its own).
// RUN: %neuron_kernel_mlir mlir reduction softmax Float 1 1 Float -- Float | FileCheck %s
// A half output keeps the two-exp form: storing exp in half would round what the rescale reads.
// RUN: %neuron_kernel_mlir mlir reduction softmax Half 1 1 Half -- Float | FileCheck %s --check-prefix=HALF

// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: iter_args({{.*}}) -> (f32, i1) {
// CHECK: llvm.intr.maxnum
// CHECK: arith.cmpf uno
// CHECK: iter_args({{.*}}) -> (f32) {
// CHECK: math.exp
// CHECK: memref.store {{.*}}, %o0[%i0, %j1_0]
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK-NOT: math.exp
// CHECK: memref.load %o0[%i0, %w0]
// CHECK-NOT: math.exp
// CHECK: arith.divf
// CHECK: arith.mulf
// CHECK: memref.store {{.*}}, %o0[%i0, %w0]

// HALF: iter_args({{.*}}) -> (f32) {
// HALF: math.exp
// HALF-NOT: memref.store
// HALF: scf.for %w0 = %c0 to %R0 step %c1 {
// HALF: memref.load %x0[%i0, %w0]
// HALF: math.exp
// HALF: memref.store {{.*}}, %o0[%i0, %w0]

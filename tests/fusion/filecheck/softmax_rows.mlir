// softmax: a max pass, an exp-sum pass, then a nest that writes every element of the row.
// RUN: %neuron_kernel_mlir mlir reduction softmax Float 1 1 Float -- Float | FileCheck %s

// CHECK: scf.for %i0 = %begin to %end step %c1 {
// CHECK: iter_args({{.*}}) -> (f32) {
// CHECK: llvm.intr.maximum
// CHECK: iter_args({{.*}}) -> (f64) {
// CHECK: math.exp
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK: arith.divf
// CHECK: arith.mulf
// CHECK: memref.store {{.*}}, %o0[%i0, %w0]

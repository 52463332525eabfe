// Batch norm's training forward with blocked rows (a channel between reduced dimensions, as in
// [N, C, H, W]): per block of up to 64 channels, each pass keeps its channels' f64 accumulators
// in stack buffers and walks the batch dimension outside the block's channels and each channel's
// contiguous plane inside them, so the input is read in memory order; the element writes walk
// the same order. The plane loops still vectorize (the LLVM run).
// RUN: %neuron_kernel_mlir mlir reduction batch_norm Float 1 2 Float Float Float Float -- Float Float Float blocked | FileCheck %s
// RUN: %neuron_kernel_mlir llvm reduction batch_norm Float 1 2 Float Float Float Float -- Float Float Float blocked | FileCheck %s --check-prefix=LLVM
// Row order (no `blocked`) keeps a loop over the rows outermost.
// RUN: %neuron_kernel_mlir mlir reduction batch_norm Float 1 2 Float Float Float Float -- Float Float Float | FileCheck %s --check-prefix=ROWS

// CHECK: %bacc0_0 = memref.alloca() : memref<64xf64>
// CHECK: %bacc1_0 = memref.alloca() : memref<64xf64>
// CHECK: scf.for %b = %begin to %end step %rowblock {
// CHECK: %width = arith.minui %rowsleft, %rowblock : index
// The mean pass: batch outside, the block's channels inside, the plane innermost.
// CHECK: scf.for %j0_0 = %c0 to %R0 step %c1 {
// CHECK-NEXT: scf.for %bu0c = %c0 to %width step %c1 {
// CHECK-NEXT: %i0 = arith.addi %b, %bu0c : index
// CHECK: scf.for %j0_1 = %c0 to %R1 step %c1 iter_args(
// CHECK: memref.load %x0[%i0, %j0_0, %j0_1]
// CHECK: arith.addf {{.*}} fastmath<reassoc> : f64
// CHECK: memref.store {{.*}}, %bacc0_0[%bu0c] : memref<64xf64>
// The squared deviations' pass, reading the channel's mean from the buffer.
// CHECK: scf.for %j1_0 = %c0 to %R0 step %c1 {
// CHECK-NEXT: scf.for %bu1c = %c0 to %width step %c1 {
// CHECK: memref.load %bacc0_0[%bu1c] : memref<64xf64>
// CHECK: scf.for %j1_1 = %c0 to %R1 step %c1 iter_args(
// CHECK: memref.store {{.*}}, %bacc1_0[%bu1c] : memref<64xf64>
// The channels' mean, invstd and variance, then the elements in the same order.
// CHECK: scf.for %bur = %c0 to %width step %c1 {
// CHECK: memref.store {{.*}}, %o0[%i0]
// CHECK: memref.store {{.*}}, %o2[%i0]
// CHECK: scf.for %w0 = %c0 to %R0 step %c1 {
// CHECK-NEXT: scf.for %buw = %c0 to %width step %c1 {
// CHECK: scf.for %w1 = %c0 to %R1 step %c1 {
// CHECK: memref.store {{.*}}, %o3[%i0, %w0, %w1]

// LLVM: fpext <{{[0-9]+}} x float> {{.*}} to <{{[0-9]+}} x double>
// LLVM: fadd reassoc <{{[0-9]+}} x double>
// LLVM: store <{{[0-9]+}} x float>

// ROWS: scf.for %i0 = %begin to %end step %c1 {
// ROWS-NOT: memref.alloca
// ROWS: scf.for %j0_0 = %c0 to %R0 step %c1 iter_args(

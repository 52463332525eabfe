// A float32 sum across columns (over the rows of [N, C], contiguous along C) in column order:
// tiles of 256 columns, the column loop innermost, so LLVM vectorizes across columns. Each block
// of 64 rows sums into float32 accumulators (16 lanes per vector, no widening per element), then
// the block's sums are widened and added to the tile's f64 accumulators on the stack. A float64
// sum keeps tiles of 64 columns summed in f64 directly.
// RUN: %neuron_kernel_mlir llvm reduction sum Float 1 1 Float -- Float column | FileCheck %s
// RUN: %neuron_kernel_mlir mlir reduction sum Float 1 1 Float -- Float column | FileCheck %s --check-prefix=MLIR
// RUN: %neuron_kernel_mlir llvm reduction sum Double 1 1 Double -- Double column | FileCheck %s --check-prefix=DOUBLE

// CHECK: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// CHECK-DAG: alloca [256 x double]
// CHECK-DAG: alloca [256 x float]
// CHECK-DAG: fadd reassoc <16 x float> {{.*}}, %wide.load
// CHECK-DAG: fpext <{{[0-9]+}} x float> {{.*}} to <{{[0-9]+}} x double>
// CHECK-DAG: fadd <{{[0-9]+}} x double>

// MLIR: %[[BLOCK:.*]] = arith.constant 64 : index
// MLIR: %tile = arith.constant 256 : index
// MLIR: scf.for %sb = %c0 to %R0 step %[[BLOCK]] {
// MLIR: memref.store {{.*}} : memref<256xf32>
// MLIR: scf.for %sb_u = %c0 to %sb_width step %c1 {
// MLIR: %j0_0 = arith.addi %sb, %sb_u : index
// MLIR: arith.addf {{.*}} fastmath<reassoc> : f32
// MLIR: arith.extf {{.*}} : f32 to f64
// MLIR: memref.store {{.*}} : memref<256xf64>

// DOUBLE: alloca [64 x double]
// DOUBLE-NOT: float
// DOUBLE: fadd reassoc <8 x double>

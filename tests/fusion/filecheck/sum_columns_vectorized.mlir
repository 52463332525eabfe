// A float32 sum across columns (over the rows of [N, C], contiguous along C) in column order:
// tiles of 64 columns with f64 accumulators on the stack, the column loop innermost, so LLVM
// vectorizes across columns (loads of floats, widened, added to vectors of doubles).
// RUN: %neuron_kernel_mlir llvm reduction sum Float 1 1 Float -- Float column | FileCheck %s

// CHECK: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// CHECK-DAG: load <{{[0-9]+}} x float>
// CHECK-DAG: fpext <{{[0-9]+}} x float> {{.*}} to <{{[0-9]+}} x double>
// CHECK-DAG: fadd reassoc <{{[0-9]+}} x double>

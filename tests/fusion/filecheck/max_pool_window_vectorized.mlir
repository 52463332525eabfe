// A float32 2x2 max pool with step 2 (max_pool_window, static_window constants 2 2 2): the window
// loops are constants (they unroll), the input's step between windows is a static stride 2 in
// its memref type, and in the optimized LLVM IR the loop over windows vectorizes, reading each
// window row as a wide load split by a stride-2 shuffle (even and odd elements).
// RUN: %neuron_kernel_mlir mlir reduction max_pool_window Float 2 2 Float Long -- Float constants 2 2 2 | FileCheck %s --check-prefix=MLIR
// RUN: %neuron_kernel_mlir llvm reduction max_pool_window Float 2 2 Float Long -- Float constants 2 2 2 | FileCheck %s --check-prefix=LLVM

// MLIR: %x0: memref<?x?x?x?xf32, strided<[?, 2, ?, 1], offset: ?>>
// MLIR-DAG: %R0 = arith.constant 2 : index
// MLIR-DAG: %R1 = arith.constant 2 : index
// MLIR: memref.extract_strided_metadata %x0
// MLIR: arith.cmpf uno
// MLIR: arith.fptosi {{.*}} : f64 to i64
// LLVM: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// LLVM: %[[WIDE:.*]] = load <{{[0-9]+}} x float>
// LLVM: shufflevector <{{[0-9]+}} x float> %[[WIDE]], <{{[0-9]+}} x float> poison, <{{[0-9]+}} x i32> <i32 0, i32 2, i32 4

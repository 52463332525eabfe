// add with alpha, the second input broadcast along the innermost dimension: its memref drops
// that dimension and its indexing map ignores the inner loop; alpha converts once, outside.
// RUN: %neuron_kernel_mlir mlir elementwise add Float Float 2 c c b -- Float Float | FileCheck %s

// CHECK: func.func @kernel(%a0: memref<?x?xf32, strided<[?, 1], offset: ?>>, %a1: memref<?x?xf32, strided<[?, 1], offset: ?>>, %a2: memref<?xf32, strided<[?], offset: ?>>, %p0: f64, %begin: index, %end: index)
// CHECK: %s0 = memref.subview %a0[%begin, 0] [%n, %d1] [1, 1]
// CHECK: %s2 = memref.subview %a2[%begin] [%n] [1]
// CHECK: %[[ALPHA:.*]] = arith.truncf %p0 : f64 to f32
// CHECK: linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
// CHECK-NEXT: ins(%s1, %s2
// CHECK-NEXT: outs(%s0
// CHECK: %[[SUM:.*]] = math.fma %in1, %[[ALPHA]], %in0 : f32
// CHECK-NEXT: linalg.yield %[[SUM]] : f32

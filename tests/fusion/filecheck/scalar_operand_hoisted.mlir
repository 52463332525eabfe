// A 0-dim input of a loop (a Python number: `x / 1.5` divides by a float64 0-dim tensor) is
// loaded once, before the linalg.generic, and the body reads that value: read inside the loop,
// its load could not move past the output's stores, and the JIT's loop stayed scalar or 4 lanes
// wide for the float64 it converts (`x.mul_(0.999)`, `x / 1.5`: 1.3x-1.9x ATen's time).
// RUN: %neuron_kernel_mlir mlir elementwise div Float Float 1 c c b -- Float Double | FileCheck %s
// RUN: %neuron_kernel_mlir llvm elementwise div Float Float 1 c c b -- Float Double | FileCheck %s --check-prefix=LLVM

// CHECK: %s2 = memref.cast %a2
// CHECK-NEXT: %in1 = memref.load %s2[] : memref<f64, strided<[], offset: ?>>
// CHECK-NEXT: linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
// CHECK-NEXT: ins(%s1 : memref<?xf32, strided<[1], offset: ?>>)
// CHECK-NEXT: outs(%s0
// CHECK-NEXT: ^bb0(%in0: f32, %out: f32):
// CHECK-NEXT: %[[DIVISOR:.*]] = arith.truncf %in1 : f64 to f32
// CHECK-NEXT: arith.divf %in0, %[[DIVISOR]] : f32

// The vector loop divides by the converted number, splat once: no float64 in it.
// LLVM-LABEL: vector.body:
// LLVM-NOT: double
// LLVM: fdiv <{{[0-9]+}} x float> %wide.load{{[0-9]*}}, %broadcast.splat
// LLVM-NOT: double
// LLVM: middle.block:

// exp keeps every lane in the range glibc's vector expf handles (src/fusion/guarded_math.cpp,
// guardedExp): a lane whose |x| exceeds 87.34 (0x42AEAC4F) is computed as exp(x - copysign(32, x))
// with that argument clamped to [-72.5, 56.75], times e^-32 or e^32; other lanes times 1. The
// vector call then never sees an argument that sends it to its scalar function (but NaN).
// RUN: %neuron_kernel_mlir mlir elementwise exp Float Float 1 c c -- Float | FileCheck %s
// RUN: %neuron_kernel_mlir llvm elementwise exp Float Float 1 c c -- Float | FileCheck %s --check-prefix=LLVM
// RUN: %neuron_kernel_mlir mlir elementwise sigmoid Double Double 1 c c -- Double | FileCheck %s --check-prefix=F64

// CHECK: %[[LIMIT:.*]] = arith.constant 0x42AEAC4F : f32
// CHECK: %[[LOWEST:.*]] = arith.constant 0xC2910000 : f32
// CHECK: %[[HIGHEST:.*]] = arith.constant 0x42630000 : f32
// CHECK: %[[ABS:.*]] = math.absf %in0 : f32
// CHECK: %[[BEYOND:.*]] = arith.cmpf ogt, %[[ABS]], %[[LIMIT]] : f32
// CHECK: %[[SHIFT:.*]] = math.copysign {{.*}}, %in0 : f32
// CHECK: %[[SHIFTED:.*]] = arith.subf %in0, %[[SHIFT]] : f32
// CHECK: arith.select {{.*}}, %[[LOWEST]], %[[SHIFTED]] : f32
// CHECK: %[[CLAMPED:.*]] = arith.select {{.*}}, %[[HIGHEST]], {{.*}} : f32
// CHECK: %[[ARG:.*]] = arith.select %[[BEYOND]], %[[CLAMPED]], %in0 : f32
// CHECK: %[[EXP:.*]] = math.exp %[[ARG]] : f32
// CHECK: %[[FACTOR:.*]] = arith.select %[[BEYOND]], {{.*}} : f32
// CHECK: %[[RESULT:.*]] = arith.mulf %[[EXP]], %[[FACTOR]] : f32
// CHECK: linalg.yield %[[RESULT]] : f32

// LLVM: call <16 x float> @_ZGVeN16v_expf
// LLVM-NOT: call float @expf

// F64: arith.negf %in0 : f64
// F64: math.absf {{.*}} : f64
// F64: math.copysign {{.*}}, {{.*}} : f64
// F64: math.exp {{.*}} : f64

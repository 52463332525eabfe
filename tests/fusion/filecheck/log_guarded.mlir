// A logarithm's vector call sees only positive finite lanes (src/fusion/guarded_math.cpp,
// guardedLog): zeros, negatives, infinities and NaN pass 1 instead, since glibc's vector log
// hands a vector holding one of them to its scalar function lane by lane
// (bench/special_inputs.py); their results are selected after the call.
// RUN: %neuron_kernel_mlir mlir elementwise log Float Float 1 c c -- Float | FileCheck %s
// RUN: %neuron_kernel_mlir mlir elementwise log10 Double Double 1 c c -- Double | FileCheck %s --check-prefix=F64

// CHECK: ^bb0(%in0: f32, %out: f32):
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0x00000000 : f32
// CHECK-DAG: %[[INF:.*]] = arith.constant 0x7F800000 : f32
// CHECK-DAG: %[[FINITE:.*]] = arith.cmpf olt, %in0, %[[INF]] : f32
// CHECK-DAG: %[[POSITIVE:.*]] = arith.cmpf ogt, %in0, %[[ZERO]] : f32
// CHECK: %[[ORDINARY:.*]] = arith.andi
// CHECK: %[[ONE:.*]] = arith.constant 0x3F800000 : f32
// CHECK-NEXT: %[[SAFE:.*]] = arith.select %[[ORDINARY]], %in0, %[[ONE]] : f32
// CHECK-NEXT: %[[LOG:.*]] = math.log %[[SAFE]] : f32
// The other lanes: the quiet NaN for negatives and NaN, +inf for +inf, -inf for zeros.
// CHECK: %[[NAN:.*]] = arith.constant 0x7FC00000 : f32
// CHECK-NEXT: arith.select %[[POSITIVE]], %in0, %[[NAN]] : f32
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: arith.cmpf oeq, %in0, %[[ZERO]]
// CHECK: %[[RESULT:.*]] = arith.select %[[ORDINARY]], %[[LOG]], %{{.*}} : f32
// CHECK-NEXT: linalg.yield %[[RESULT]] : f32

// F64: %[[SAFE:.*]] = arith.select %{{.*}}, %in0, %{{.*}} : f64
// F64-NEXT: math.log10 %[[SAFE]] : f64

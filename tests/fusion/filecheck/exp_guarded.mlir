// exp keeps arguments whose result is 0 (below -104, 0xC2D00000; -inf included) out of glibc's
// vector expf, which hands a vector holding one to its scalar function lane by lane: they pass 0
// and take 0 after the call (src/fusion/guarded_math.cpp, guardedExp). sigmoid calls exp
// plainly: a guard cost its ordinary arguments 13% (silu's 31%).
// RUN: %neuron_kernel_mlir mlir elementwise exp Float Float 1 c c -- Float | FileCheck %s
// RUN: %neuron_kernel_mlir llvm elementwise exp Float Float 1 c c -- Float | FileCheck %s --check-prefix=LLVM
// RUN: %neuron_kernel_mlir mlir elementwise sigmoid Double Double 1 c c -- Double | FileCheck %s --check-prefix=SIGMOID

// CHECK: %[[ZERO:.*]] = arith.constant 0x00000000 : f32
// CHECK: %[[LOWEST:.*]] = arith.constant 0xC2D00000 : f32
// CHECK: %[[LOW:.*]] = arith.cmpf olt, %in0, %[[LOWEST]] : f32
// CHECK: %[[ARG:.*]] = arith.select %[[LOW]], %[[ZERO]], %in0 : f32
// CHECK: %[[EXP:.*]] = math.exp %[[ARG]] : f32
// CHECK: %[[RESULT:.*]] = arith.select %[[LOW]], %[[ZERO]], %[[EXP]] : f32
// CHECK: linalg.yield %[[RESULT]] : f32

// LLVM: call <16 x float> @_ZGVeN16v_expf
// LLVM-NOT: call float @expf

// SIGMOID: %[[NEG:.*]] = arith.negf %in0 : f64
// SIGMOID-NOT: arith.select
// SIGMOID: math.exp %[[NEG]] : f64
// SIGMOID: arith.divf

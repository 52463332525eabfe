// where(condition, self, other) with a bool condition stored as bytes, lowered by mlir-opt-19
// running the engine's pipeline: the byte is compared with zero and selects between the inputs.
// RUN: %neuron_kernel_mlir mlir elementwise where Float Float 1 c c c c -- Bool Float Float \
// RUN:   | mlir-opt --pass-pipeline="$(%neuron_kernel_mlir pipeline)" \
// RUN:   | FileCheck %s

// CHECK: llvm.func @kernel(
// CHECK-NOT: linalg.generic
// CHECK: %[[BYTE:.*]] = llvm.load {{.*}} -> i8
// CHECK: %[[TRUTH:.*]] = llvm.icmp "ne" %[[BYTE]], {{.*}} : i8
// CHECK: llvm.select %[[TRUTH]], {{.*}} : i1, f32

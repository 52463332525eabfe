// A float32 softmax row vectorizes all three passes in the optimized LLVM IR: the max pass is a
// vector fmaximum reduction (NaN-propagating, emitted as llvm.intr.maximum because arith-expand
// would turn arith.maximumf into a compare-and-select chain LLVM leaves scalar), the exp-sum
// pass calls libmvec's vector expf at the float32 sum's full width (16 lanes where the host has
// AVX-512, the variant the compiler adds to LLVM's table), and the write pass multiplies by the
// hoisted reciprocal.
// RUN: %neuron_kernel_mlir llvm reduction softmax Float 1 1 Float -- Float | FileCheck %s

// CHECK: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// CHECK-DAG: call <{{[0-9]+}} x float> @llvm.maximum.v{{[0-9]+}}f32
// CHECK-DAG: call float @llvm.vector.reduce.fmaximum.v{{[0-9]+}}f32
// CHECK-DAG: call <[[WIDTH:[0-9]+]] x float> @_ZGV{{.*}}_expf
// CHECK-DAG: fadd reassoc <[[WIDTH]] x float>
// CHECK-DAG: fmul <{{[0-9]+}} x float>

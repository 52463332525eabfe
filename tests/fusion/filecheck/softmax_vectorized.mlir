// A float32 softmax row vectorizes all three passes in the optimized LLVM IR: the max pass is a
// vector fmax reduction (llvm.intr.maxnum with nnan and nsz, its NaNs found by a flag beside it:
// LLVM vectorizes a maxnum reduction only with those flags, and the NaN-propagating fmaximum
// reduction it does vectorize blends every element and ends each row serially), the exp-sum
// pass calls libmvec's vector expf at the float32 sum's full width (16 lanes where the host has
// AVX-512, the variant the compiler adds to LLVM's table), and the write pass multiplies by the
// hoisted reciprocal.
// RUN: %neuron_kernel_mlir llvm reduction softmax Float 1 1 Float -- Float | FileCheck %s

// CHECK: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// CHECK-DAG: call nnan nsz <{{[0-9]+}} x float> @llvm.maxnum.v{{[0-9]+}}f32
// CHECK-DAG: call nnan nsz float @llvm.vector.reduce.fmax.v{{[0-9]+}}f32
// CHECK-DAG: call <[[WIDTH:[0-9]+]] x float> @_ZGV{{.*}}_expf
// CHECK-DAG: fadd reassoc <[[WIDTH]] x float>
// CHECK-DAG: fmul <{{[0-9]+}} x float>

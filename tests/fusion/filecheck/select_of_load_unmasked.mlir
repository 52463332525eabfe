// ReLU's backward, select(x <= 0, 0, grad), keeps its vector loads plain: each selected load goes
// through a freeze, so the x86 code generator emits a load and a blend instead of folding the
// select into a masked load (unmasked_selects.h: 1.5x slower streaming on this project's AMD
// machines).
// RUN: %neuron_kernel_mlir llvm elementwise threshold_backward Float Float 1 c c c -- Float Float | FileCheck %s

// CHECK: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// CHECK: [[LOADED:%[a-z0-9.]+]] = load <{{[0-9]+}} x float>
// CHECK: [[FROZEN:%[a-z0-9.]+]] = freeze <{{[0-9]+}} x float> [[LOADED]]
// CHECK: select <{{[0-9]+}} x i1> {{%[a-z0-9.]+}}, <{{[0-9]+}} x float> zeroinitializer, <{{[0-9]+}} x float> [[FROZEN]]
// CHECK-NOT: select <{{[0-9]+}} x i1> {{%[a-z0-9.]+}}, <{{[0-9]+}} x float> zeroinitializer, <{{[0-9]+}} x float> %wide.load{{[0-9]*}}{{$}}

// relu, select(x < 0, 0, x), reads its load in the compare too: no freeze, so the code generator
// still makes a max with the load folded in.
// RUN: %neuron_kernel_mlir llvm elementwise relu Float Float 1 c c -- Float | FileCheck %s --check-prefix=RELU
// RELU: define void @neuron_kernel(ptr {{.*}}, i64 {{.*}}, i64 {{.*}})
// RELU: fcmp olt <{{[0-9]+}} x float>
// RELU-NOT: freeze

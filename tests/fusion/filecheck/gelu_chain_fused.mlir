// GELU (tanh form) written as nine primitive ops, fused (fusion/fused_kernel.h): one loop nest
// (one linalg.generic), the intermediates SSA values of its body, one stored output and no
// buffer of any other; the window input x is one memref however many ops read it.
// RUN: %neuron_kernel_mlir mlir fused 1 'mul(x0,s1)' 'mul(m0,x0)' 'mul(m1,x0)' 'add(x0,m2)' 'mul(m3,s2)' 'tanh(m4)' 'add(m5,s3)' 'mul(x0,s4)' 'mul(m7,m6)!' | FileCheck %s
// RUN: %neuron_kernel_mlir llvm fused 1 'mul(x0,s1)' 'mul(m0,x0)' 'mul(m1,x0)' 'add(x0,m2)' 'mul(m3,s2)' 'tanh(m4)' 'add(m5,s3)' 'mul(x0,s4)' 'mul(m7,m6)!' | FileCheck %s --check-prefix=LLVM

// CHECK: func.func @kernel(%a0: memref<?xf32, strided<[1], offset: ?>>, %a1: memref<?xf32, strided<[1], offset: ?>>, %a2: memref<f32
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic
// CHECK-NEXT: ins(%s1, %s2, %s3, %s4, %s5 :
// CHECK-NEXT: outs(%s0 : memref<?xf32, strided<[1], offset: ?>>)
// CHECK: func.call @tanhf
// CHECK: linalg.yield %{{v[0-9]+}} : f32
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc

// Vectorized, tanh through libmvec's vector variant, and its memrefs declared free of aliasing:
// no runtime overlap check before (or after) the vector loop. The entry realigns its stack
// (compiler.cpp, kRealignedStack): the vectors it spills around each call never straddle cache
// lines.
// LLVM: define void @neuron_kernel({{.*}}) {{.*}}#[[ENTRY:[0-9]+]] {
// LLVM-NOT: vector.memcheck
// LLVM: call <{{[0-9]+}} x float> @_ZGV{{[a-z]}}N{{[0-9]+}}v_tanhf
// LLVM-NOT: vector.memcheck
// LLVM: attributes #[[ENTRY]] = { {{.*}}"stackrealign"

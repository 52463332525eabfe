#pragma once
// A step before LLVM's optimization (compiler.cpp): the vector width of kernels that stream memory.

#include <string>

namespace llvm {
class Module;
} // namespace llvm

namespace torchneuron::fusion {

// The `passthrough` attribute an elementwise kernel builder gives `@kernel` (kernel_builder.cpp,
// fused_kernel.cpp): one loop over elements, no reduction.
constexpr const char* kElementwiseKernel = "neuron-elementwise";

// Gives an elementwise kernel (kElementwiseKernel) that calls no math function LLVM's
// "prefer-vector-width"="256" (and its entry point `entry`, into which it is inlined): its loop
// is then vectorized with 256-bit vectors where the host has 512-bit ones. Such a loop does a few
// operations per element and streams memory, and on this project's machines (AMD EPYC, Zen 4,
// which issues a 512-bit operation as two 256-bit halves) it streamed faster so: measured with
// bench/activation_backward.py (16M floats, 1 thread, against stock's kernels in the same
// process, 2026-12-07) hardtanh_backward 11.3-11.5 ms with 512-bit vectors, 7.4-7.7 with 256-bit
// (stock 7.7-7.8), add 8.2-8.4 against 7.4-7.7 (stock 7.4-7.5). A kernel that calls vector math
// (a fused GELU's tanhf, exp, erf) keeps the host's width: a fused GELU ran 1.6x-2.3x slower
// with 256-bit vectors. Reductions keep it too. Returns whether the kernel was marked.
bool preferHalfWidthVectorsForStreaming(llvm::Module& module, const std::string& entry);

} // namespace torchneuron::fusion

#pragma once
// Calls in half or bfloat16 that the compiled kernels leave to ATen on purpose. ATen's CPU kernels
// for sums, means, norms, softmax, layer norm and the floating division ops round some of their
// intermediate steps to the narrow dtype; the device's kernels would compute them in float32 and
// round once, a different result (docs/compiled-eager.md, "Matching the CPU"), so they decline
// those calls. op_routing.cpp runs them as library calls (ATen's kernel on device memory): the
// CPU's bits, without the fallback's warning, and under the adaptive tracer without ending the
// window.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchneuron {

// True when an argument of `op`'s call on top of `stack` is a half or bfloat16 tensor (or a
// dtype argument names one), and no argument is complex: complex calls keep the fallback.
bool isReducedPrecisionCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

} // namespace torchneuron

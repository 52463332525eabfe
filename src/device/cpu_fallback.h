#pragma once
// The boxed CPU fallback (DESIGN.md decision 9), also used by native kernels for calls they
// cannot run.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchneuron {

// Runs the op's CPU kernel on host views of device memory under NEURON_FALLBACK's policy
// (warn once per op, silent, or error), counting it as a fallback launch.
void runCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace torchneuron

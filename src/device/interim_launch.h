#pragma once
// Interim launches (issue 15, "no cold-start penalty"): a compiled-route op whose kernel is not
// loaded yet runs at once as ATen's CPU kernel on host views of the same memory, while its kernel
// compiles on the background thread (cache/background_compiles.h); its later calls launch the
// kernel. They count as `interim` launches in metrics(), never as fallbacks, and do not warn.
//
// An interim call's results are ATen's CPU results: they may differ from the kernel's in the last
// bits of transcendental functions, and in the few cases where the device deliberately differs
// from ATen's CPU (docs/compiled-eager.md, "Matching the CPU": var of equal huge values, fmod by
// tiny divisors, signed zeros of maximum/minimum). The switch point depends on how long compiles
// take, so where that matters calls wait for their compiles instead: NEURON_INTERIM_LAUNCHES=0,
// or deterministic mode (torch.use_deterministic_algorithms(True), or NEURON_DETERMINISTIC=1),
// in which a run is bitwise reproducible. Calls in float16 or bfloat16 always wait: PyTorch
// 1.13's CPU lacks some of the kernels the device compiles for them (plan_executor.cpp).
//
// Scope: only a call made inside an InterimLaunchScope (routeCall's compiled route, device copies)
// may decline for a kernel that is not ready; plan_executor.cpp asks interimLaunchAllowedHere().
// The scope's state is thread-local; a nested scope (an op a kernel calls) has its own.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchneuron {

// NEURON_INTERIM_LAUNCHES (default on), off in deterministic mode. Read per call (cheap).
bool interimLaunchesEnabled();

class InterimLaunchScope {
public:
  InterimLaunchScope();
  ~InterimLaunchScope();
  InterimLaunchScope(const InterimLaunchScope&) = delete;
  InterimLaunchScope& operator=(const InterimLaunchScope&) = delete;
  // Whether a call in this scope declined because a kernel is compiling (requestInterimLaunch()).
  bool requested() const;

private:
  bool saved_allowed_;
  bool saved_requested_;
};

// Inside a scope, with interim launches enabled: a plan whose kernel is not ready may decline.
bool interimLaunchAllowedHere();
// Called by the plan that declines; the scope's owner then runs the call interim.
void requestInterimLaunch();

// Runs the op's CPU kernel on host views (a sync point of the adaptive tracer), counted as an
// interim launch of the op.
void runInterimOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace torchneuron

#pragma once
// Interim launches (issue 15, "no cold-start penalty"): a compiled-route op whose kernel is not
// loaded yet runs at once as ATen's CPU kernel on host views of the same memory, while its kernel
// compiles on the background thread (cache/background_compiles.h); its later calls launch the
// kernel. They count as `interim` launches in metrics(), never as fallbacks, and do not warn.
//
// The switch point depends on how long compiles take, so results may differ in the last bits of
// transcendental functions between runs. Where that matters calls wait for their compiles
// instead: NEURON_INTERIM_LAUNCHES=0, or deterministic mode (torch.use_deterministic_algorithms
// (True), or NEURON_DETERMINISTIC=1), in which a run is bitwise reproducible.
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

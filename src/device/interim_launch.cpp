#include "device/interim_launch.h"

#include "device/host_execution.h"
#include "device/metrics.h"
#include "support/deterministic_mode.h"
#include "support/settings.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

struct ScopeState {
  bool allowed = false;
  bool requested = false;
};
thread_local ScopeState scope_state;

} // namespace

bool interimLaunchesEnabled() { return settings().interim_launches && !deterministicMode(); }

InterimLaunchScope::InterimLaunchScope()
    : saved_allowed_(scope_state.allowed), saved_requested_(scope_state.requested) {
  scope_state.allowed = true;
  scope_state.requested = false;
}

InterimLaunchScope::~InterimLaunchScope() {
  scope_state.allowed = saved_allowed_;
  scope_state.requested = saved_requested_;
}

bool InterimLaunchScope::requested() const { return scope_state.requested; }

bool interimLaunchAllowedHere() { return scope_state.allowed && interimLaunchesEnabled(); }

void requestInterimLaunch() { scope_state.requested = true; }

void runInterimOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  tracer::sync(tracer::SyncCause::kInterim, &op);
  runBoxedOnHost(op, stack);
  recordLaunch(LaunchKind::kInterim, op);
}

} // namespace torchneuron

// The boxed CPU fallback: every op without a neuron kernel runs through ATen's CPU kernel on
// host views of device memory (DESIGN.md decision 9), warning once per op name. op_routing.cpp
// registers it and sends to it the calls compiled kernels decline.

#include "device/cpu_fallback.h"

#include <string>

#include "device/fallback_policy.h"
#include "device/host_execution.h"
#include "device/list_launch.h"
#include "device/metrics.h"
#include "tracer/tracer.h"

namespace torchneuron {

void runCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // An element op of a _foreach_* call (a list launch scope is open) is a part of that library
  // op, which ATen's CPU kernel on host views is: it runs as the library would have run the whole
  // call, neither warned about nor refused as a fallback.
  if (collectingListLaunches()) return runLibraryKernelOnHost(op, stack);
  tracer::sync(tracer::SyncCause::kFallback, &op);
  const c10::OperatorName& name = op.schema().operator_name();
  const std::string full_name =
      name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  const FallbackPolicy policy = currentFallbackPolicy();
  TORCH_CHECK(policy != FallbackPolicy::kError, "[fallback] ", full_name,
              " has no neuron device kernel and NEURON_FALLBACK=error forbids running it on "
              "the CPU");
  // A call ATen rejects (bad arguments the device's kernels declined to judge, such as a dim named
  // twice) raises ATen's error here, with no warning: nothing ran on the CPU.
  runBoxedOnHost(op, stack);
  recordLaunch(LaunchKind::kFallback, full_name);
  switch (policy) {
  case FallbackPolicy::kError:
    break;
  case FallbackPolicy::kWarn:
    if (firstFallbackOf(name.name)) {
      TORCH_WARN("[fallback] ", name.name,
                 " has no neuron device kernel; it ran on the CPU through ATen, on host views "
                 "of device memory (results stay on the device). Shown once per op; "
                 "NEURON_FALLBACK=silent hides this, NEURON_FALLBACK=error forbids fallback.");
    }
    break;
  case FallbackPolicy::kSilent:
    break;
  }
}

} // namespace torchneuron

// The generic library kernel: an op run by ATen's optimized CPU implementation on device memory
// (no copy of the inputs, no warning), counted as "library" in metrics(). Which ops take it is
// op_routing.cpp's list.

#include "device/library_ops.h"

#include "device/metrics.h"
#include "tracer/tracer.h"

namespace torchneuron {

void runLibraryKernelOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // In a window it runs now, at its place: its output metadata come from running it.
  tracer::EagerLibraryStep step(torch::jit::last(*stack, op.schema().arguments().size()));
  runBoxedOnHost(op, stack);
  const c10::OperatorName& name = op.schema().operator_name();
  recordLaunch(LaunchKind::kLibrary,
               name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
}

} // namespace torchneuron

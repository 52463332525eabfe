// The _foreach_* ops (multi-tensor optimizer steps). ATen's CPU kernel for them is a loop over the
// lists (foreach_tensor_*_slow) calling the element op on each element; run on the device tensors
// themselves, every element op is a device call. Eagerly, the element ops' compiled launches
// collect in a list launch scope and run as one table launch (list_launch.h): one compiled launch
// per call, whatever the list's length and sizes. Inside a deferred
// window (adaptive mode, tracer/tracer.h) the same CPU kernel runs on the device tensors
// themselves: it is ATen's loop over the lists (foreach_tensor_*_slow), calling the element op
// on each element, so every element op is a device call whose launches are recorded in the
// window. The window then regroups its batch into independent chains
// (tracer/independent_chains.h), and fusion makes one kernel of each parameter's whole update.

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>

#include "device/library_ops.h"
#include "device/list_launch.h"
#include "device/metrics.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);

// Whether the element ops of the call all route to the device's kernels: every tensor argument
// is a dense device tensor or a CPU scalar (Adagrad's learning rates are 0-dim CPU tensors, which
// device ops take as numbers), and at least one is on the device. Otherwise the host-view path
// runs it, which checks devices and names a mismatch.
bool elementOpsRunOnDevice(c10::ArrayRef<c10::IValue> args) {
  bool any = false;
  auto fits = [&any](const at::Tensor& t) {
    if (isDenseDeviceTensor(t)) return any = true;
    return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.dim() == 0;
  };
  for (const c10::IValue& value : args) {
    if (value.isTensor() && !fits(value.toTensor())) return false;
    if (value.isTensorList())
      for (const at::Tensor& t : value.toTensorList())
        if (!fits(t)) return false;
  }
  return any;
}

} // namespace

void runLibraryForeach(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const bool on_device =
      elementOpsRunOnDevice(torch::jit::last(*stack, op.schema().arguments().size()));
  if (on_device && !tracer::adaptiveEnabled() && listLaunchesEnabled()) {
    ListLaunchScope list_launch;
    op.redispatchBoxed(kCpuKeys, stack);
    // One count per table launch (more than one where an ordering hazard split the list); element
    // calls that did not launch a compiled kernel (no kernel for them, one still compiling)
    // counted themselves.
    for (int64_t launch = list_launch.finish(); launch > 0; --launch)
      recordLaunch(LaunchKind::kCompiled, op);
    return;
  }
  // NEURON_ADAPTIVE_DEBUG's check reruns a recorded call on CPU copies and compares its tensor
  // results; a list call's results are lists, so under it list calls stay library steps.
  if (!on_device || !tracer::deferringLaunches() || tracer::debugChecking())
    return runLibraryKernelOnHost(op, stack);
  tracer::noteListCall();
  op.redispatchBoxed(kCpuKeys, stack);
}

} // namespace torchneuron

// The _foreach_* ops (multi-tensor optimizer steps) as library kernels. Eagerly, ATen's CPU
// kernel runs over host views of the lists: one library launch per call. Inside a deferred
// window (adaptive mode, tracer/tracer.h) the same CPU kernel runs on the device tensors
// themselves: it is ATen's loop over the lists (foreach_tensor_*_slow), calling the element op
// on each element, so every element op is a device call whose launches are recorded in the
// window. The window then regroups its batch into independent chains
// (tracer/independent_chains.h), and fusion makes one kernel of each parameter's whole update.

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>

#include "device/library_ops.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

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
  // NEURON_ADAPTIVE_DEBUG's check reruns a recorded call on CPU copies and compares its tensor
  // results; a list call's results are lists, so under it list calls stay library steps.
  if (!tracer::deferringLaunches() || tracer::debugChecking() ||
      !elementOpsRunOnDevice(torch::jit::last(*stack, op.schema().arguments().size())))
    return runLibraryKernelOnHost(op, stack);
  tracer::noteListCall();
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

} // namespace torchneuron

// The generic library kernel: an op run by ATen's optimized CPU implementation on device memory
// (no copy of the inputs, no warning), counted as "library" in metrics(). Which ops take it is
// op_routing.cpp's list.

#include "device/library_ops.h"

#include "device/device.h"
#include "device/metrics.h"
#include "support/made_once.h"
#include "tracer/tracer.h"

namespace torchneuron {

bool isDenseDeviceTensor(const at::Tensor& t) {
  return t.defined() && t.device().type() == kNeuronDeviceType && t.layout() == at::kStrided;
}

void runLibraryKernelOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // In a window it runs now, at its place: its output metadata come from running it.
  tracer::EagerLibraryStep step;
  runBoxedOnHost(op, stack);
  recordLaunch(LaunchKind::kLibrary, op);
}

const c10::OperatorHandle& convolutionCallOfOverrideable(torch::jit::Stack* /*stack*/) {
  // The two schemas are the same.
  static MadeOnce<const c10::OperatorHandle> convolution; // fork-safe (made_once.h)
  return convolution.get([] {
    return new c10::OperatorHandle(
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", ""));
  });
}

const c10::OperatorHandle& convolutionBackwardCallOfOverrideable(torch::jit::Stack* stack) {
  static MadeOnce<const c10::OperatorHandle> made; // fork-safe (made_once.h)
  const c10::OperatorHandle& convolution_backward = made.get([] {
    return new c10::OperatorHandle(
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", ""));
  });
  // convolution_backward takes bias_sizes after weight, which the overrideable op lacks: the bias
  // has one value per output channel, so its gradient is needed exactly when output_mask[2] is.
  constexpr size_t kOverrideableArguments = 10;
  const size_t begin = stack->size() - kOverrideableArguments;
  const at::Tensor& grad_output = (*stack)[begin].toTensor();
  const bool bias_gradient = (*stack)[begin + 9].toBoolList().get(2);
  c10::IValue bias_sizes;
  if (bias_gradient) bias_sizes = c10::IValue(std::vector<int64_t>{grad_output.size(1)});
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(begin + 3), std::move(bias_sizes));
  return convolution_backward;
}

} // namespace torchneuron

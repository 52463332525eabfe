// max_pool2d_with_indices as one compiled reduction: the input, contiguous [N, C, H, W] (or
// [C, H, W]), viewed as [N, C, OH, OW, KH, KW] through its strides (window (oh, ow)'s element
// (kh, kw) at (oh * sH + kh * dH, ow * sW + kw * dW)), reduced over its last two dimensions by
// the registry's max_pool_window (fusion/reduction_ops.cpp), which yields the maxima and their
// places in the input plane, ih * W + iw, as ATen's kernel does.
//
// Calls it declines run ATen's kernel on device memory (the library route; op_routing.cpp):
// padding (a window's place outside the input has no element to view), ceil_mode windows that
// reach past the input, channels-last or other strided inputs (ATen's result keeps their memory
// format), dtypes other than float and double (ATen's CPU kernel has no half), empty inputs, and
// every argument ATen rejects (its own error then).

#include <ATen/ATen.h>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/reduction_launch.h"

namespace torchneuron {
namespace {

// A pooling argument of one or two values (ATen's int[2] rule), or nullopt.
c10::optional<std::array<int64_t, 2>> pair(const std::vector<int64_t>& values) {
  if (values.size() == 1) return std::array<int64_t, 2>{values[0], values[0]};
  if (values.size() == 2) return std::array<int64_t, 2>{values[0], values[1]};
  return c10::nullopt;
}

struct Window {
  std::array<int64_t, 2> kernel{}, stride{}, dilation{};
  std::array<int64_t, 2> output{}; // OH, OW
};

// ATen's output size (pooling_output_shape) for padding 0, or nullopt when a window would reach
// past the input (ceil_mode's last window) or no window fits (ATen's error).
c10::optional<int64_t> outputSize(int64_t input, int64_t kernel, int64_t stride, int64_t dilation,
                                  bool ceil_mode) {
  const int64_t span = dilation * (kernel - 1) + 1;
  if (input < span) return c10::nullopt;
  int64_t output = (input - span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (output - 1) * stride >= input) --output;
  if ((output - 1) * stride + span > input) return c10::nullopt;
  return output;
}

c10::optional<Window> windowOf(const at::Tensor& input, const torch::jit::Stack& args) {
  const auto kernel = pair(args[1].toIntVector());
  const std::vector<int64_t> stride_given = args[2].toIntVector();
  const auto stride = stride_given.empty() ? kernel : pair(stride_given);
  const auto padding = pair(args[3].toIntVector());
  const auto dilation = pair(args[4].toIntVector());
  const bool ceil_mode = args[5].toBool();
  if (!kernel || !stride || !padding || !dilation) return c10::nullopt;
  Window window{*kernel, *stride, *dilation, {}};
  for (int d = 0; d < 2; ++d) {
    if (window.kernel[d] <= 0 || window.stride[d] <= 0 || window.dilation[d] <= 0 ||
        (*padding)[d] != 0)
      return c10::nullopt;
    const auto size = outputSize(input.size(input.dim() - 2 + d), window.kernel[d],
                                 window.stride[d], window.dilation[d], ceil_mode);
    if (!size) return c10::nullopt;
    window.output[d] = *size;
  }
  return window;
}

bool supportedInput(const at::Tensor& input) {
  return input.device().type() == kNeuronDeviceType && input.layout() == at::kStrided &&
         (input.dim() == 3 || input.dim() == 4) && input.numel() > 0 &&
         (input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble) &&
         input.is_contiguous() && !input.is_conj() && !input.is_neg();
}

} // namespace

bool runCompiledMaxPool2d(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kCompiled, "aten::max_pool2d_with_indices");
  constexpr size_t kArguments = 6;
  const torch::jit::Stack args(stack->end() - kArguments, stack->end());
  const at::Tensor input = args[0].toTensor();
  if (!supportedInput(input)) return false;
  const c10::optional<Window> window = windowOf(input, args);
  if (!window) return false;

  // [N, C, H, W] (a 3-D input as N = 1) viewed as the windows' elements.
  const int64_t batch = input.dim() == 4 ? input.size(0) : 1;
  const int64_t channels = input.size(-3), height = input.size(-2), width = input.size(-1);
  const at::Tensor windows = input.as_strided(
      {batch, channels, window->output[0], window->output[1], window->kernel[0], window->kernel[1]},
      {channels * height * width, height * width, window->stride[0] * width, window->stride[1],
       window->dilation[0] * width, window->dilation[1]},
      input.storage_offset());
  ReductionCall call;
  call.op = fusion::findReductionOp("max_pool_window");
  call.inputs = {windows};
  call.dims = {4, 5};
  call.compute = input.scalar_type();
  call.output_dtypes = {input.scalar_type(), at::kLong};
  call.params = {static_cast<double>(height * width)};
  call.needs_elements = true;
  const c10::optional<TensorList> out = launchReduction(call, launches);
  if (!out) return false;
  std::vector<int64_t> shape = {channels, window->output[0], window->output[1]};
  if (input.dim() == 4) shape.insert(shape.begin(), batch);
  torch::jit::drop(*stack, kArguments);
  torch::jit::push(*stack, (*out)[0].view(shape), (*out)[1].view(shape));
  return true;
}

} // namespace torchneuron

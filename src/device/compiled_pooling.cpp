// max_pool2d_with_indices as one compiled reduction: the input, contiguous [N, C, H, W] (or
// [C, H, W]), viewed as [N, C, OH, OW, KH, KW] through its strides (window (oh, ow)'s element
// (kh, kw) at (oh * sH + kh * dH, ow * sW + kw * dW)), reduced over its last two dimensions by
// one of the registry's window reductions (fusion/reduction_ops.cpp), which yield the maxima and
// their places in the input plane, ih * W + iw, as ATen's kernel does:
// - windows inside the input (no padding, no ceil_mode window past it): max_pool_window, which
//   derives the place from the element's offset;
// - otherwise the input is copied into a plane padded with -inf as far as the windows reach, and
//   max_pool_window_masked reads beside it a plane of places, -1 on the padding: its elements
//   are skipped as ATen's clipped windows skip them. The places are exact in the input's dtype
//   below 2^24 elements a plane (larger planes are declined).
//
// Calls it declines run ATen's kernel on device memory (the library route; op_routing.cpp):
// inputs ATen does not see as contiguous (channels-last, strided; ATen's result keeps their memory
// format), dtypes other than float and double (ATen's CPU kernel has no half), empty inputs, a
// window with no element inside the input (padding and dilation; ATen gives it a place outside
// the plane), padded pools with a single window, and every argument ATen rejects (its own error
// then).

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

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
  std::array<int64_t, 2> kernel{}, stride{}, padding{}, dilation{};
  std::array<int64_t, 2> output{}; // OH, OW
  std::array<int64_t, 2> reach{};  // rows and columns from the padded input's start the windows
                                   // read: (output - 1) * stride + dilation * (kernel - 1) + 1
  // Whether every window lies inside the input (no padding read).
  bool inside(int64_t height, int64_t width) const {
    return padding[0] == 0 && padding[1] == 0 && reach[0] <= height && reach[1] <= width;
  }
};

// ATen's output size (pooling_output_shape), or nullopt where ATen raises (no window fits).
c10::optional<int64_t> outputSize(int64_t input, int64_t kernel, int64_t pad, int64_t stride,
                                  int64_t dilation, bool ceil_mode) {
  const int64_t numerator =
      input + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  if (numerator < 0) return c10::nullopt;
  int64_t output = numerator / stride + 1;
  if (ceil_mode && (output - 1) * stride >= input + pad) --output;
  if (output < 1) return c10::nullopt;
  return output;
}

// Whether each of the `output` windows along one dimension has an element inside the input.
// ATen's kernel gives a window without one the place its clipped start moved to, outside the
// plane; such calls keep ATen's kernel.
bool everyWindowReachesTheInput(int64_t input, int64_t output, int64_t kernel, int64_t stride,
                                int64_t pad, int64_t dilation) {
  for (int64_t o = 0; o < output; ++o) {
    const int64_t start = o * stride - pad;
    const int64_t first_inside = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    if (first_inside >= kernel || start + first_inside * dilation >= input) return false;
  }
  return true;
}

// The window of a call ATen accepts (pool2d_shape_check's rules; ATen narrows each argument to
// int and raises past it), or nullopt.
c10::optional<Window> windowOf(const at::Tensor& input, const torch::jit::Stack& args) {
  const auto kernel = pair(args[1].toIntVector());
  const std::vector<int64_t> stride_given = args[2].toIntVector();
  const auto stride = stride_given.empty() ? kernel : pair(stride_given);
  const auto padding = pair(args[3].toIntVector());
  const auto dilation = pair(args[4].toIntVector());
  const bool ceil_mode = args[5].toBool();
  if (!kernel || !stride || !padding || !dilation) return c10::nullopt;
  Window window{*kernel, *stride, *padding, *dilation, {}, {}};
  for (int d = 0; d < 2; ++d) {
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    if (window.kernel[d] <= 0 || window.stride[d] <= 0 || window.dilation[d] <= 0 ||
        window.padding[d] < 0 || window.padding[d] > window.kernel[d] / 2 ||
        std::max({window.kernel[d], window.stride[d], window.dilation[d]}) > kIntMax)
      return c10::nullopt;
    const auto size =
        outputSize(input.size(input.dim() - 2 + d), window.kernel[d], window.padding[d],
                   window.stride[d], window.dilation[d], ceil_mode);
    if (!size ||
        !everyWindowReachesTheInput(input.size(input.dim() - 2 + d), *size, window.kernel[d],
                                    window.stride[d], window.padding[d], window.dilation[d]))
      return c10::nullopt;
    window.output[d] = *size;
    window.reach[d] =
        (*size - 1) * window.stride[d] + window.dilation[d] * (window.kernel[d] - 1) + 1;
  }
  return window;
}

// `planes` ([N, C, H, W]; rows and columns contiguous, N and C any stride, 0 included) as the
// windows' elements.
at::Tensor windowsOf(const at::Tensor& planes, const Window& window) {
  // A dimension of one window (or one element) takes no step: stride 0, whatever the argument.
  auto step = [](int64_t count, int64_t by, int64_t stride) { return count > 1 ? by * stride : 0; };
  const int64_t row = planes.stride(2), column = planes.stride(3);
  return planes.as_strided({planes.size(0), planes.size(1), window.output[0], window.output[1],
                            window.kernel[0], window.kernel[1]},
                           {planes.stride(0), planes.stride(1),
                            step(window.output[0], window.stride[0], row),
                            step(window.output[1], window.stride[1], column),
                            step(window.kernel[0], window.dilation[0], row),
                            step(window.kernel[1], window.dilation[1], column)},
                           planes.storage_offset());
}

// The places of a padded plane in the input plane (ih * W + iw; -1 on the padding), as `dtype` on
// `device`. Made on the CPU (a few thousand numbers) and copied over, which in adaptive mode ends
// the tracer's window; so each thread keeps the last few it made, and a recurring pool reuses its
// plane. The list is never freed (a thread-local destructor could run after the device's memory
// is gone).
at::Tensor placesPlane(int64_t height, int64_t width, std::array<int64_t, 2> padding,
                       int64_t padded_height, int64_t padded_width, at::ScalarType dtype,
                       c10::Device device) {
  struct Made {
    std::array<int64_t, 6> geometry;
    at::ScalarType dtype;
    c10::Device device;
    at::Tensor places;
  };
  constexpr size_t kKept = 8;
  thread_local std::vector<Made>* made = new std::vector<Made>();
  const std::array<int64_t, 6> geometry = {height,     width,         padding[0],
                                           padding[1], padded_height, padded_width};
  for (const Made& m : *made)
    if (m.geometry == geometry && m.dtype == dtype && m.device == device) return m.places;
  const at::Tensor row = at::arange(padded_height, at::kLong) - padding[0];
  const at::Tensor column = at::arange(padded_width, at::kLong) - padding[1];
  const at::Tensor inside =
      (row.ge(0) & row.lt(height)).unsqueeze(1) & (column.ge(0) & column.lt(width)).unsqueeze(0);
  at::Tensor places =
      at::where(inside, row.unsqueeze(1) * width + column.unsqueeze(0), at::full({}, -1, at::kLong))
          .to(dtype)
          .to(device);
  if (made->size() == kKept) made->erase(made->begin());
  made->push_back(Made{geometry, dtype, device, places});
  return places;
}

// The input ([N, C, H, W]) in a plane padded with -inf as far as the windows reach, and that
// plane's places in the input (ih * W + iw; -1 on the padding), broadcast over N and C.
std::pair<at::Tensor, at::Tensor> paddedPlanes(const at::Tensor& input, const Window& window) {
  const int64_t height = input.size(2), width = input.size(3);
  const int64_t padded_height = std::max(window.reach[0], height + window.padding[0]);
  const int64_t padded_width = std::max(window.reach[1], width + window.padding[1]);
  at::Tensor padded =
      at::empty({input.size(0), input.size(1), padded_height, padded_width}, input.options());
  const double minus_infinity = -std::numeric_limits<double>::infinity();
  auto fill = [&](at::Tensor strip) {
    if (strip.numel() > 0) strip.fill_(minus_infinity);
  };
  fill(padded.narrow(2, 0, window.padding[0]));
  fill(padded.narrow(2, window.padding[0] + height, padded_height - window.padding[0] - height));
  at::Tensor rows = padded.narrow(2, window.padding[0], height);
  fill(rows.narrow(3, 0, window.padding[1]));
  fill(rows.narrow(3, window.padding[1] + width, padded_width - window.padding[1] - width));
  rows.narrow(3, window.padding[1], width).copy_(input);

  const at::Tensor places = placesPlane(height, width, window.padding, padded_height, padded_width,
                                        input.scalar_type(), input.device());
  return {padded, places.expand({input.size(0), input.size(1), padded_height, padded_width})};
}

bool supportedInput(const at::Tensor& input) {
  return input.device().type() == kNeuronDeviceType && input.layout() == at::kStrided &&
         (input.dim() == 3 || input.dim() == 4) && input.numel() > 0 &&
         (input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble) &&
         input.is_contiguous() && input.suggest_memory_format() == at::MemoryFormat::Contiguous &&
         !input.is_conj() && !input.is_neg();
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

  const at::Tensor planes = input.dim() == 4 ? input : input.unsqueeze(0); // [N, C, H, W]
  const int64_t height = planes.size(2), width = planes.size(3);
  ReductionCall call;
  if (window->inside(height, width)) {
    call.op = fusion::findReductionOp("max_pool_window");
    call.inputs = {windowsOf(planes, *window)};
    call.params = {static_cast<double>(height * width)};
  } else {
    // Places above 2^24 are not exact in float32 (the padded plane's own size bounds them).
    if (input.scalar_type() == at::kFloat && height * width >= (int64_t{1} << 24)) return false;
    // One window a plane: the places plane, broadcast over N and C, would not step alike with
    // the input between windows (the plan refuses it), so decline before copying anything.
    if (window->output[0] * window->output[1] == 1 && planes.size(0) * planes.size(1) > 1)
      return false;
    const auto [padded, places] = paddedPlanes(planes, *window);
    call.op = fusion::findReductionOp("max_pool_window_masked");
    call.inputs = {windowsOf(padded, *window), windowsOf(places, *window)};
  }
  call.dims = {4, 5};
  call.compute = input.scalar_type();
  call.output_dtypes = {input.scalar_type(), at::kLong};
  call.needs_elements = true;
  const c10::optional<TensorList> out = launchReduction(call, launches);
  if (!out) return false;
  std::vector<int64_t> shape = {planes.size(1), window->output[0], window->output[1]};
  if (input.dim() == 4) shape.insert(shape.begin(), planes.size(0));
  torch::jit::drop(*stack, kArguments);
  torch::jit::push(*stack, (*out)[0].view(shape), (*out)[1].view(shape));
  return true;
}

} // namespace torchneuron

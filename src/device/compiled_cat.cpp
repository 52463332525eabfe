// cat as compiled copies, planned as one LaunchPlan: the output (given, resized if needed, or
// new) and one copy launch per non-empty input into its slice of the output. Calls outside the
// common case (legacy empty inputs, mismatched shapes, inputs aliasing the output) run on the
// CPU fallback, which raises ATen's errors or handles them as ATen does.

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>

#include "device/compiled_ops.h"
#include "device/copy_plan.h"
#include "device/device.h"
#include "device/kernel_operand.h"
#include "device/plan_executor.h"
#include "fusion/element_type.h"

namespace torchneuron {
namespace {

bool isCatInput(const at::Tensor& t, const at::Tensor& first) {
  return isKernelOperand(t) && t.device() == first.device() && t.dim() == first.dim();
}

// The plan of cat(tensors, dim) into `out` (given) or a new tensor; inputs by position in
// `tensors`.
c10::optional<LaunchPlan> planCat(const std::vector<at::Tensor>& tensors, int64_t dim,
                                  const at::Tensor* out) {
  if (tensors.empty() || tensors[0].dim() == 0) return c10::nullopt;
  const at::Tensor& first = tensors[0];
  if (first.device().type() != kNeuronDeviceType) return c10::nullopt;
  dim = at::maybe_wrap_dim(dim, first.dim());
  at::native::ResultTypeState promotion;
  DimVector shape(first.sizes().begin(), first.sizes().end());
  shape[dim] = 0;
  for (const at::Tensor& t : tensors) {
    if (!isCatInput(t, first)) return c10::nullopt;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (d != dim && t.size(d) != first.size(d)) return c10::nullopt;
    shape[dim] += t.size(dim);
    promotion = at::native::update_result_type_state(t, promotion);
  }
  const at::ScalarType dtype = at::native::result_type(promotion);
  // A new or resized output's layout, as ATen's cat (cat_compute_output_memory_format): the
  // inputs' suggested memory format when they all suggest one, else contiguous.
  c10::MemoryFormat format = first.suggest_memory_format();
  for (const at::Tensor& t : tensors)
    if (t.suggest_memory_format() != format) format = c10::MemoryFormat::Contiguous;
  DimVector fresh_strides = contiguousStrides(shape);
  if (format != c10::MemoryFormat::Contiguous) {
    const std::vector<int64_t> strides = format == c10::MemoryFormat::ChannelsLast
                                             ? c10::get_channels_last_strides_2d(shape)
                                             : c10::get_channels_last_strides_3d(shape);
    fresh_strides.assign(strides.begin(), strides.end());
  }

  LaunchPlan plan;
  PlannedOutput& output = plan.outputs.emplace_back();
  output.device = first.device();
  output.sizes = shape;
  ViewGeometry written;
  if (out) {
    output.given = 0;
    output.dtype = out->scalar_type();
    if (out->device() != first.device() || !at::canCast(dtype, output.dtype) ||
        !fusion::isKernelDtype(output.dtype))
      return c10::nullopt;
    for (const at::Tensor& t : tensors)
      if (t.is_alias_of(*out)) return c10::nullopt;
    written = ViewGeometry::of(*out);
    output.resize = written.sizes != at::IntArrayRef(shape);
    if (output.resize) {
      output.strides = fresh_strides;
      ViewGeometry resized = ViewGeometry::planned(output.sizes, output.strides,
                                                   written.storage_offset, written.itemsize);
      resized.storage = written.storage;
      resized.tensor = written.tensor;
      written = resized;
    } else {
      output.strides.assign(written.strides.begin(), written.strides.end());
    }
    checkNoInternalOverlap(written); // as ATen's cat.out
  } else {
    output.dtype = dtype;
    if (!fusion::isKernelDtype(dtype)) return c10::nullopt;
    output.strides = fresh_strides;
    output.contiguous = format == c10::MemoryFormat::Contiguous;
    written = ViewGeometry::planned(output.sizes, output.strides, 0,
                                    static_cast<int64_t>(c10::elementSize(dtype)));
  }
  // Each input is copied into its slice of the output: the output's strides, offset along dim.
  int64_t offset = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const int64_t size = tensors[k].size(dim);
    if (size == 0) continue;
    DimVector slice_sizes = output.sizes;
    slice_sizes[dim] = size;
    WrittenOperand slice;
    slice.offset = offset * output.strides[dim];
    slice.view = ViewGeometry::planned(slice_sizes, output.strides,
                                       written.storage_offset + slice.offset, written.itemsize);
    slice.view.storage = written.storage;
    slice.dtype = output.dtype;
    slice.device = output.device;
    c10::optional<LaunchPlan> copy = planCopy(tensors[k], slice);
    if (!copy) return c10::nullopt;
    for (PlannedLaunch& launch : copy->launches) {
      for (PlannedOperand& operand : launch.operands)
        if (operand.role == OperandRole::kInput) operand.index = static_cast<int>(k);
      plan.launches.push_back(std::move(launch));
    }
    offset += size;
  }
  return plan;
}

} // namespace

bool runCompiledCat(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kCompiled, "aten::cat");
  const size_t count = handle.schema().arguments().size();
  auto args = torch::jit::last(*stack, count);
  const std::vector<at::Tensor> tensors = args[0].toTensorVector();
  const int64_t dim = args[1].toInt();
  c10::optional<at::Tensor> out;
  if (count == 3) out = args[2].toTensor();
  const c10::optional<LaunchPlan> plan = planCat(tensors, dim, out ? &*out : nullptr);
  if (!plan) return false;
  c10::optional<TensorList> result = executePlan(
      *plan, tensors, out ? at::ArrayRef<at::Tensor>(*out) : at::ArrayRef<at::Tensor>(), launches);
  if (!result) return false;
  torch::jit::drop(*stack, count);
  torch::jit::push(*stack, std::move((*result)[0]));
  return true;
}

} // namespace torchneuron

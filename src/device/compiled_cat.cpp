// cat as compiled copies: the output is allocated (or resized) once and each input is copied
// into its slice by the copy kernel. Calls outside the common case (legacy empty inputs,
// mismatched shapes, inputs aliasing the output) run on the CPU fallback, which raises ATen's
// errors or handles them as ATen does.

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/kernel_operand.h"
#include "fusion/element_type.h"

namespace torchneuron {
namespace {

bool isCatInput(const at::Tensor& t, const at::Tensor& first) {
  return isKernelOperand(t) && t.device() == first.device() && t.dim() == first.dim();
}

c10::optional<at::Tensor> catCompiled(const std::vector<at::Tensor>& tensors, int64_t dim,
                                      c10::optional<at::Tensor> out) {
  if (tensors.empty() || tensors[0].dim() == 0) return c10::nullopt;
  const at::Tensor& first = tensors[0];
  if (first.device().type() != kNeuronDeviceType) return c10::nullopt;
  dim = at::maybe_wrap_dim(dim, first.dim());
  at::native::ResultTypeState promotion;
  std::vector<int64_t> shape = first.sizes().vec();
  shape[dim] = 0;
  for (const at::Tensor& t : tensors) {
    if (!isCatInput(t, first)) return c10::nullopt;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (d != dim && t.size(d) != first.size(d)) return c10::nullopt;
    shape[dim] += t.size(dim);
    promotion = at::native::update_result_type_state(t, promotion);
  }
  const at::ScalarType dtype = at::native::result_type(promotion);
  at::Tensor result;
  if (out) {
    result = *out;
    if (result.device() != first.device() || !at::canCast(dtype, result.scalar_type()) ||
        !fusion::isKernelDtype(result.scalar_type()))
      return c10::nullopt;
    for (const at::Tensor& t : tensors)
      if (t.is_alias_of(result)) return c10::nullopt;
    at::native::resize_output(result, shape);
    at::assert_no_internal_overlap(result); // as ATen's cat.out
  } else {
    result = at::empty(shape, first.options().dtype(dtype));
  }
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    const int64_t size = t.size(dim);
    if (size > 0 && !copyWithCompiledKernel(t, result.narrow(dim, offset, size), "aten::cat"))
      return c10::nullopt;
    offset += size;
  }
  return result;
}

} // namespace

bool runCompiledCat(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const size_t count = handle.schema().arguments().size();
  auto args = torch::jit::last(*stack, count);
  const std::vector<at::Tensor> tensors = args[0].toTensorVector();
  const int64_t dim = args[1].toInt();
  c10::optional<at::Tensor> out;
  if (count == 3) out = args[2].toTensor();
  c10::optional<at::Tensor> result = catCompiled(tensors, dim, out);
  if (!result) return false;
  torch::jit::drop(*stack, count);
  torch::jit::push(*stack, std::move(*result));
  return true;
}

} // namespace torchneuron

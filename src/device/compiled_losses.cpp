// mse_loss, smooth_l1_loss and huber_loss, forward and backward, as compiled kernels
// (fusion/loss_ops.cpp): the losses' mean or sum is one reduction over every element, without
// the per-element losses ATen writes first; the per-element losses (reduction "none") and the
// input's gradient are one row-wise kernel each, rows only splitting the work.
//
// Declined (the library route runs ATen's kernel, which raises its own errors): dtypes but
// float32 and float64, self and target of different shapes or dtypes (Python's losses broadcast
// them before the call) or on other devices, empty inputs, a reduction other than
// none, mean and sum, smooth L1's beta or Huber's delta not above 0 (ATen's error or L1 loss) or,
// in float32, outside float's normal range (ATen's scalar code uses the double),
// a gradient of another shape or dtype, and a given gradient tensor (smooth L1's and Huber's
// out= backward) that the kernel cannot write (another shape or dtype, shared with an input).

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>

#include <limits>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/reduction_launch.h"

namespace torchneuron {
namespace {

// The loss kinds of fusion/loss_ops.cpp (its constant 0).
enum LossKind : int64_t { kMse = 0, kSmoothL1 = 1, kHuber = 2 };

bool plainDeviceFloats(const at::Tensor& t, const at::Tensor& like) {
  return t.device().type() == kNeuronDeviceType && t.layout() == at::kStrided &&
         t.device() == like.device() && t.scalar_type() == like.scalar_type() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

bool lossOperands(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  return plainDeviceFloats(self, self) && plainDeviceFloats(target, self) &&
         self.sizes() == target.sizes() && self.numel() > 0 &&
         (reduction == at::Reduction::None || reduction == at::Reduction::Mean ||
          reduction == at::Reduction::Sum);
}

// A 0-dim tensor as a view of shape [1] (the kernels' rows need a dimension); others as they are.
at::Tensor withDimension(const at::Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; }

// The row-wise ops run over rows along the last dimension.
c10::SmallVector<int64_t, 6> lastDim(const at::Tensor& self) { return {self.dim() - 1}; }

c10::SmallVector<int64_t, 6> allDims(const at::Tensor& self) {
  c10::SmallVector<int64_t, 6> dims;
  for (int64_t d = 0; d < self.dim(); ++d)
    dims.push_back(d);
  return dims;
}

// A result laid out as ATen's binary TensorIterator lays out one for operands of self's layout:
// self's strides when it is dense, else dense strides in self's order of dimensions (empty_like's
// rule, the iterator's for one input).
at::Tensor elementResult(const at::Tensor& self) { return at::empty_like(self); }

// Whether the kernels' float `limit` (beta, delta) is the one ATen's kernels divide and compare by:
// ATen's scalar code uses the double, its vector code the float; they agree while the float is
// finite and normal.
bool limitFits(double limit, const at::Tensor& self) {
  if (!(limit > 0)) return false;
  if (self.scalar_type() != at::kFloat) return true;
  return limit >= std::numeric_limits<float>::min() && limit <= std::numeric_limits<float>::max();
}

// The loss of (self, target), or an undefined tensor when the kernels decline the call.
at::Tensor lossForward(LossKind kind, const at::Tensor& self, const at::Tensor& target,
                       int64_t reduction, double limit, LaunchCounter* launches) {
  if (!lossOperands(self, target, reduction)) return at::Tensor();
  const at::Tensor input = withDimension(self), other = withDimension(target);
  if (reduction == at::Reduction::None) {
    const at::Tensor loss = elementResult(self);
    if (!launchNamedReduction("pointwise_loss", {input, other}, lastDim(input),
                              {withDimension(loss)}, {limit}, launches, {kind}))
      return at::Tensor();
    return loss;
  }
  const int64_t mean = reduction == at::Reduction::Mean ? 1 : 0;
  // The plan allocates the 0-dim result, so that the eager call cache can capture the call.
  c10::optional<TensorList> result =
      launchNamedReduction("pointwise_loss_reduced", {input, other}, allDims(input), {}, {limit},
                           launches, {kind, mean});
  return result ? (*result)[0] : at::Tensor();
}

// The input's gradient, into `grad_input` when given (else a new contiguous tensor, as ATen's
// zeros_like(LEGACY_CONTIGUOUS_MEMORY_FORMAT)), or an undefined tensor when declined. `norm` is
// ATen's: `scale` / numel for the mean, `scale` for the sum or no reduction.
at::Tensor lossBackward(LossKind kind, const at::Tensor& grad_output, const at::Tensor& self,
                        const at::Tensor& target, int64_t reduction, double scale, double limit,
                        at::Tensor grad_input, LaunchCounter* launches) {
  if (!lossOperands(self, target, reduction) || !plainDeviceFloats(grad_output, self))
    return at::Tensor();
  at::Tensor grad;
  if (reduction == at::Reduction::None) {
    if (grad_output.sizes() != self.sizes()) return at::Tensor();
    grad = grad_output;
  } else {
    // One element broadcast over self; with more dims than self ATen's result takes its shape.
    if (grad_output.numel() != 1 || grad_output.dim() > self.dim()) return at::Tensor();
    grad = grad_output.reshape({}).expand(self.sizes());
  }
  if (grad_input.defined()) {
    if (!plainDeviceFloats(grad_input, self) || grad_input.sizes() != self.sizes())
      return at::Tensor();
  } else {
    grad_input = at::empty(self.sizes(), self.options());
  }
  const double norm =
      reduction == at::Reduction::Mean ? scale / static_cast<double>(self.numel()) : scale;
  const at::Tensor input = withDimension(self);
  if (!launchNamedReduction("pointwise_loss_backward",
                            {withDimension(grad), input, withDimension(target)}, lastDim(input),
                            {withDimension(grad_input)}, {norm, limit}, launches, {kind}))
    return at::Tensor();
  return grad_input;
}

// Replaces the call's `count` arguments on the stack by `result`; false (stack untouched) when
// `result` is undefined.
bool pushResult(torch::jit::Stack* stack, size_t count, at::Tensor result) {
  if (!result.defined()) return false;
  torch::jit::drop(*stack, count);
  torch::jit::push(*stack, std::move(result));
  return true;
}

// A forward call on the stack: (self, target, reduction[, beta or delta]).
bool runForward(torch::jit::Stack* stack, LossKind kind, bool has_limit, LaunchCounter* launches) {
  const size_t count = has_limit ? 4 : 3;
  const auto args = torch::jit::last(*stack, count);
  const double limit = has_limit ? args[3].toDouble() : 0;
  if (has_limit && !limitFits(limit, args[0].toTensor())) return false;
  return pushResult(
      stack, count,
      lossForward(kind, args[0].toTensor(), args[1].toTensor(), args[2].toInt(), limit, launches));
}

// A backward call on the stack: (grad_output, self, target, reduction[, beta or delta][,
// grad_input]). ATen's norm scale: 2 for mse, 1 for the others.
bool runBackward(torch::jit::Stack* stack, LossKind kind, bool has_limit, bool has_out,
                 LaunchCounter* launches) {
  const size_t count = 4 + (has_limit ? 1 : 0) + (has_out ? 1 : 0);
  const auto args = torch::jit::last(*stack, count);
  const double limit = has_limit ? args[4].toDouble() : 0;
  if (has_limit && !limitFits(limit, args[1].toTensor())) return false;
  const at::Tensor grad_input = has_out ? args[count - 1].toTensor() : at::Tensor();
  return pushResult(stack, count,
                    lossBackward(kind, args[0].toTensor(), args[1].toTensor(), args[2].toTensor(),
                                 args[3].toInt(), kind == kMse ? 2 : 1, limit, grad_input,
                                 launches));
}

} // namespace

bool runCompiledMseLoss(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runForward(stack, kMse, false, site.get(LaunchKind::kCompiled, "aten::mse_loss"));
}

bool runCompiledMseLossBackward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runBackward(stack, kMse, false, false,
                     site.get(LaunchKind::kCompiled, "aten::mse_loss_backward"));
}

bool runCompiledSmoothL1Loss(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runForward(stack, kSmoothL1, true,
                    site.get(LaunchKind::kCompiled, "aten::smooth_l1_loss"));
}

bool runCompiledSmoothL1LossBackward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runBackward(stack, kSmoothL1, true, false,
                     site.get(LaunchKind::kCompiled, "aten::smooth_l1_loss_backward"));
}

bool runCompiledSmoothL1LossBackwardOut(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runBackward(stack, kSmoothL1, true, true,
                     site.get(LaunchKind::kCompiled, "aten::smooth_l1_loss_backward"));
}

bool runCompiledHuberLoss(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runForward(stack, kHuber, true, site.get(LaunchKind::kCompiled, "aten::huber_loss"));
}

bool runCompiledHuberLossBackward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runBackward(stack, kHuber, true, false,
                     site.get(LaunchKind::kCompiled, "aten::huber_loss_backward"));
}

bool runCompiledHuberLossBackwardOut(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  return runBackward(stack, kHuber, true, true,
                     site.get(LaunchKind::kCompiled, "aten::huber_loss_backward"));
}

} // namespace torchneuron

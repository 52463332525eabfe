// native_layer_norm and its backward as compiled kernels over rows of the input viewed as
// [M, N] (N = the normalized size): one row-wise kernel (statistics, then the normalized row,
// reading the input from memory once; fusion/reduction_ops.cpp); backward, the
// input gradient row by row and the weight and bias gradients reduced over rows. Per-row and
// per-column tensors come into the kernels as broadcast (expanded) views. Half and bfloat16,
// empty inputs and shapes ATen rejects run on the CPU fallback.

#include <ATen/ATen.h>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/reduction_launch.h"

namespace torchneuron {
namespace {

struct Rows {
  int64_t m = 1, n = 1;
  std::vector<int64_t> stat_shape; // input's leading dims, then 1 per normalized dim
};

c10::optional<Rows> rowsOf(const at::Tensor& input, at::IntArrayRef normalized_shape) {
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  if (normalized_shape.empty() || axis < 0) return c10::nullopt;
  Rows rows;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d < axis) {
      rows.m *= input.size(d);
      rows.stat_shape.push_back(input.size(d));
    } else {
      if (input.size(d) != normalized_shape[d - axis]) return c10::nullopt; // ATen's error
      rows.n *= input.size(d);
      rows.stat_shape.push_back(1);
    }
  }
  if (rows.n == 0) return c10::nullopt;
  return rows;
}

// The dtypes the registry's rule for `op` admits (fusion/op_registry.h, ReductionRule), with
// weight and bias on the device in the input's dtype and of normalized_shape's shape (ATen's
// check: a weight of the right count in another shape is its error, which the CPU raises).
bool supported(const char* op, const at::Tensor& input, at::IntArrayRef normalized_shape,
               const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias) {
  const at::ScalarType dtype = input.scalar_type();
  const fusion::ReductionRule& rule = fusion::findReductionOp(op)->rule;
  if (input.device().type() != kNeuronDeviceType) return false;
  if (rule.floats_only && !at::isFloatingType(dtype)) return false;
  if (!rule.exact_in_half && (dtype == at::kHalf || dtype == at::kBFloat16)) return false;
  if (!rule.bool_input && dtype == at::kBool) return false;
  for (const c10::optional<at::Tensor>& t : {weight, bias})
    if (t && t->defined() &&
        (t->device() != input.device() || t->scalar_type() != dtype ||
         t->sizes() != normalized_shape))
      return false;
  return true;
}

// A per-column parameter as an [M, N] view (a constant when it is absent).
at::Tensor columns(const c10::optional<at::Tensor>& t, double absent, const Rows& rows,
                   const at::Tensor& like) {
  if (t && t->defined()) return t->reshape({1, rows.n}).expand({rows.m, rows.n});
  return at::full({}, absent, like.options()).expand({rows.m, rows.n});
}

at::Tensor perRow(const at::Tensor& t, const Rows& rows) {
  return t.reshape({rows.m, 1}).expand({rows.m, rows.n});
}

c10::optional<TensorList> run(const char* op, TensorList inputs, int64_t dim,
                              c10::SmallVector<double, 2> params, LaunchCounter* launches) {
  return launchNamedReduction(op, std::move(inputs), {dim}, {}, std::move(params), launches);
}

} // namespace

bool runCompiledLayerNorm(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kCompiled, "aten::native_layer_norm");
  auto args = torch::jit::last(*stack, 5);
  const at::Tensor input = args[0].toTensor();
  const std::vector<int64_t> normalized_shape = args[1].toIntVector();
  const auto weight = args[2].toOptional<at::Tensor>();
  const auto bias = args[3].toOptional<at::Tensor>();
  const double eps = args[4].toDouble();
  c10::optional<Rows> rows = rowsOf(input, normalized_shape);
  if (!rows || !supported("layer_norm", input, normalized_shape, weight, bias)) return false;
  if (rows->m == 0) { // no rows: empty results, nothing to launch
    torch::jit::drop(*stack, 5);
    torch::jit::push(*stack, at::empty_like(input), at::empty(rows->stat_shape, input.options()),
                     at::empty(rows->stat_shape, input.options()));
    return true;
  }
  const at::Tensor x = input.contiguous().view({rows->m, rows->n});
  auto out = run("layer_norm", {x, columns(weight, 1, *rows, x), columns(bias, 0, *rows, x)}, 1,
                 {eps}, launches);
  if (!out) return false;
  const at::Tensor &mean = (*out)[0], &rstd = (*out)[1];
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, (*out)[2].view(input.sizes()), mean.view(rows->stat_shape),
                   rstd.view(rows->stat_shape));
  return true;
}

bool runCompiledLayerNormBackward(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kCompiled, "aten::native_layer_norm_backward");
  auto args = torch::jit::last(*stack, 8);
  const at::Tensor grad_out = args[0].toTensor(), input = args[1].toTensor();
  const std::vector<int64_t> normalized_shape = args[2].toIntVector();
  const at::Tensor mean = args[3].toTensor(), rstd = args[4].toTensor();
  const auto weight = args[5].toOptional<at::Tensor>();
  const auto bias = args[6].toOptional<at::Tensor>();
  const std::vector<bool> mask = args[7].toBoolList().vec();
  c10::optional<Rows> rows = rowsOf(input, normalized_shape);
  const bool has_weight = weight && weight->defined(), has_bias = bias && bias->defined();
  // ATen checks the dtypes of grad_out, mean and rstd against the input's and reads one mean and
  // rstd a row: anything else is its to decide.
  if (!rows || !supported("layer_norm_backward_input", input, normalized_shape, weight, bias) ||
      grad_out.sizes() != input.sizes() || (mask[1] && !has_weight) || (mask[2] && !has_bias))
    return false;
  for (const at::Tensor* t : {&grad_out, &mean, &rstd})
    if (t->scalar_type() != input.scalar_type() || t->device() != input.device()) return false;
  if (mean.numel() != rows->m || rstd.numel() != rows->m) return false;
  if (rows->m == 0) { // no rows: an empty input gradient and zero parameter gradients
    torch::jit::drop(*stack, 8);
    torch::jit::push(*stack, mask[0] ? at::empty_like(input) : at::Tensor(),
                     mask[1] ? at::zeros_like(*weight) : at::Tensor(),
                     mask[2] ? at::zeros_like(*bias) : at::Tensor());
    return true;
  }
  const at::Tensor x = input.contiguous().view({rows->m, rows->n});
  const at::Tensor dy = grad_out.contiguous().view({rows->m, rows->n});
  const at::Tensor mean_rows = perRow(mean.contiguous(), *rows);
  const at::Tensor rstd_rows = perRow(rstd.contiguous(), *rows);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) {
    auto result = run("layer_norm_backward_input",
                      {dy, x, mean_rows, rstd_rows, columns(weight, 1, *rows, x)}, 1, {}, launches);
    if (!result) return false;
    grad_input = (*result)[0].view(input.sizes());
  }
  if (mask[1] || mask[2]) {
    auto result = run("layer_norm_backward_params", {dy, x, mean_rows, rstd_rows}, 0, {}, launches);
    if (!result) return false;
    if (mask[1]) grad_weight = (*result)[0].view(weight->sizes());
    if (mask[2]) grad_bias = (*result)[1].view(bias->sizes());
  }
  torch::jit::drop(*stack, 8);
  torch::jit::push(*stack, grad_input, grad_weight, grad_bias);
  return true;
}

} // namespace torchneuron

// native_batch_norm and its backward as compiled kernels. A channel is a row: every element of
// the channel, reduced over all the input's other dimensions in place (no copy, any strides).
//
// Training: one row-wise kernel (fusion/reduction_ops.cpp, "batch_norm": the mean and variance
// passes over the channel in f64, then the normalized elements) and the running statistics
// updated in place by compiled elementwise ops. Evaluation: the running statistics folded into a
// scale and a shift per channel, then one elementwise kernel, as ATen does. Backward: one
// row-wise kernel ("batch_norm_backward": the weight and bias gradients per channel, then the
// input gradient), or in evaluation an elementwise product and layer norm's parameter-gradient
// reduction over the same rows.
//
// Declined (the library route runs ATen's kernel): dtypes but float32/float64, parameters of
// another dtype or device, inputs of fewer than two dimensions or no elements, and training
// rows of one element (ATen's running variance is NaN there).

#include <ATen/ATen.h>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/reduction_launch.h"

namespace torchneuron {
namespace {

bool isParameter(const c10::optional<at::Tensor>& t) { return t && t->defined(); }

// Whether the kernels cover `input` with these per-channel tensors (absent ones allowed).
bool supported(const at::Tensor& input,
               std::initializer_list<const c10::optional<at::Tensor>*> per_channel) {
  const at::ScalarType dtype = input.scalar_type();
  if (input.device().type() != kNeuronDeviceType || input.layout() != at::kStrided) return false;
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  if (input.dim() < 2 || input.numel() == 0) return false;
  for (const c10::optional<at::Tensor>* t : per_channel)
    if (isParameter(*t) && ((*t)->device() != input.device() || (*t)->scalar_type() != dtype ||
                            (*t)->numel() != input.size(1) || (*t)->layout() != at::kStrided))
      return false;
  return true;
}

// The dimensions a channel's row reduces over: all but 1.
c10::SmallVector<int64_t, 6> rowDims(const at::Tensor& input) {
  c10::SmallVector<int64_t, 6> dims;
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != 1) dims.push_back(d);
  return dims;
}

// A per-channel tensor broadcast to the input's shape (`absent` where it is not given).
at::Tensor perChannel(const c10::optional<at::Tensor>& t, double absent, const at::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  const at::Tensor values =
      isParameter(t) ? t->reshape(shape) : at::full({}, absent, input.options()).expand(shape);
  return values.expand(input.sizes());
}

c10::optional<TensorList> run(const char* op, TensorList inputs, TensorList outputs,
                              c10::SmallVector<double, 2> params, LaunchCounter* launches) {
  ReductionCall call;
  call.op = fusion::findReductionOp(op);
  call.dims = rowDims(inputs[0]);
  call.compute = inputs[0].scalar_type();
  call.output_dtypes.assign(call.op->num_outputs, call.compute);
  call.inputs = std::move(inputs);
  call.outputs = std::move(outputs);
  call.params = std::move(params);
  return launchReduction(call, launches);
}

// An element result laid out as ATen lays out batch norm's (the input's suggested format).
at::Tensor elementResult(const at::Tensor& input) {
  return at::empty_like(input, input.suggest_memory_format());
}

at::Tensor channelResult(const at::Tensor& input) {
  return at::empty({input.size(1)}, input.options());
}

} // namespace

bool runCompiledBatchNorm(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kCompiled, "aten::native_batch_norm");
  auto args = torch::jit::last(*stack, 8);
  const at::Tensor input = args[0].toTensor();
  const auto weight = args[1].toOptional<at::Tensor>(), bias = args[2].toOptional<at::Tensor>();
  auto running_mean = args[3].toOptional<at::Tensor>();
  auto running_var = args[4].toOptional<at::Tensor>();
  const bool training = args[5].toBool();
  const double momentum = args[6].toDouble(), eps = args[7].toDouble();
  // ATen's CPU kernel dereferences them (a crash); the device names the problem.
  TORCH_CHECK(training || (isParameter(running_mean) && isParameter(running_var)),
              "native_batch_norm: running_mean and running_var must be given in evaluation mode "
              "(training=False); got running_mean ",
              isParameter(running_mean) ? "defined" : "None", " and running_var ",
              isParameter(running_var) ? "defined" : "None");
  if (!supported(input, {&weight, &bias, &running_mean, &running_var})) return false;
  if (training && input.numel() / input.size(1) < 2) return false;

  if (!training) {
    const at::Tensor invstd = at::rsqrt(*running_var + eps);
    const at::Tensor scale = isParameter(weight) ? *weight * invstd : invstd;
    const at::Tensor shift =
        isParameter(bias) ? *bias - *running_mean * scale : -(*running_mean * scale);
    std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
    shape[1] = input.size(1);
    at::Tensor output = elementResult(input);
    at::addcmul_out(output, shift.view(shape), input, scale.view(shape));
    torch::jit::drop(*stack, 8);
    torch::jit::push(*stack, output, at::empty({0}, input.options()),
                     at::empty({0}, input.options()));
    return true;
  }
  auto out =
      run("batch_norm", {input, perChannel(weight, 1, input), perChannel(bias, 0, input)},
          {channelResult(input), channelResult(input), channelResult(input), elementResult(input)},
          {eps}, launches);
  if (!out) return false;
  const at::Tensor &mean = (*out)[0], &invstd = (*out)[1], &unbiased_var = (*out)[2];
  // As ATen: running = momentum * batch statistic + (1 - momentum) * running.
  if (isParameter(running_mean)) running_mean->mul_(1 - momentum).add_(mean, momentum);
  if (isParameter(running_var)) running_var->mul_(1 - momentum).add_(unbiased_var, momentum);
  torch::jit::drop(*stack, 8);
  torch::jit::push(*stack, (*out)[3], mean, invstd);
  return true;
}

bool runCompiledBatchNormBackward(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kCompiled, "aten::native_batch_norm_backward");
  auto args = torch::jit::last(*stack, 10);
  const at::Tensor grad_out = args[0].toTensor(), input = args[1].toTensor();
  const auto weight = args[2].toOptional<at::Tensor>();
  const auto running_mean = args[3].toOptional<at::Tensor>();
  const auto running_var = args[4].toOptional<at::Tensor>();
  const auto save_mean = args[5].toOptional<at::Tensor>();
  const auto save_invstd = args[6].toOptional<at::Tensor>();
  const bool training = args[7].toBool();
  const double eps = args[8].toDouble();
  const std::vector<bool> mask = args[9].toBoolList().vec();
  // In evaluation the saved statistics are empty ([0]) and unused.
  const c10::optional<at::Tensor> none;
  if (!supported(input, {&weight, &running_mean, &running_var, training ? &save_mean : &none,
                         training ? &save_invstd : &none}) ||
      !supported(grad_out, {}) || grad_out.sizes() != input.sizes() ||
      grad_out.scalar_type() != input.scalar_type() || (mask[1] && !isParameter(weight)))
    return false;
  // The statistics the forward normalized with: the batch's, or the running ones.
  at::Tensor mean, invstd;
  if (training) {
    if (!isParameter(save_mean) || !isParameter(save_invstd)) return false;
    mean = *save_mean;
    invstd = *save_invstd;
  } else {
    if (!isParameter(running_mean) || !isParameter(running_var)) return false;
    mean = *running_mean;
    invstd = at::rsqrt(*running_var + eps);
  }
  const at::Tensor mean_rows = perChannel(mean, 0, input);
  const at::Tensor invstd_rows = perChannel(invstd, 1, input);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0] && training) { // one kernel: the input gradient and both parameter gradients
    auto result =
        run("batch_norm_backward",
            {grad_out, input, mean_rows, invstd_rows, perChannel(weight, 1, input)},
            {channelResult(input), channelResult(input), elementResult(input)}, {}, launches);
    if (!result) return false;
    torch::jit::drop(*stack, 10);
    torch::jit::push(*stack, (*result)[2],
                     mask[1] ? (*result)[0].view(weight->sizes()) : at::Tensor(),
                     mask[2] ? (*result)[1] : at::Tensor());
    return true;
  }
  if (mask[0]) { // evaluation: the statistics are constants, dx = dy * invstd * weight
    const at::Tensor scale = isParameter(weight) ? invstd * *weight : invstd;
    grad_input = elementResult(input);
    at::mul_out(grad_input, grad_out, perChannel(scale, 1, input));
  }
  if (mask[1] || mask[2]) {
    auto result = run("layer_norm_backward_params", {grad_out, input, mean_rows, invstd_rows},
                      {channelResult(input), channelResult(input)}, {}, launches);
    if (!result) return false;
    if (mask[1]) grad_weight = (*result)[0].view(weight->sizes());
    if (mask[2]) grad_bias = (*result)[1];
  }
  torch::jit::drop(*stack, 10);
  torch::jit::push(*stack, grad_input, grad_weight, grad_bias);
  return true;
}

} // namespace torchneuron

// native_batch_norm and its backward as compiled kernels. A channel is a row: every element of
// the channel, reduced over all the input's other dimensions in place (no copy, any strides).
//
// Training: one row-wise kernel (fusion/reduction_ops.cpp, "batch_norm": the mean and variance
// passes over the channel in f64, then the normalized elements) and the running statistics
// updated in place by compiled elementwise ops. Evaluation: the running statistics folded into a
// scale and a shift per channel, then one elementwise kernel, as ATen does. Backward: one
// row-wise kernel ("batch_norm_backward": the weight and bias gradients per channel, then the
// input gradient), or in evaluation an elementwise product and layer norm's parameter-gradient
// reduction over the same rows. Results are laid out as ATen 1.13's.
//
// Declined (the library route runs ATen's kernel): dtypes but float32/float64, per-channel
// tensors of another dtype, device or shape than [C], inputs of fewer than two dimensions,
// inputs whose channel rows run contiguously for fewer than 32 elements (channels-last,
// BatchNorm1d's [N, C], planes of 4 x 4: contiguousRun), training rows of one element (ATen's
// running variance is NaN there) and running statistics that share memory with the input,
// weight or bias (ATen updates them before it normalizes) or with themselves (expanded), and a
// momentum whose factors do not fit float32 running statistics (momentumFits).
// Inputs with no elements, on which ATen's CPU kernels divide by zero (SIGFPE), get empty
// results (evaluation, backward) or an error naming the shape (training); evaluation without
// running statistics, which ATen's CPU kernels dereference, an error naming them (forward and
// backward).

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/reduction_launch.h"

namespace torchneuron {
namespace {

using PerChannel = std::initializer_list<const c10::optional<at::Tensor>*>;

bool isParameter(const c10::optional<at::Tensor>& t) { return t && t->defined(); }

// The elements a channel's row runs through contiguously: the reduced dimension of stride 1 and
// those that continue it. The row kernel walks each run with a vectorized loop whose bound is a
// run-time value; runs much shorter than its vector width leave it to the scalar remainder, and
// no run at all (channels innermost: channels-last, BatchNorm1d's [N, C]) strides every element,
// BatchNorm1d over [256, 1024] 30x slower than ATen's kernel. Such inputs take ATen's kernel.
constexpr int64_t kShortestRun = 32;

int64_t contiguousRun(const at::Tensor& input) {
  int64_t run = 1;
  for (bool extended = true; extended;) {
    extended = false;
    for (int64_t d = 0; d < input.dim(); ++d)
      if (d != 1 && input.size(d) > 1 && input.stride(d) == run) {
        run *= input.size(d);
        extended = true;
        break;
      }
  }
  return run;
}

// Whether the kernels cover `input` with these per-channel tensors (absent ones allowed): one
// dimension of the input's channel count each (ATen's kernels read them as such; a [C, 1] weight
// would broadcast in the elementwise ops here), on the device in the input's dtype.
bool supported(const at::Tensor& input, PerChannel per_channel) {
  const at::ScalarType dtype = input.scalar_type();
  if (input.device().type() != kNeuronDeviceType || input.layout() != at::kStrided) return false;
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  if (input.dim() < 2 || input.numel() == 0 || contiguousRun(input) < kShortestRun) return false;
  for (const c10::optional<at::Tensor>* t : per_channel)
    if (isParameter(*t) &&
        ((*t)->device() != input.device() || (*t)->scalar_type() != dtype || (*t)->dim() != 1 ||
         (*t)->size(0) != input.size(1) || (*t)->layout() != at::kStrided))
      return false;
  return true;
}

// Running statistics the in-place update cannot write (expanded, overlapping themselves).
bool writable(const c10::optional<at::Tensor>& stat) {
  return !isParameter(stat) || at::has_internal_overlap(*stat) == at::MemOverlap::No;
}

// Evaluation normalizes with the running statistics: ATen's CPU kernels dereference missing ones
// (a crash); the device names the problem.
void checkEvaluationStatistics(const char* op, bool training,
                               const c10::optional<at::Tensor>& running_mean,
                               const c10::optional<at::Tensor>& running_var) {
  TORCH_CHECK(training || (isParameter(running_mean) && isParameter(running_var)), "[device] ", op,
              ": running_mean and running_var must be given in evaluation mode (training=False); "
              "got running_mean ",
              isParameter(running_mean) ? "defined" : "None", " and running_var ",
              isParameter(running_var) ? "defined" : "None");
}

bool sharesMemory(const c10::optional<at::Tensor>& a, const c10::optional<at::Tensor>& b) {
  return isParameter(a) && isParameter(b) && a->storage().is_alias_of(b->storage());
}

// Whether training may update the running statistics in place after it normalized: each is
// writable and shares no memory with what the forward reads (ATen updates them before it
// normalizes, so its output would read the updated values).
bool statisticsUpdatableAfter(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
                              const c10::optional<at::Tensor>& bias,
                              std::initializer_list<const c10::optional<at::Tensor>*> statistics) {
  const c10::optional<at::Tensor> self = input;
  for (const c10::optional<at::Tensor>* stat : statistics)
    if (!writable(*stat) || sharesMemory(*stat, self) || sharesMemory(*stat, weight) ||
        sharesMemory(*stat, bias))
      return false;
  return true;
}

// ATen's test for its contiguous kernels: contiguous in the default or a channels-last format.
bool denseInSomeFormat(const at::Tensor& t) {
  return t.is_contiguous() || (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
         (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}

// An element result laid out as ATen 1.13 lays out batch norm's. Its contiguous kernels (taken
// when `dense`) give the input's own dense format, where a tensor that is both (size-1
// dimensions) counts as contiguous; the others give the input's suggested format. The two
// differ for tensors whose size-1 dimensions make them channels-last-contiguous while the
// suggestion is the default format.
at::Tensor elementResult(const at::Tensor& input, bool dense) {
  at::MemoryFormat format = input.suggest_memory_format();
  if (dense && input.is_contiguous())
    format = at::MemoryFormat::Contiguous;
  else if (dense)
    format = input.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
  return at::empty_like(input, format);
}

// The forward's output: dense when the input is and every per-channel tensor is contiguous.
at::Tensor forwardResult(const at::Tensor& input, PerChannel per_channel) {
  bool dense = denseInSomeFormat(input);
  for (const c10::optional<at::Tensor>* t : per_channel)
    dense = dense && (!isParameter(*t) || (*t)->is_contiguous());
  return elementResult(input, dense);
}

// The backward's input gradient: dense when input and gradient are, in one suggested format.
at::Tensor inputGradient(const at::Tensor& input, const at::Tensor& grad_out) {
  return elementResult(input,
                       denseInSomeFormat(input) && denseInSomeFormat(grad_out) &&
                           input.suggest_memory_format() == grad_out.suggest_memory_format());
}

// A device input with no elements, whole enough for ATen's checks to have nothing to say.
bool emptyDeviceInput(const at::Tensor& input) {
  return input.device().type() == kNeuronDeviceType && input.layout() == at::kStrided &&
         input.dim() >= 2 && input.numel() == 0;
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
  c10::SmallVector<int64_t, 6> dims = rowDims(inputs[0]);
  return launchNamedReduction(op, std::move(inputs), std::move(dims), std::move(outputs),
                              std::move(params), launches);
}

// ATen updates a running statistic as momentum * statistic + (1 - momentum) * running, in
// double. Here mul_ and add_ take momentum and 1 - momentum as numbers of the statistic's dtype,
// and raise ATen's overflow error for one that does not fit it (momentum=1e39 on float32, where
// ATen computes): such calls are declined, and ATen's own kernel (the library route) runs them.
bool momentumFits(double momentum, const c10::optional<at::Tensor>& running) {
  if (!isParameter(running) || running->scalar_type() != at::kFloat) return true;
  auto fits = [](double value) { // as c10::overflows: NaN and infinities convert
    return !(std::abs(value) > static_cast<double>(std::numeric_limits<float>::max())) ||
           std::isinf(value);
  };
  return fits(momentum) && fits(1 - momentum);
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
  checkEvaluationStatistics("native_batch_norm", training, running_mean, running_var);
  if (emptyDeviceInput(input)) {
    TORCH_CHECK(
        !training,
        "[device] native_batch_norm: training needs at least one element per channel; got an "
        "input of shape ",
        input.sizes());
    torch::jit::drop(*stack, 8);
    torch::jit::push(*stack, at::empty_like(input), at::empty({0}, input.options()),
                     at::empty({0}, input.options()));
    return true;
  }
  const PerChannel per_channel = {&weight, &bias, &running_mean, &running_var};
  if (!supported(input, per_channel)) return false;
  if (training && input.numel() / input.size(1) < 2) return false;
  if (training && !statisticsUpdatableAfter(input, weight, bias, {&running_mean, &running_var}))
    return false;
  if (training && !(momentumFits(momentum, running_mean) && momentumFits(momentum, running_var)))
    return false;

  if (!training) {
    const at::Tensor invstd = at::rsqrt(*running_var + eps);
    const at::Tensor scale = isParameter(weight) ? *weight * invstd : invstd;
    const at::Tensor shift =
        isParameter(bias) ? *bias - *running_mean * scale : -(*running_mean * scale);
    at::Tensor output = forwardResult(input, per_channel);
    at::addcmul_out(output, perChannel(shift, 0, input), input, perChannel(scale, 1, input));
    torch::jit::drop(*stack, 8);
    torch::jit::push(*stack, output, at::empty({0}, input.options()),
                     at::empty({0}, input.options()));
    return true;
  }
  auto out = run("batch_norm", {input, perChannel(weight, 1, input), perChannel(bias, 0, input)},
                 {channelResult(input), channelResult(input), channelResult(input),
                  forwardResult(input, per_channel)},
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
  checkEvaluationStatistics("native_batch_norm_backward", training, running_mean, running_var);
  if (emptyDeviceInput(input) && grad_out.sizes() == input.sizes()) { // sums of nothing: 0
    const int64_t channels = input.size(1);
    torch::jit::drop(*stack, 10);
    torch::jit::push(*stack, mask[0] ? at::empty_like(input) : at::Tensor(),
                     mask[1] ? at::zeros({channels}, input.options()) : at::Tensor(),
                     mask[2] ? at::zeros({channels}, input.options()) : at::Tensor());
    return true;
  }
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
    auto result = run("batch_norm_backward",
                      {grad_out, input, mean_rows, invstd_rows, perChannel(weight, 1, input)},
                      {channelResult(input), channelResult(input), inputGradient(input, grad_out)},
                      {}, launches);
    if (!result) return false;
    torch::jit::drop(*stack, 10);
    torch::jit::push(*stack, (*result)[2],
                     mask[1] ? (*result)[0].view(weight->sizes()) : at::Tensor(),
                     mask[2] ? (*result)[1] : at::Tensor());
    return true;
  }
  if (mask[0]) { // evaluation: the statistics are constants, dx = dy * invstd * weight
    const at::Tensor scale = isParameter(weight) ? invstd * *weight : invstd;
    grad_input = inputGradient(input, grad_out);
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

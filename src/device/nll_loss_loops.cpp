#include "device/nll_loss_loops.h"

#include <ATen/core/Reduction.h>
#include <ATen/native/cpu/utils.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

#include "device/host_view.h"

namespace torchneuron {
namespace {

// A [rows, columns] matrix of device memory read through its strides.
template <typename T> struct StridedMatrix {
  const T* data;
  int64_t row_stride, column_stride;
  T at(int64_t row, int64_t column) const {
    return data[row * row_stride + column * column_stride];
  }
};

template <typename T> StridedMatrix<T> matrixOf(const at::Tensor& t) {
  return {reinterpret_cast<const T*>(hostAddressOf(t)), t.stride(0), t.stride(1)};
}

// The per-class weight, or null (ATen's optional_data on its contiguous copy).
template <typename T> struct ClassWeights {
  const T* data = nullptr;
  int64_t stride = 1;
  T at(int64_t c) const { return data[c * stride]; }
};

template <typename T> ClassWeights<T> weightsOf(const c10::optional<at::Tensor>& weight) {
  if (!weight || !weight->defined()) return {};
  return {reinterpret_cast<const T*>(hostAddressOf(*weight)), weight->stride(0)};
}

void checkTarget(int64_t target, int64_t classes) {
  TORCH_CHECK_INDEX(target >= 0 && target < classes, "Target ", target, " is out of bounds.");
}

template <typename T>
void forward(const at::Tensor& output, const at::Tensor& total_weight, const at::Tensor& self,
             const at::Tensor& target, const c10::optional<at::Tensor>& weight_opt,
             int64_t reduction, int64_t ignore_index) {
  const int64_t batch = self.size(0);
  const int64_t classes = self.size(1);
  const StridedMatrix<T> input = matrixOf<T>(self);
  const int64_t* targets = reinterpret_cast<const int64_t*>(hostAddressOf(target));
  const int64_t target_stride = target.stride(0);
  const ClassWeights<T> weight = weightsOf<T>(weight_opt);
  T* out = reinterpret_cast<T*>(hostAddressOf(output));
  T* total = reinterpret_cast<T*>(hostAddressOf(total_weight));
  *total = 0;

  if (reduction == at::Reduction::None) {
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t t = targets[i * target_stride];
      if (t == ignore_index) {
        out[i] = 0;
        continue;
      }
      checkTarget(t, classes);
      const T w = weight.data != nullptr ? weight.at(t) : static_cast<T>(1);
      out[i] = -input.at(i, t) * w;
    }
    return;
  }

  // ATen's cascade sum: partial sums at 8 levels, level j + 1 taking level j's whenever the row
  // index's j-th group of level_power bits is zero.
  constexpr int64_t kLevels = 8;
  const int64_t level_power = std::max<int64_t>(4, at::native::utils::CeilLog2(batch) / kLevels);
  const int64_t level_mask = (int64_t{1} << level_power) - 1;
  int64_t ignored = 0;
  T weight_sums[kLevels] = {0};
  T loss_sums[kLevels] = {0};
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t t = targets[b * target_stride];
    if (t == ignore_index) {
      ++ignored;
      continue;
    }
    checkTarget(t, classes);
    const T value = input.at(b, t);
    if (weight.data != nullptr) {
      const T w = weight.at(t);
      loss_sums[0] -= value * w;
      weight_sums[0] += w;
    } else {
      loss_sums[0] -= value;
    }
    for (int64_t j = 0; j + 1 < kLevels; ++j) {
      if ((b & (level_mask << (j * level_power))) != 0) break;
      weight_sums[j + 1] += weight_sums[j];
      loss_sums[j + 1] += loss_sums[j];
      weight_sums[j] = 0;
      loss_sums[j] = 0;
    }
  }
  T total_value = 0;
  T loss = 0;
  for (int64_t j = 0; j < kLevels; ++j) { // std::accumulate's order
    total_value += weight_sums[j];
    loss += loss_sums[j];
  }
  if (weight.data == nullptr) total_value = static_cast<T>(batch - ignored);
  if (reduction == at::Reduction::Mean) loss /= total_value;
  *out = loss;
  *total = total_value;
}

template <typename T>
void backward(const at::Tensor& grad_input, const at::Tensor& grad_output, const at::Tensor& self,
              const at::Tensor& target, const c10::optional<at::Tensor>& weight_opt,
              int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight) {
  const int64_t batch = self.size(0);
  const int64_t classes = self.size(1);
  T* grad = reinterpret_cast<T*>(hostAddressOf(grad_input));
  std::memset(grad, 0, static_cast<size_t>(batch * classes) * sizeof(T)); // grad_input.zero_()
  const int64_t* targets = reinterpret_cast<const int64_t*>(hostAddressOf(target));
  const int64_t target_stride = target.stride(0);
  const ClassWeights<T> weight = weightsOf<T>(weight_opt);
  const T* grad_out = reinterpret_cast<const T*>(hostAddressOf(grad_output));

  if (reduction == at::Reduction::None) {
    const int64_t grad_out_stride = grad_output.stride(0);
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t t = targets[i * target_stride];
      if (t == ignore_index) continue;
      checkTarget(t, classes); // ATen's loop writes out of bounds here instead
      const T w = weight.data != nullptr ? weight.at(t) : static_cast<T>(1);
      grad[i * classes + t] = -w * grad_out[i * grad_out_stride];
    }
    return;
  }
  const T total = *reinterpret_cast<const T*>(hostAddressOf(total_weight));
  const T value = -(reduction == at::Reduction::Mean ? *grad_out / total : *grad_out);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t t = targets[i * target_stride];
    if (t == ignore_index) continue;
    checkTarget(t, classes);
    grad[i * classes + t] = weight.data != nullptr ? weight.at(t) * value : value;
  }
}

} // namespace

bool nllLossLoopsTake(const at::Tensor& self, const at::Tensor& target,
                      const c10::optional<at::Tensor>& weight) {
  const at::ScalarType dtype = self.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble) || self.dim() != 2 || self.size(0) == 0 ||
      self.is_neg() || self.is_conj())
    return false;
  if (target.scalar_type() != at::kLong || target.dim() != 1 || target.size(0) != self.size(0))
    return false;
  if (weight && weight->defined())
    return weight->scalar_type() == dtype && weight->dim() == 1 &&
           weight->size(0) == self.size(1) && !weight->is_neg();
  return true;
}

void nllLossForwardLoops(const at::Tensor& output, const at::Tensor& total_weight,
                         const at::Tensor& self, const at::Tensor& target,
                         const c10::optional<at::Tensor>& weight, int64_t reduction,
                         int64_t ignore_index) {
  if (self.scalar_type() == at::kFloat)
    forward<float>(output, total_weight, self, target, weight, reduction, ignore_index);
  else
    forward<double>(output, total_weight, self, target, weight, reduction, ignore_index);
}

void nllLossBackwardLoops(const at::Tensor& grad_input, const at::Tensor& grad_output,
                          const at::Tensor& self, const at::Tensor& target,
                          const c10::optional<at::Tensor>& weight, int64_t reduction,
                          int64_t ignore_index, const at::Tensor& total_weight) {
  if (self.scalar_type() == at::kFloat)
    backward<float>(grad_input, grad_output, self, target, weight, reduction, ignore_index,
                    total_weight);
  else
    backward<double>(grad_input, grad_output, self, target, weight, reduction, ignore_index,
                     total_weight);
}

} // namespace torchneuron

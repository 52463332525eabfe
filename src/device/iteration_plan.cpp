#include "device/iteration_plan.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

namespace torchneuron {
namespace {

// Strides of `tensor` broadcast to `shape` (0 where it is broadcast).
DimVector broadcastStrides(at::IntArrayRef shape, const at::Tensor& tensor) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t offset = rank - tensor.dim();
  DimVector strides(rank, 0);
  for (int64_t d = 0; d < tensor.dim(); ++d)
    strides[offset + d] = tensor.size(d) == 1 ? 0 : tensor.stride(d);
  return strides;
}

} // namespace

int64_t IterationPlan::numel() const {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}

DimVector layoutOrder(at::IntArrayRef shape, at::ArrayRef<at::Tensor> operands) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  c10::SmallVector<DimVector, 4> strides;
  for (const at::Tensor& t : operands)
    strides.push_back(broadcastStrides(shape, t));
  DimVector order(rank);
  std::iota(order.begin(), order.end(), 0);
  // a goes outside b when the first operand that strides both moves slower along a.
  auto outer = [&](int64_t a, int64_t b) {
    for (const DimVector& s : strides) {
      if (s[a] == 0 || s[b] == 0 || s[a] == s[b]) continue;
      return s[a] > s[b];
    }
    return a < b;
  };
  std::stable_sort(order.begin(), order.end(), outer);
  return order;
}

at::Tensor allocateLike(at::IntArrayRef shape, at::ScalarType dtype,
                        at::ArrayRef<at::Tensor> operands, c10::Device device) {
  const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
  bool any_non_contiguous = false;
  for (const at::Tensor& t : operands)
    any_non_contiguous |= t.dim() == static_cast<int64_t>(shape.size()) && !t.is_contiguous();
  if (!any_non_contiguous) return at::empty(shape, options);
  const DimVector order = layoutOrder(shape, operands);
  DimVector permuted_shape, inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted_shape.push_back(shape[order[i]]);
    inverse[order[i]] = static_cast<int64_t>(i);
  }
  return at::empty(permuted_shape, options).permute(inverse);
}

// The common case, decided without sorting: every operand is contiguous with the full shape, or
// is a single broadcast element. Such a call is one rank-1 loop.
bool planFlat(at::IntArrayRef shape, at::ArrayRef<at::Tensor> operands, IterationPlan& plan) {
  int64_t numel = 1;
  for (int64_t size : shape)
    numel *= size;
  for (size_t i = 0; i < operands.size(); ++i) {
    const at::Tensor& t = operands[i];
    const bool full = t.sizes() == shape && t.is_contiguous();
    const bool single = i > 0 && t.numel() == 1 && !full;
    if (!full && !single) return false;
    plan.strides.emplace_back(DimVector{full ? 1 : 0});
    plan.inner.push_back(full ? fusion::InnerStride::kContiguous : fusion::InnerStride::kBroadcast);
  }
  plan.sizes = {numel};
  return true;
}

IterationPlan planIteration(at::IntArrayRef shape, at::ArrayRef<at::Tensor> operands) {
  {
    IterationPlan flat;
    if (planFlat(shape, operands, flat)) return flat;
  }
  const DimVector order = layoutOrder(shape, operands);
  c10::SmallVector<DimVector, 4> full;
  for (const at::Tensor& t : operands)
    full.push_back(broadcastStrides(shape, t));

  IterationPlan plan;
  plan.strides.resize(operands.size());
  // Walk dimensions outermost first, skipping size-1 ones and merging a dimension into the
  // previous (outer) one when every operand steps through both as one.
  for (int64_t dim : order) {
    const int64_t size = shape[dim];
    if (size == 1) continue;
    if (!plan.sizes.empty()) {
      bool mergeable = true;
      for (size_t i = 0; i < operands.size() && mergeable; ++i)
        mergeable = plan.strides[i].back() == size * full[i][dim];
      if (mergeable) {
        plan.sizes.back() *= size;
        for (size_t i = 0; i < operands.size(); ++i)
          plan.strides[i].back() = full[i][dim];
        continue;
      }
    }
    plan.sizes.push_back(size);
    for (size_t i = 0; i < operands.size(); ++i)
      plan.strides[i].push_back(full[i][dim]);
  }
  if (plan.sizes.empty()) {
    // One element: classify operands as for larger shapes (a lower-rank operand, such as a
    // wrapped scalar, is broadcast), so a size-1 call reuses the kernel of its bigger siblings.
    plan.sizes.push_back(1);
    for (size_t i = 0; i < operands.size(); ++i) {
      const bool broadcast = i > 0 && operands[i].dim() < static_cast<int64_t>(shape.size());
      plan.strides[i].push_back(broadcast || (i > 0 && operands[i].dim() == 0) ? 0 : 1);
    }
  }
  for (const DimVector& s : plan.strides) {
    const int64_t innermost = s.back();
    plan.inner.push_back(innermost == 1   ? fusion::InnerStride::kContiguous
                         : innermost == 0 ? fusion::InnerStride::kBroadcast
                                          : fusion::InnerStride::kStrided);
  }
  return plan;
}

} // namespace torchneuron

#include "device/iteration_plan.h"

#include <algorithm>
#include <numeric>

namespace torchneuron {
namespace {

int64_t rankOf(const ViewGeometry& t) { return static_cast<int64_t>(t.sizes.size()); }

// Strides of `tensor` broadcast to `shape` (0 where it is broadcast).
DimVector broadcastStrides(at::IntArrayRef shape, const ViewGeometry& tensor) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t offset = rank - rankOf(tensor);
  DimVector strides(rank, 0);
  for (int64_t d = 0; d < rankOf(tensor); ++d)
    strides[offset + d] = tensor.sizes[d] == 1 ? 0 : tensor.strides[d];
  return strides;
}

// The common case, decided without sorting: every operand is contiguous with the full shape, or
// is a single broadcast element. Such a call is one rank-1 loop.
bool planFlat(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands, IterationPlan& plan) {
  int64_t numel = 1;
  for (int64_t size : shape)
    numel *= size;
  for (size_t i = 0; i < operands.size(); ++i) {
    const ViewGeometry& t = operands[i];
    const bool full = t.sizes == shape && t.contiguous;
    const bool single = i > 0 && t.numel == 1 && !full;
    if (!full && !single) return false;
    plan.strides.emplace_back(DimVector{full ? 1 : 0});
    plan.inner.push_back(full ? fusion::InnerStride::kContiguous : fusion::InnerStride::kBroadcast);
  }
  plan.sizes = {numel};
  return true;
}

} // namespace

MergedDims mergeDimensions(at::IntArrayRef sizes, at::ArrayRef<DimVector> strides) {
  MergedDims merged;
  merged.strides.resize(strides.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool mergeable = !merged.sizes.empty();
    for (size_t i = 0; i < strides.size() && mergeable; ++i)
      mergeable = merged.strides[i].back() == sizes[d] * strides[i][d];
    if (mergeable) {
      merged.sizes.back() *= sizes[d];
      for (size_t i = 0; i < strides.size(); ++i)
        merged.strides[i].back() = strides[i][d];
      continue;
    }
    merged.sizes.push_back(sizes[d]);
    for (size_t i = 0; i < strides.size(); ++i)
      merged.strides[i].push_back(strides[i][d]);
  }
  return merged;
}

int64_t IterationPlan::numel() const {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}

DimVector layoutOrder(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  c10::SmallVector<DimVector, 4> strides;
  for (const ViewGeometry& t : operands)
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

DimVector contiguousStrides(at::IntArrayRef shape) {
  DimVector strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

DimVector stridesLike(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands) {
  bool any_non_contiguous = false;
  for (const ViewGeometry& t : operands)
    any_non_contiguous |= rankOf(t) == static_cast<int64_t>(shape.size()) && !t.contiguous;
  if (!any_non_contiguous) return contiguousStrides(shape);
  // Contiguous in layout order, as at::empty(permuted shape).permute(inverse) would be.
  const DimVector order = layoutOrder(shape, operands);
  DimVector strides(shape.size());
  int64_t stride = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = stride;
    stride *= std::max<int64_t>(shape[order[i]], 1);
  }
  return strides;
}

IterationPlan planIteration(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands) {
  {
    IterationPlan flat;
    if (planFlat(shape, operands, flat)) return flat;
  }
  const DimVector order = layoutOrder(shape, operands);
  DimVector sizes;
  for (int64_t dim : order)
    sizes.push_back(shape[dim]);
  c10::SmallVector<DimVector, 4> walk;
  for (const ViewGeometry& t : operands) {
    const DimVector full = broadcastStrides(shape, t);
    DimVector& strides = walk.emplace_back();
    for (int64_t dim : order)
      strides.push_back(full[dim]);
  }
  MergedDims merged = mergeDimensions(sizes, walk);
  IterationPlan plan;
  plan.sizes = std::move(merged.sizes);
  plan.strides = std::move(merged.strides);
  if (plan.sizes.empty()) {
    // One element: classify operands as for larger shapes (a lower-rank operand, such as a
    // wrapped scalar, is broadcast), so a size-1 call reuses the kernel of its bigger siblings.
    plan.sizes.push_back(1);
    for (size_t i = 0; i < operands.size(); ++i) {
      const bool broadcast = i > 0 && rankOf(operands[i]) < static_cast<int64_t>(shape.size());
      plan.strides[i].push_back(broadcast || (i > 0 && rankOf(operands[i]) == 0) ? 0 : 1);
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

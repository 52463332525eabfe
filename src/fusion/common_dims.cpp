#include "fusion/common_dims.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace torchneuron::fusion {
namespace {

// The boundaries of `sizes` above 1, innermost first.
void addBoundaries(c10::ArrayRef<int64_t> sizes, DimList& boundaries) {
  int64_t inner = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    inner *= sizes[d];
    if (inner > 1) boundaries.push_back(inner);
  }
}

} // namespace

c10::optional<DimList> commonDims(c10::ArrayRef<c10::ArrayRef<int64_t>> spaces) {
  DimList boundaries;
  for (c10::ArrayRef<int64_t> sizes : spaces) {
    for (int64_t size : sizes)
      if (size <= 0) return c10::nullopt;
    addBoundaries(sizes, boundaries);
  }
  std::sort(boundaries.begin(), boundaries.end());
  boundaries.erase(std::unique(boundaries.begin(), boundaries.end()), boundaries.end());
  DimList dims;
  int64_t inner = 1;
  for (int64_t boundary : boundaries) {
    if (boundary % inner != 0) return c10::nullopt;
    dims.insert(dims.begin(), boundary / inner);
    inner = boundary;
  }
  return dims;
}

DimList stridesOver(c10::ArrayRef<int64_t> sizes, c10::ArrayRef<int64_t> strides,
                    c10::ArrayRef<int64_t> dims) {
  DimList result(dims.size(), 0);
  // Walk both from the innermost: each common dimension lies inside one dimension of `sizes`.
  size_t d = sizes.size();
  int64_t d_inner = 1; // the product of the sizes inside dimension d - 1
  int64_t inner = 1;   // the product of the common dimensions inside the current one
  for (size_t c = dims.size(); c-- > 0;) {
    if (dims[c] == 1) {
      result[c] = 0; // a dimension of size 1 (a full reduction's kept one) never steps
      continue;
    }
    while (d > 0 && d_inner * sizes[d - 1] <= inner) {
      d_inner *= sizes[d - 1];
      --d;
    }
    TORCH_INTERNAL_ASSERT(d > 0 && inner % d_inner == 0,
                          "[fusion] common dimensions do not refine the memref's");
    result[c] = strides[d - 1] * (inner / d_inner);
    inner *= dims[c];
  }
  return result;
}

} // namespace torchneuron::fusion

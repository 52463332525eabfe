#include "device/view_geometry.h"

#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace torchneuron {

ViewGeometry ViewGeometry::of(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  ViewGeometry view;
  view.sizes = impl->sizes();
  view.strides = impl->strides();
  view.storage_offset = impl->storage_offset();
  view.itemsize = static_cast<int64_t>(impl->itemsize());
  view.numel = impl->numel();
  view.contiguous = impl->is_contiguous();
  view.dense = impl->is_non_overlapping_and_dense();
  view.storage = impl->has_storage() ? impl->unsafe_storage().unsafeGetStorageImpl() : nullptr;
  view.tensor = impl;
  return view;
}

namespace {

// c10's TensorImpl::compute_contiguous, on geometry.
bool contiguousView(at::IntArrayRef sizes, at::IntArrayRef strides, int64_t numel) {
  if (numel == 0) return true;
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// c10's TensorImpl::compute_non_overlapping_and_dense, on geometry.
bool denseView(at::IntArrayRef sizes, at::IntArrayRef strides) {
  if (sizes.size() == 1) return sizes[0] < 2 || strides[0] == 1;
  c10::SmallVector<int64_t, 6> perm(sizes.size());
  for (size_t i = 0; i < perm.size(); ++i)
    perm[i] = static_cast<int64_t>(i);
  // By stride, size-0 and size-1 dimensions last.
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (int64_t d : perm) {
    if (sizes[d] < 2) return true;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

} // namespace

ViewGeometry ViewGeometry::planned(at::IntArrayRef sizes, at::IntArrayRef strides,
                                   int64_t storage_offset, int64_t itemsize) {
  ViewGeometry view;
  view.sizes = sizes;
  view.strides = strides;
  view.storage_offset = storage_offset;
  view.itemsize = itemsize;
  view.numel = c10::multiply_integers(sizes);
  view.contiguous = contiguousView(sizes, strides, view.numel);
  view.dense = denseView(sizes, strides);
  return view;
}

at::MemOverlap internalOverlap(const ViewGeometry& t) {
  if (t.dense) return at::MemOverlap::No;
  for (size_t d = 0; d < t.strides.size(); ++d)
    if (t.strides[d] == 0 && t.sizes[d] > 1) return at::MemOverlap::Yes;
  return at::MemOverlap::TooHard;
}

at::MemOverlapStatus overlapStatus(const ViewGeometry& a, const ViewGeometry& b) {
  if (a.tensor != nullptr && a.tensor == b.tensor) return at::MemOverlapStatus::Full;
  if (a.numel == 0 || b.numel == 0) return at::MemOverlapStatus::No;
  if (!a.dense || !b.dense) return at::MemOverlapStatus::TooHard;
  if (a.storage == nullptr || a.storage != b.storage) return at::MemOverlapStatus::No;
  // Byte ranges within the one storage (ATen compares the same ranges as data pointers).
  const int64_t a_begin = a.storage_offset * a.itemsize, a_end = a_begin + a.numel * a.itemsize;
  const int64_t b_begin = b.storage_offset * b.itemsize, b_end = b_begin + b.numel * b.itemsize;
  if (a_begin == b_begin && a_end == b_end)
    return a.strides == b.strides ? at::MemOverlapStatus::Full : at::MemOverlapStatus::Partial;
  if (a_begin < b_end && b_begin < a_end) return at::MemOverlapStatus::Partial;
  return at::MemOverlapStatus::No;
}

namespace {

// One index of the equation: coefficient times an index in [0, extent).
struct IndexTerm {
  int64_t coefficient, extent;
};

// Whether sum(terms[i..] * index) == target has a solution; `budget` bounds the nodes visited
// (false once it runs out: not proven either way, which the caller reads as "may overlap").
// `low`/`high` are the least and greatest sums of terms[i..].
bool solvable(const std::vector<IndexTerm>& terms, const std::vector<int64_t>& low,
              const std::vector<int64_t>& high, size_t i, int64_t target, int64_t& budget,
              bool& exhausted) {
  if (i == terms.size()) return target == 0;
  if (--budget < 0) {
    exhausted = true;
    return true;
  }
  const int64_t c = terms[i].coefficient;
  // Indices k for which the rest can still reach target - c * k.
  const int64_t rest_low = low[i + 1], rest_high = high[i + 1];
  auto floorDiv = [](int64_t n, int64_t d) {
    return n / d - ((n % d != 0) && ((n < 0) != (d < 0)));
  };
  auto ceilDiv = [&](int64_t n, int64_t d) { return -floorDiv(-n, d); };
  int64_t first = c > 0 ? ceilDiv(target - rest_high, c) : ceilDiv(target - rest_low, c);
  int64_t last = c > 0 ? floorDiv(target - rest_low, c) : floorDiv(target - rest_high, c);
  first = std::max<int64_t>(first, 0);
  last = std::min<int64_t>(last, terms[i].extent - 1);
  for (int64_t k = first; k <= last; ++k)
    if (solvable(terms, low, high, i + 1, target - c * k, budget, exhausted)) return true;
  return false;
}

} // namespace

bool provablyDisjoint(const ViewGeometry& a, const ViewGeometry& b) {
  if (a.numel == 0 || b.numel == 0) return true;
  if (a.itemsize != b.itemsize) return false;
  // a's element i and b's element j share memory when
  //   sum(i_k * a.stride_k) - sum(j_k * b.stride_k) == b.offset - a.offset.
  std::vector<IndexTerm> terms;
  for (size_t d = 0; d < a.sizes.size(); ++d)
    if (a.sizes[d] > 1 && a.strides[d] != 0) terms.push_back({a.strides[d], a.sizes[d]});
  for (size_t d = 0; d < b.sizes.size(); ++d)
    if (b.sizes[d] > 1 && b.strides[d] != 0) terms.push_back({-b.strides[d], b.sizes[d]});
  // Largest coefficients first: each then leaves few indices to try.
  std::sort(terms.begin(), terms.end(), [](const IndexTerm& x, const IndexTerm& y) {
    return std::abs(x.coefficient) > std::abs(y.coefficient);
  });
  std::vector<int64_t> low(terms.size() + 1, 0), high(terms.size() + 1, 0);
  for (size_t i = terms.size(); i-- > 0;) {
    const int64_t reach = terms[i].coefficient * (terms[i].extent - 1);
    low[i] = low[i + 1] + std::min<int64_t>(reach, 0);
    high[i] = high[i + 1] + std::max<int64_t>(reach, 0);
  }
  int64_t budget = 4096;
  bool exhausted = false;
  const bool shared =
      solvable(terms, low, high, 0, b.storage_offset - a.storage_offset, budget, exhausted);
  return !shared && !exhausted;
}

void checkNoInternalOverlap(const ViewGeometry& t) {
  TORCH_CHECK(internalOverlap(t) != at::MemOverlap::Yes,
              "unsupported operation: more than one element of the written-to tensor refers to a "
              "single memory location. Please clone() the tensor before performing the "
              "operation.");
}

void checkNoPartialOverlap(const ViewGeometry& a, const ViewGeometry& b) {
  TORCH_CHECK(overlapStatus(a, b) != at::MemOverlapStatus::Partial,
              "unsupported operation: some elements of the input tensor and the written-to tensor "
              "refer to a single memory location. Please clone() the tensor before performing "
              "the operation.");
}

} // namespace torchneuron

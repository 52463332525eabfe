#pragma once
// What planning knows about a tensor: how it views a storage (identity, offset, sizes, strides),
// never its memory. Aliasing decisions (in-place operands, overlap checks) are made from this
// alone, so they hold for a storage that is not allocated yet; a planned output that does not
// exist yet has no storage and aliases nothing.

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace torchneuron {

struct ViewGeometry {
  // Borrowed: from the tensor (ViewGeometry::of) or from the plan that describes it.
  at::IntArrayRef sizes, strides;
  int64_t storage_offset = 0; // in elements
  int64_t itemsize = 1;
  int64_t numel = 1;
  bool contiguous = true;
  bool dense = true;             // non-overlapping and dense (a permutation of contiguous)
  const void* storage = nullptr; // the StorageImpl; null: a planned tensor of its own
  const void* tensor = nullptr;  // the TensorImpl: ATen counts a tensor as fully overlapping
                                 // itself whatever its layout

  // Metadata only: reads no data pointer.
  static ViewGeometry of(const at::Tensor& t);
  // A view of a tensor the plan creates (no storage yet); `sizes` and `strides` must outlive it.
  static ViewGeometry planned(at::IntArrayRef sizes, at::IntArrayRef strides,
                              int64_t storage_offset, int64_t itemsize);
};

// ATen's at::has_internal_overlap, decided from the geometry.
at::MemOverlap internalOverlap(const ViewGeometry& t);

// ATen's at::get_overlap_status, decided from storage identity and element ranges within the
// storage rather than from data pointers.
at::MemOverlapStatus overlapStatus(const ViewGeometry& a, const ViewGeometry& b);

// Whether no element of `a` shares memory with an element of `b`, proven from the geometry:
// offset_a + sum(i_k * stride_a_k) == offset_b + sum(j_k * stride_b_k) has no solution with
// every index within its size (a bounded search; false when it finds one, when the search would
// be long, or for views of one storage with different item sizes). For what ATen calls too hard
// to judge: interleaved column blocks of one matrix (a GRU cell's gates, `chunk(3, 1)`) share
// a byte range but no element.
bool provablyDisjoint(const ViewGeometry& a, const ViewGeometry& b);

// ATen's assert_no_internal_overlap and assert_no_partial_overlap, with their messages.
void checkNoInternalOverlap(const ViewGeometry& t);
void checkNoPartialOverlap(const ViewGeometry& a, const ViewGeometry& b);

} // namespace torchneuron

#pragma once
// How a kernel walks its operands: dimensions ordered so the fastest-moving one is innermost,
// size-1 dimensions dropped and adjacent dimensions merged where every operand allows it (ATen's
// TensorIterator does the same). A contiguous op of any shape becomes rank 1, which is what keeps
// the number of compiled kernels small. Everything here reads view geometry, never memory.

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

#include "device/view_geometry.h"
#include "fusion/kernel_signature.h"

namespace torchneuron {

using DimVector = c10::SmallVector<int64_t, 6>;

// Dimensions after merging, outermost first, with each operand's strides (in elements).
struct MergedDims {
  DimVector sizes;
  c10::SmallVector<DimVector, 4> strides; // per operand, like `sizes`
};

// The one dimension-merging rule: walks `sizes` (outermost first, with each operand's strides
// in `strides`), skips size-1 dimensions and merges a dimension into the previous (outer) one
// when every operand steps through both as one. Empty when no dimension is larger than 1.
MergedDims mergeDimensions(at::IntArrayRef sizes, at::ArrayRef<DimVector> strides);

struct IterationPlan {
  DimVector sizes;                        // coalesced, outermost first, rank >= 1
  c10::SmallVector<DimVector, 4> strides; // per operand, in elements, like `sizes`
  c10::SmallVector<fusion::InnerStride, 4> inner;

  int rank() const { return static_cast<int>(sizes.size()); }
  int64_t numel() const;
};

// The dimension order (outermost first) that follows the operands' memory layout; `operands`
// may include broadcast inputs of lower rank.
DimVector layoutOrder(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands);

// The strides of a new dense tensor of `shape` laid out like the operands (as ATen lays out the
// output of an elementwise op: a transposed input gives a transposed output).
DimVector stridesLike(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands);

// The contiguous strides of `shape`.
DimVector contiguousStrides(at::IntArrayRef shape);

// The plan for operands (output first) broadcast to `shape`.
IterationPlan planIteration(at::IntArrayRef shape, at::ArrayRef<ViewGeometry> operands);

} // namespace torchneuron

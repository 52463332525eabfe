#pragma once
// How an elementwise kernel walks its operands: the broadcast shape, reordered so the
// fastest-moving dimension is innermost and with adjacent dimensions merged where every operand
// allows it (ATen's TensorIterator does the same). A contiguous op of any shape becomes rank 1,
// which is what keeps the number of compiled kernels small.

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

#include "fusion/kernel_signature.h"

namespace torchneuron {

using DimVector = c10::SmallVector<int64_t, 6>;

struct IterationPlan {
  DimVector sizes;                        // coalesced, outermost first, rank >= 1
  c10::SmallVector<DimVector, 4> strides; // per operand, in elements, like `sizes`
  c10::SmallVector<fusion::InnerStride, 4> inner;

  int rank() const { return static_cast<int>(sizes.size()); }
  int64_t numel() const;
};

// The dimension order (outermost first) that follows the operands' memory layout; `operands`
// may include broadcast inputs of lower rank.
DimVector layoutOrder(at::IntArrayRef shape, at::ArrayRef<at::Tensor> operands);

// A new device tensor of `shape` and `dtype` laid out like the operands (as ATen does for the
// output of an elementwise op: a transposed input gives a transposed output).
at::Tensor allocateLike(at::IntArrayRef shape, at::ScalarType dtype,
                        at::ArrayRef<at::Tensor> operands, c10::Device device);

// The plan for operands (output first) broadcast to `shape`.
IterationPlan planIteration(at::IntArrayRef shape, at::ArrayRef<at::Tensor> operands);

} // namespace torchneuron

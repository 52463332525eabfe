#pragma once
// Kernel signatures for the fusion tests, written by hand.

#include "fusion/kernel_signature.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {

// A float32 op over operands contiguous in the innermost of `rank` dimensions.
inline ElementwiseSignature contiguous(const char* op, size_t inputs, int rank = 1) {
  ElementwiseSignature s;
  s.op = findElementwiseOp(op);
  s.rank = rank;
  s.inputs.assign(inputs, c10::kFloat);
  s.inner.assign(inputs + 1, InnerStride::kContiguous);
  s.constants.assign(s.op->constants.size(), -1);
  s.present.assign(s.op->optional_operands.size(), true);
  return s;
}

} // namespace torchneuron::fusion

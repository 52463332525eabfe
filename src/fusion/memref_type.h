#pragma once
// The MLIR type of a kernel operand: a memref with dynamic sizes, strides and offset, whose
// innermost stride is statically 1 when the operand is contiguous there (so LLVM vectorizes).

#include <string>

#include "fusion/kernel_signature.h"

namespace torchneuron::fusion {

inline std::string stridedMemrefType(int dims, const std::string& element, InnerStride inner) {
  std::string shape, strides;
  for (int d = 0; d < dims; ++d) {
    shape += "?x";
    const bool unit = d == dims - 1 && inner == InnerStride::kContiguous;
    strides += std::string(d ? ", " : "") + (unit ? "1" : "?");
  }
  return "memref<" + shape + element + ", strided<[" + strides + "], offset: ?>>";
}

}  // namespace torchneuron::fusion

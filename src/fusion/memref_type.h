#pragma once
// The MLIR type of a kernel operand: a memref with dynamic sizes, strides and offset, whose
// innermost stride is statically 1 when the operand is contiguous there (so LLVM vectorizes).

#include <cstdint>
#include <string>

#include "fusion/kernel_signature.h"

namespace torchneuron::fusion {

// `inner` describes dimension `static_dim` (the innermost by default): contiguous gives it the
// static stride 1; strided and broadcast leave it dynamic (MLIR's strided layout forbids a
// static 0: kernels index a broadcast dimension at 0 instead). Dimension `fixed_dim`, when
// given, has the static stride `fixed_stride` if that is positive (a window's step,
// ReductionOp::static_window).
inline std::string stridedMemrefType(int dims, const std::string& element, InnerStride inner,
                                     int static_dim = -1, int fixed_dim = -1,
                                     int64_t fixed_stride = 0) {
  if (static_dim < 0) static_dim = dims - 1;
  std::string shape, strides;
  for (int d = 0; d < dims; ++d) {
    shape += "?x";
    std::string stride = "?";
    if (d == static_dim && inner == InnerStride::kContiguous) stride = "1";
    if (d == fixed_dim && fixed_stride > 0) stride = std::to_string(fixed_stride);
    strides += std::string(d ? ", " : "") + stride;
  }
  return "memref<" + shape + element + ", strided<[" + strides + "], offset: ?>>";
}

} // namespace torchneuron::fusion

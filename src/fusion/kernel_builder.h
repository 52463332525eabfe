#pragma once
// Writes the MLIR module of a kernel signature. The module holds one function, `kernel`, whose
// arguments are the operands as strided memrefs (output first), the op's run-time scalars
// (f64 for float compute, i64 otherwise) and the `[begin, end)` range of the outer dimension.

#include <string>

#include "fusion/kernel_signature.h"

namespace torchneuron::fusion {

std::string buildElementwiseKernel(const ElementwiseSignature& signature);

// Reduction kernels take the outputs, the inputs, the op's params (f64 for float compute, i64
// otherwise), the number of reduced elements per row (i64), then begin and end.
std::string buildReductionKernel(const ReductionSignature& signature);

// The number of 8-byte argument slots the kernel ABI expects, not counting begin and end
// (each rank-r memref takes 3 + 2r: allocated and aligned pointer, offset, sizes, strides).
int kernelArgumentSlots(const ElementwiseSignature& signature);

} // namespace torchneuron::fusion

#pragma once
// MLIR text shared by the elementwise kernel builders (kernel_builder.cpp for one op,
// fused_kernel.cpp for a fused chain): operand memref types, indexing maps and the range view
// every kernel takes of its operands.

#include <string>
#include <vector>

#include "fusion/kernel_signature.h"

namespace torchneuron::fusion {

struct OperandSpec;

// An operand broadcast along the innermost dimension drops that dimension: its memref has
// rank - 1 and its indexing map ignores the innermost loop, so its load leaves that loop.
inline int operandRank(int rank, InnerStride inner) {
  return inner == InnerStride::kBroadcast ? rank - 1 : rank;
}

// The memref type of an operand of a rank-`rank` iteration.
std::string operandMemrefType(int rank, const std::string& element, InnerStride inner);

// The linalg indexing map of such an operand.
std::string operandIndexingMap(int rank, InnerStride inner);

// `%s<name> = ` the view of `%a<name>` restricted to rows [%begin, %begin + %n) of the outer
// dimension (`dims` is the memref's rank; %n and %d1... are the prologue's).
std::string rangeView(const std::string& name, const std::string& type, int dims);

// The prologue's `%n` (rows of this call) and `%d<k>` (the output's extent in dimension k, read
// from `%a0` of `output_type`).
std::string rangePrologue(int rank, const std::string& output_type);

// "parallel" iterator types for `rank` loops.
std::string parallelIterators(int rank);

// The operand specs present in `signature`, in order (absent optional operands skipped).
std::vector<const OperandSpec*> presentOperands(const ElementwiseSignature& signature);

} // namespace torchneuron::fusion

#pragma once
// What a compiled kernel is specialized on (DESIGN.md decision 2): op, constants, dtypes, rank
// and each operand's innermost-stride class. Sizes, strides and scalar values are run-time
// arguments, so a signature covers every shape of that rank and layout class.

#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/hash.h"

namespace torchneuron::fusion {

struct ElementwiseOp;

// The innermost dimension's stride, the one fact about strides codegen uses (unit strides
// vectorize, zero strides hoist the load).
enum class InnerStride : uint8_t { kContiguous, kBroadcast, kStrided };

// The class of an operand's innermost stride: 1 contiguous, 0 broadcast where the operand may be
// (an input; a written output never is), anything else strided.
inline InnerStride innerStrideClass(int64_t stride, bool may_broadcast) {
  return stride == 1                    ? InnerStride::kContiguous
         : stride == 0 && may_broadcast ? InnerStride::kBroadcast
                                        : InnerStride::kStrided;
}

// Built on every dispatch, so its lists live inline (no allocation for common ops).
struct ElementwiseSignature {
  const ElementwiseOp* op = nullptr;
  c10::SmallVector<int64_t, 2> constants; // values of op->constants
  c10::SmallVector<bool, 2> present;      // optional operands given (op->optional_operands)
  c10::ScalarType compute = c10::kFloat;  // promoted dtype (before opmath widening)
  c10::ScalarType output = c10::kFloat;
  c10::SmallVector<c10::ScalarType, 4> inputs; // dtypes of the operands that are present
  int rank = 1;                                // iteration rank after coalescing, >= 1
  c10::SmallVector<InnerStride, 5> inner;      // output first, then inputs
  // The input that is the output itself (an in-place op's self), or -1. The kernel reads it
  // through the output, so it has one pointer less and needs no aliasing check to vectorize.
  int aliased_input = -1;

  // Kernel-cache key: stable across processes (no pointers), covers every field above.
  Hash64 key() const;
  // Human-readable, for warnings and tests: "add(f32,f32->f32) rank 1 [c,c,c]".
  std::string describe() const;
};

struct ReductionOp;

// A reduction kernel: inputs of rank kept + reduced (kept dimensions outermost), outputs of
// rank kept (or kept + reduced for row-wise ops). The range [begin, end) covers the outermost
// kept dimension.
struct ReductionSignature {
  const ReductionOp* op = nullptr;
  c10::SmallVector<int64_t, 2> constants;
  c10::ScalarType compute = c10::kFloat;
  c10::SmallVector<c10::ScalarType, 4> inputs;
  c10::SmallVector<c10::ScalarType, 2> outputs;
  int kept_rank = 1;    // >= 1
  int reduced_rank = 1; // >= 1
  // Outputs first, then inputs: the stride class of the innermost dimension (of an input: the
  // innermost reduced one, or in column order the innermost kept one).
  c10::SmallVector<InnerStride, 6> inner;
  // Column order: the inputs' innermost kept dimension is contiguous and the reduction runs
  // across it (a bias gradient: sum over the rows of [N, C]). The kernel then walks tiles of
  // that dimension with one accumulator per column, vectorized across columns. Only for
  // single-pass reductions without element indices (columnOrderSupported).
  bool column_order = false;
  // Blocked rows: the only kept dimension lies between reduced ones in the inputs' memory (a
  // batch norm's channel in [N, C, H, W]), so one row's elements are short runs far apart. The
  // kernel then walks a block of rows together, outer reduced dimensions outside the block's
  // rows, each row's innermost run inside, with the rows' accumulators in stack buffers: the
  // inputs are read in memory order (blockedRowsSupported).
  bool blocked_rows = false;

  Hash64 key() const;
  std::string describe() const;
  // The rank of output `o`'s memref: kept + reduced for a row-wise op's element outputs, kept
  // for a reduction's (and a row-wise op's per-row results, ReductionOp::row_stats).
  int outputRank(size_t o) const;
};

// The one stable copy of `signature` (by key) for the life of the process: recorded launches
// name their signature by this pointer. Thread-safe.
const ElementwiseSignature* internSignature(const ElementwiseSignature& signature, Hash64 key);
const ReductionSignature* internSignature(const ReductionSignature& signature, Hash64 key);

// Whether `op` can run in column order (ReductionSignature::column_order).
bool columnOrderSupported(const ReductionOp& op);
// Whether `op` can run with blocked rows (ReductionSignature::blocked_rows): a row-wise op with
// per-row results, no element index, no stored row value and no pass results of its own.
bool blockedRowsSupported(const ReductionOp& op);

// The exported symbol of the kernel with this key.
std::string kernelEntryName(Hash64 key);

} // namespace torchneuron::fusion

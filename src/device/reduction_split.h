#pragma once
// Long rows across threads. A reduction's kernel runs its kept rows in parallel, one row per
// index of its outer range, so a reduction with one kept row (x.sum(), a mean-reduced loss) ran
// on one thread whatever torch.get_num_threads() said. Such a row, when long and of an op whose
// result is a function of its chunks' results (ReductionOp::partials: sums, means, products,
// extrema, vector norms but of a general order, the pointwise losses), is planned as two
// launches instead:
//
//   1. the op over the row with its outermost dimension cut into chunks (a merged row of n
//      elements viewed as [chunks, n / chunks]), one partial result per chunk, into a scratch
//      output of the plan (a new tensor that the call does not return);
//   2. the combining op (sum, mean, prod, amax, amin, the same norm) over those partials, into
//      the output.
//
// The chunk count depends on the row's length only, never on the thread count, so a result does
// not change with torch.set_num_threads(). Floating sums, products and norms keep their partials
// in float64, as they accumulate within a chunk. The adaptive tracer records both launches, and its
// partitioner fuses an elementwise prologue into the first and an epilogue into the second.

#include <cstdint>

#include "device/launch_plan.h"

namespace torchneuron {

// Rows shorter than this stay one launch: splitting them across two threads here cost more than
// it saved (64K-element sums took 17 us split against 9 us whole, bench/reduction_fusion.py).
constexpr int64_t kSplitRowMinElements = int64_t{1} << 18;

// The number of chunks a row of `elements` splits into, cut along its outermost dimension of
// `outermost` elements (the whole row when its dimensions merged into one): the largest divisor
// of `outermost` from 4 to 64 that leaves chunks of at least 4096 elements; 0 when the row is too
// short or there is none.
int64_t rowChunks(int64_t elements, int64_t outermost);

// Rewrites `plan`, the plan of one reduction launch (reduction_plan.cpp), into the two launches
// above when its one kept row splits; otherwise leaves it alone. The scratch output is appended
// after the call's outputs: callers return only those (launchReduction).
void splitLongRow(LaunchPlan& plan);

} // namespace torchneuron

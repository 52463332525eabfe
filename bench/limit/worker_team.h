#pragma once
// Fork-join over std::threads for the limit loops (limit_kernels.h): the caller runs the first
// part of a range itself and threads - 1 workers, kept alive between calls, run the others, the
// way a tuned runtime (OpenMP, TBB) splits a loop, without its scheduling.

#include <cstdint>
#include <functional>

namespace torchneuron::bench {

// Runs body(begin, end) over [0, n) split into contiguous parts of at least `grain` items (up
// to 4 per thread), on at most `threads` threads (the caller and threads - 1 workers; 1 to
// 4096), and returns when all parts are done. One part runs on the caller alone, without waking
// anyone; otherwise each part runs on whichever thread claims it first, the caller included.
//
// Locking: one call at a time per thread count (a mutex per team); the workers of a team wait
// for its next call spinning briefly, then on a condition variable.
void parallelFor(int64_t n, int64_t grain, int threads,
                 const std::function<void(int64_t, int64_t)>& body);

} // namespace torchneuron::bench

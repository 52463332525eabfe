#pragma once
// Process-wide counters behind torchneuron.metrics().

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "support/made_once.h"

namespace c10 {
class OperatorHandle;
}

namespace torchneuron {

// How the device ran an op.
// kInterim: ATen's CPU kernel run while the op's own kernel compiles in the background
// (interim_launch.h); not a fallback.
enum class LaunchKind { kCompiled, kLibrary, kFallback, kInterim };

const char* launchKindName(LaunchKind kind);

// The counter of launches of `op_name` (e.g. "aten::add.Tensor") of one kind. Stable for the
// process; kernels look theirs up once and count without a lock.
using LaunchCounter = std::atomic<int64_t>;
LaunchCounter* launchCounter(LaunchKind kind, const std::string& op_name);

// One call site's launch counter, looked up at its first use and kept: `static
// SiteLaunchCounter site;` then `site.get(kind, name)`. Fork-safe where a static pointer is not
// (support/made_once.h): the lookup takes the table's lock, which fork() holds.
class SiteLaunchCounter {
public:
  LaunchCounter* get(LaunchKind kind, const char* op_name) {
    return &made_.get([&] { return launchCounter(kind, op_name); });
  }

private:
  MadeOnce<LaunchCounter> made_;
};

inline void recordLaunch(LaunchCounter* counter) {
  counter->fetch_add(1, std::memory_order_relaxed);
}

// Counts one launch, looking its counter up (takes a lock).
void recordLaunch(LaunchKind kind, const std::string& op_name);
// The same, of the ATen op `op`, named as "aten::add.Tensor".
void recordLaunch(LaunchKind kind, const c10::OperatorHandle& op);

// The compiler and the kernel cache, since the last reset.
struct CompileMetrics {
  int64_t compiles = 0;
  int64_t compile_failures = 0;
  double compile_ms_total = 0;
  double compile_ms_median = 0;
  double compile_ms_max = 0;
  int64_t kernel_cache_hits = 0;
  int64_t kernel_cache_misses = 0;
  int64_t kernels_loaded = 0;         // in the memory tier now, not reset
  int64_t kernel_cache_bytes = 0;     // object code in the memory tier now
  int64_t kernel_cache_evictions = 0; // kernels the memory tier dropped (LRU, over its cap)
  int64_t persistent_hits = 0;        // kernels loaded from the on-disk cache
  int64_t persistent_rejected = 0;    // on-disk entries that failed verification
  double persistent_load_ms_median = 0;
  int64_t persistent_writes = 0; // not reset: the store writer's own counts
  int64_t persistent_write_batches = 0;
  int64_t persistent_writes_pending = 0;
};

// Matrix products run over the device's threads instead of OpenBLAS's own (device/direct_gemm.h,
// ProductThreads::kDevice): each mm or addmm call split, each bmm batch shared out, and each
// matrix of a bmm left over from the shares (fewer than the threads) split on its own.
LaunchCounter& splitProductCounter();

struct MetricsSnapshot {
  std::map<std::string, int64_t> launches;                           // kind name -> count
  std::map<std::string, std::map<std::string, int64_t>> ops_by_kind; // kind -> op -> count
  CompileMetrics compile;
  int64_t products_split = 0; // splitProductCounter()
};

MetricsSnapshot metricsSnapshot();
// Resets launch, compile and kernel-cache counters (compiled kernels stay loaded).
void resetMetrics();

} // namespace torchneuron

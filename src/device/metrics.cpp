#include "device/metrics.h"

#include <mutex>

#include "cache/kernel_cache.h"

namespace torchneuron {
namespace {

// Locking: launches come from the caller's thread and from autograd's device thread; one
// mutex guards the maps. A launch is far costlier than this lock.
struct MetricsState {
  std::mutex mutex;
  MetricsSnapshot counters;
};

MetricsState& state() {
  static auto* metrics = new MetricsState();
  return *metrics;
}

}  // namespace

const char* launchKindName(LaunchKind kind) {
  switch (kind) {
    case LaunchKind::kCompiled:
      return "compiled";
    case LaunchKind::kLibrary:
      return "library";
    case LaunchKind::kFallback:
      return "fallback";
  }
  return "unknown";
}

void recordLaunch(LaunchKind kind, const std::string& op_name) {
  MetricsState& metrics = state();
  std::lock_guard<std::mutex> lock(metrics.mutex);
  const char* kind_name = launchKindName(kind);
  ++metrics.counters.launches[kind_name];
  ++metrics.counters.ops_by_kind[kind_name][op_name];
}

MetricsSnapshot metricsSnapshot() {
  MetricsState& metrics = state();
  std::lock_guard<std::mutex> lock(metrics.mutex);
  MetricsSnapshot snapshot = metrics.counters;
  for (LaunchKind kind : {LaunchKind::kCompiled, LaunchKind::kLibrary, LaunchKind::kFallback}) {
    snapshot.launches.emplace(launchKindName(kind), 0);
    snapshot.ops_by_kind[launchKindName(kind)];
  }
  const KernelCacheStats cache = kernelCacheStats();
  snapshot.compile.compiles = cache.compiles;
  snapshot.compile.compile_failures = cache.compile_failures;
  snapshot.compile.compile_ms_total = cache.compile_ms_total;
  snapshot.compile.compile_ms_median = cache.compile_ms_median;
  snapshot.compile.compile_ms_max = cache.compile_ms_max;
  snapshot.compile.kernel_cache_hits = cache.hits;
  snapshot.compile.kernel_cache_misses = cache.misses;
  snapshot.compile.kernels_loaded = cache.entries;
  return snapshot;
}

void resetMetrics() {
  MetricsState& metrics = state();
  std::lock_guard<std::mutex> lock(metrics.mutex);
  metrics.counters = MetricsSnapshot();
  resetKernelCacheCounters();
}

}  // namespace torchneuron

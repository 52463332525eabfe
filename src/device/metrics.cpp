#include "device/metrics.h"

#include <memory>
#include <mutex>

#include "cache/kernel_cache.h"

namespace torchneuron {
namespace {

// Locking: `mutex` guards the counter table (lookups and snapshots); counters themselves are
// atomics, incremented from the caller's thread or autograd's device thread without the lock.
struct MetricsState {
  std::mutex mutex;
  std::map<std::string, std::map<std::string, std::unique_ptr<LaunchCounter>>> counters;
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

LaunchCounter* launchCounter(LaunchKind kind, const std::string& op_name) {
  MetricsState& metrics = state();
  std::lock_guard<std::mutex> lock(metrics.mutex);
  std::unique_ptr<LaunchCounter>& counter = metrics.counters[launchKindName(kind)][op_name];
  if (!counter) counter = std::make_unique<LaunchCounter>(0);
  return counter.get();
}

void recordLaunch(LaunchKind kind, const std::string& op_name) {
  recordLaunch(launchCounter(kind, op_name));
}

MetricsSnapshot metricsSnapshot() {
  MetricsState& metrics = state();
  MetricsSnapshot snapshot;
  for (LaunchKind kind : {LaunchKind::kCompiled, LaunchKind::kLibrary, LaunchKind::kFallback}) {
    snapshot.launches.emplace(launchKindName(kind), 0);
    snapshot.ops_by_kind[launchKindName(kind)];
  }
  {
    std::lock_guard<std::mutex> lock(metrics.mutex);
    for (const auto& [kind, ops] : metrics.counters) {
      for (const auto& [op, counter] : ops) {
        const int64_t count = counter->load(std::memory_order_relaxed);
        if (count == 0) continue;
        snapshot.launches[kind] += count;
        snapshot.ops_by_kind[kind][op] = count;
      }
    }
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
  snapshot.compile.kernel_cache_bytes = cache.memory_bytes;
  snapshot.compile.kernel_cache_evictions = cache.memory_evictions;
  snapshot.compile.persistent_hits = cache.persistent_hits;
  snapshot.compile.persistent_rejected = cache.persistent_rejected;
  snapshot.compile.persistent_load_ms_median = cache.persistent_load_ms_median;
  return snapshot;
}

void resetMetrics() {
  MetricsState& metrics = state();
  {
    std::lock_guard<std::mutex> lock(metrics.mutex);
    for (auto& [kind, ops] : metrics.counters)
      for (auto& [op, counter] : ops) counter->store(0, std::memory_order_relaxed);
  }
  resetKernelCacheCounters();
}

}  // namespace torchneuron

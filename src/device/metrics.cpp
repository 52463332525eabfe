#include "device/metrics.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/kernel_cache.h"
#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

using CounterTable = std::map<std::string, std::map<std::string, std::unique_ptr<LaunchCounter>>>;

// Locking: `table_mutex` guards the counter table (lookups and snapshots); counters themselves
// are atomics, incremented from the caller's thread or autograd's device thread without the
// lock. Held across fork() (ForkRank::kMetrics).
std::mutex table_mutex;
CounterTable* table = nullptr;

// The table, made at first use; the caller holds `table_mutex`.
CounterTable& lockedTable(std::unique_lock<std::mutex>& lock) {
  holdAcrossFork<table_mutex>(ForkRank::kMetrics);
  lock = std::unique_lock<std::mutex>(table_mutex);
  if (table == nullptr) table = new CounterTable();
  return *table;
}

} // namespace

const char* launchKindName(LaunchKind kind) {
  switch (kind) {
  case LaunchKind::kCompiled:
    return "compiled";
  case LaunchKind::kLibrary:
    return "library";
  case LaunchKind::kFallback:
    return "fallback";
  case LaunchKind::kInterim:
    return "interim";
  }
  return "unknown";
}

LaunchCounter* launchCounter(LaunchKind kind, const std::string& op_name) {
  std::unique_lock<std::mutex> lock;
  std::unique_ptr<LaunchCounter>& counter = lockedTable(lock)[launchKindName(kind)][op_name];
  if (!counter) counter = std::make_unique<LaunchCounter>(0);
  return counter.get();
}

void recordLaunch(LaunchKind kind, const std::string& op_name) {
  recordLaunch(launchCounter(kind, op_name));
}

void recordLaunch(LaunchKind kind, const c10::OperatorHandle& op) {
  // Counters are stable for the process, so each thread remembers the counter of each op it
  // counted (the table's lock and string keys cost more than a tiny library op's own work). The
  // name is compared too: an op registered from Python may be removed and another take its
  // schema's address.
  struct Known {
    c10::OperatorName name;
    LaunchCounter* counter;
  };
  thread_local std::unordered_map<const c10::FunctionSchema*, Known> known[4];
  const c10::FunctionSchema& schema = op.schema();
  auto& counters = known[static_cast<int>(kind)];
  auto found = counters.find(&schema);
  if (found == counters.end() || !(found->second.name == schema.operator_name())) {
    const c10::OperatorName& name = schema.operator_name();
    LaunchCounter* counter = launchCounter(
        kind, name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
    found = counters.insert_or_assign(&schema, Known{name, counter}).first;
  }
  recordLaunch(found->second.counter);
}

LaunchCounter& splitProductCounter() {
  static LaunchCounter counter{0};
  return counter;
}

MetricsSnapshot metricsSnapshot() {
  MetricsSnapshot snapshot;
  snapshot.products_split = splitProductCounter().load(std::memory_order_relaxed);
  for (LaunchKind kind :
       {LaunchKind::kCompiled, LaunchKind::kLibrary, LaunchKind::kFallback, LaunchKind::kInterim}) {
    snapshot.launches.emplace(launchKindName(kind), 0);
    snapshot.ops_by_kind[launchKindName(kind)];
  }
  {
    std::unique_lock<std::mutex> lock;
    for (const auto& [kind, ops] : lockedTable(lock)) {
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
  snapshot.compile.persistent_writes = cache.persistent_writes;
  snapshot.compile.persistent_write_batches = cache.persistent_write_batches;
  snapshot.compile.persistent_writes_pending = cache.persistent_writes_pending;
  return snapshot;
}

void resetMetrics() {
  {
    std::unique_lock<std::mutex> lock;
    for (auto& [kind, ops] : lockedTable(lock))
      for (auto& [op, counter] : ops)
        counter->store(0, std::memory_order_relaxed);
  }
  resetKernelCacheCounters();
  splitProductCounter().store(0, std::memory_order_relaxed);
}

} // namespace torchneuron

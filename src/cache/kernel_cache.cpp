#include "cache/kernel_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>

#include "fusion/compiler.h"
#include "fusion/kernel_signature.h"
#include "launcher/object_loader.h"

namespace torchneuron {
namespace {

struct Entry {
  CachedKernel kernel;
  bool ready = false;  // guarded by Table::mutex; waiters sleep on Table::compiled
};

// Locking: `mutex` guards `entries` and every Entry's `ready`/`kernel` until ready is set;
// after that an entry is immutable and read without the lock's exclusive side.
struct Table {
  std::shared_mutex mutex;
  std::condition_variable_any compiled;
  std::unordered_map<Hash64, std::unique_ptr<Entry>> entries;
  std::atomic<int64_t> hits{0}, misses{0}, compiles{0}, failures{0};
  std::atomic<int64_t> compile_us{0};
  std::mutex latencies_mutex;
  std::vector<double> latencies_ms;  // per compile since the last reset
};

Table& table() {
  static Table* instance = new Table();
  return *instance;
}

}  // namespace

const CachedKernel& kernelFor(Hash64 key, const std::function<std::string()>& build_mlir) {
  Table& t = table();
  {
    std::shared_lock<std::shared_mutex> read(t.mutex);
    auto it = t.entries.find(key);
    if (it != t.entries.end() && it->second->ready) {
      t.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second->kernel;
    }
  }
  Entry* entry;
  {
    std::unique_lock<std::shared_mutex> write(t.mutex);
    auto [it, inserted] = t.entries.try_emplace(key, nullptr);
    if (!inserted) {  // another thread compiles it, or just did
      Entry* pending = it->second.get();
      t.compiled.wait(write, [&] { return pending->ready; });
      t.hits.fetch_add(1, std::memory_order_relaxed);
      return pending->kernel;
    }
    it->second = std::make_unique<Entry>();
    entry = it->second.get();
  }
  t.misses.fetch_add(1, std::memory_order_relaxed);
  CachedKernel result;
  try {
    const auto start = std::chrono::steady_clock::now();
    const fusion::ObjectCode object =
        fusion::compileKernel(build_mlir(), fusion::kernelEntryName(key));
    result.function = loadKernelObject(object.bytes, object.entry);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    t.compiles.fetch_add(1, std::memory_order_relaxed);
    t.compile_us.fetch_add(static_cast<int64_t>(ms * 1000));
    std::lock_guard<std::mutex> lock(t.latencies_mutex);
    t.latencies_ms.push_back(ms);
  } catch (const std::exception& error) {
    result.failure = error.what();
    t.failures.fetch_add(1, std::memory_order_relaxed);
  }
  {
    std::unique_lock<std::shared_mutex> write(t.mutex);
    entry->kernel = std::move(result);
    entry->ready = true;
  }
  t.compiled.notify_all();
  return entry->kernel;
}

KernelCacheStats kernelCacheStats() {
  Table& t = table();
  KernelCacheStats stats;
  stats.hits = t.hits.load();
  stats.misses = t.misses.load();
  stats.compiles = t.compiles.load();
  stats.compile_failures = t.failures.load();
  stats.compile_ms_total = t.compile_us.load() / 1000.0;
  {
    std::lock_guard<std::mutex> lock(t.latencies_mutex);
    std::vector<double> sorted = t.latencies_ms;
    std::sort(sorted.begin(), sorted.end());
    if (!sorted.empty()) {
      stats.compile_ms_median = sorted[sorted.size() / 2];
      stats.compile_ms_max = sorted.back();
    }
  }
  std::shared_lock<std::shared_mutex> read(t.mutex);
  stats.entries = static_cast<int64_t>(t.entries.size());
  return stats;
}

void resetKernelCacheCounters() {
  Table& t = table();
  t.hits = 0;
  t.misses = 0;
  t.compiles = 0;
  t.failures = 0;
  t.compile_us = 0;
  std::lock_guard<std::mutex> lock(t.latencies_mutex);
  t.latencies_ms.clear();
}

}  // namespace torchneuron

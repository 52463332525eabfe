#include "cache/kernel_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <optional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>

#include "cache/executable_container.h"
#include "cache/persistent_store.h"
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
  std::vector<double> load_ms;       // per persistent load since the last reset
  std::atomic<int64_t> persistent_hits{0}, persistent_rejected{0};
};

// What an on-disk entry must match to be loaded here. The key material names the entry symbol
// too: two signatures can lower to the same MLIR (sign and sgn), and each needs its own symbol
// in the process.
LoadRequirements requirementsFor(Hash64 key, const std::string& mlir) {
  const fusion::TargetDescription& target = fusion::hostTarget();
  return {kEngineVersion, target.llvm_version, target.triple, target.features,
          std::string(fusion::kLoweringPipeline) + "; O3; libmvec",
          fusion::kernelEntryName(key) + "\n" + mlir};
}

// The store key: every input of the compile, hashed (the entry keeps them all in full).
std::string storeKey(const LoadRequirements& r) {
  std::string material;
  for (const std::string* field : {&r.engine_version, &r.llvm_version, &r.target_triple,
                                   &r.cpu_features, &r.compile_options, &r.key_material})
    material += std::to_string(field->size()) + ":" + *field;
  return hashBytes128(material.data(), material.size()).hex();
}

bool retryFailedCompiles() {
  const char* value = std::getenv("NEURON_CACHE_RETRY_FAILED");
  return value != nullptr && std::string(value) == "1";
}

// Loads `key` from the store if a verified entry is there; `rejected` tells a damaged or
// foreign entry (then recompiled and overwritten) from an absent one.
KernelFunction loadFromStore(Table& t, PersistentStore& store, const std::string& key,
                             const LoadRequirements& wanted, bool* rejected = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::vector<char>> bytes = store.get(key);
  if (!bytes) return nullptr;
  std::string why;
  std::optional<ExecutableContainer> container = parseContainer(*bytes, &why);
  if (container) why = verifyContainer(*container, wanted);
  if (!container || !why.empty()) {
    store.noteCorrupt(key, why);
    t.persistent_rejected.fetch_add(1);
    if (rejected) *rejected = true;
    return nullptr;
  }
  KernelFunction function;
  try {
    function = loadKernelObject(container->object, container->kernels.front().symbol);
  } catch (const std::exception& error) {
    store.noteCorrupt(key, error.what());
    t.persistent_rejected.fetch_add(1);
    if (rejected) *rejected = true;
    return nullptr;
  }
  t.persistent_hits.fetch_add(1);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(t.latencies_mutex);
  t.load_ms.push_back(ms);
  return function;
}

// Compiles and loads; writes the container to the store when there is one.
CachedKernel compileAndLoad(Table& t, Hash64 key, const std::string& mlir,
                            const LoadRequirements& wanted, PersistentStore* store,
                            const std::string& store_key) {
  CachedKernel result;
  try {
    const auto start = std::chrono::steady_clock::now();
    const fusion::ObjectCode object = fusion::compileKernel(mlir, fusion::kernelEntryName(key));
    result.function = loadKernelObject(object.bytes, object.entry);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    t.compiles.fetch_add(1, std::memory_order_relaxed);
    t.compile_us.fetch_add(static_cast<int64_t>(ms * 1000));
    {
      std::lock_guard<std::mutex> lock(t.latencies_mutex);
      t.latencies_ms.push_back(ms);
    }
    if (store != nullptr) {
      ExecutableContainer container;
      container.engine_version = wanted.engine_version;
      container.llvm_version = wanted.llvm_version;
      container.target_triple = wanted.target_triple;
      container.cpu = fusion::hostTarget().cpu;
      container.cpu_features = wanted.cpu_features;
      container.compile_options = wanted.compile_options;
      container.key_material = wanted.key_material;
      container.kernels = {{object.entry, "slots-v1"}};
      container.object = object.bytes;
      store->put(store_key, container.serialize());
    }
  } catch (const std::exception& error) {
    result.failure = error.what();
    t.failures.fetch_add(1, std::memory_order_relaxed);
    if (store != nullptr) store->recordFailure(store_key, result.failure);
  }
  return result;
}

// A memory miss: the persistent store, else a compile (single-flight across processes).
CachedKernel resolve(Table& t, Hash64 key, const std::function<std::string()>& build_mlir) {
  const std::string mlir = build_mlir();
  const LoadRequirements wanted = requirementsFor(key, mlir);
  PersistentStore* store = PersistentStore::fromEnvironment();
  if (store == nullptr) return compileAndLoad(t, key, mlir, wanted, nullptr, "");
  const std::string store_key = storeKey(wanted);
  CachedKernel result;
  bool rejected = false;
  if ((result.function = loadFromStore(t, *store, store_key, wanted, &rejected))) return result;
  if (!retryFailedCompiles()) {
    if (std::optional<std::string> reason = store->failure(store_key)) {
      result.failure = "remembered from an earlier run: " + *reason;
      return result;
    }
  }
  auto lock = store->lockKey(store_key, std::chrono::seconds(120));
  // Another process may have compiled it while this one waited (not worth a second look when
  // the entry there was damaged: this process overwrites it).
  if (!rejected && (result.function = loadFromStore(t, *store, store_key, wanted))) return result;
  return compileAndLoad(t, key, mlir, wanted, store, store_key);
}

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
    result = resolve(t, key, build_mlir);
  } catch (const std::exception& error) {  // e.g. building the module failed
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

std::string persistentKeyFor(Hash64 key, const std::string& mlir) {
  return storeKey(requirementsFor(key, mlir));
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
    std::vector<double> loads = t.load_ms;
    std::sort(loads.begin(), loads.end());
    if (!loads.empty()) stats.persistent_load_ms_median = loads[loads.size() / 2];
  }
  stats.persistent_hits = t.persistent_hits.load();
  stats.persistent_rejected = t.persistent_rejected.load();
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
  t.persistent_hits = 0;
  t.persistent_rejected = 0;
  std::lock_guard<std::mutex> lock(t.latencies_mutex);
  t.latencies_ms.clear();
  t.load_ms.clear();
}

}  // namespace torchneuron

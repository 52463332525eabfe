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

#include "cache/cache_warnings.h"
#include "cache/executable_container.h"
#include "cache/persistent_store.h"
#include "fusion/compiler.h"
#include "fusion/kernel_signature.h"
#include "launcher/object_loader.h"

namespace torchneuron {
namespace {

struct Entry {
  KernelHandle kernel;
  bool ready = false;  // guarded by Table::mutex; waiters sleep on Table::compiled
  int64_t bytes = 0;   // what it counts against the memory tier's cap, set with `ready`
  std::atomic<uint64_t> last_use{0};  // Table::clock at the latest lookup
};

// Locking: `mutex` guards `entries`, `memory_bytes` and every Entry's `ready`/`kernel`/`bytes`
// until ready is set; after that those are immutable and read under the shared side. Waiters
// hold their entry through a shared_ptr: eviction may take it out of the map meanwhile.
struct Table {
  std::shared_mutex mutex;
  std::condition_variable_any compiled;
  std::unordered_map<Hash64, std::shared_ptr<Entry>> entries;
  int64_t memory_bytes = 0;
  std::atomic<uint64_t> clock{0};
  std::atomic<int64_t> evictions{0};
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
std::shared_ptr<LoadedCode> loadFromStore(Table& t, PersistentStore& store,
                                          const std::string& key, const LoadRequirements& wanted,
                                          bool* rejected = nullptr) {
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
  std::shared_ptr<LoadedCode> code;
  try {
    code = loadKernelObject(container->object, container->kernels.front().symbol);
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
  return code;
}

CachedKernel loaded(std::shared_ptr<LoadedCode> code) {
  CachedKernel kernel;
  kernel.function = code->function();
  kernel.code = std::move(code);
  return kernel;
}

// Compiles and loads; writes the container to the store when there is one.
CachedKernel compileAndLoad(Table& t, Hash64 key, const std::string& mlir,
                            const LoadRequirements& wanted, PersistentStore* store,
                            const std::string& store_key) {
  CachedKernel result;
  try {
    const auto start = std::chrono::steady_clock::now();
    const fusion::ObjectCode object = fusion::compileKernel(mlir, fusion::kernelEntryName(key));
    result = loaded(loadKernelObject(object.bytes, object.entry));
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
  if (auto code = loadFromStore(t, *store, store_key, wanted, &rejected)) return loaded(code);
  if (!retryFailedCompiles()) {
    if (std::optional<std::string> reason = store->failure(store_key)) {
      result.failure = "remembered from an earlier run: " + *reason;
      return result;
    }
  }
  auto lock = store->lockKey(store_key, std::chrono::seconds(120));
  // Another process may have compiled it while this one waited (not worth a second look when
  // the entry there was damaged: this process overwrites it).
  if (!rejected) {
    if (auto code = loadFromStore(t, *store, store_key, wanted)) return loaded(code);
  }
  return compileAndLoad(t, key, mlir, wanted, store, store_key);
}

Table& table() {
  static Table* instance = new Table();
  return *instance;
}

// Keeps the memory tier under its cap by dropping the least recently used ready entries other
// than `keep` (a scan: this runs on a miss, which costs a load or a compile anyway). A dropped
// kernel stays mapped until the launches holding it finish. Needs `t.mutex` held exclusively;
// the caller reads `capacity` before taking it (the first read may warn).
void evictOverCapacity(Table& t, const Entry* keep, int64_t capacity) {
  while (t.memory_bytes > capacity) {
    auto victim = t.entries.end();
    for (auto it = t.entries.begin(); it != t.entries.end(); ++it) {
      const Entry& e = *it->second;
      if (&e == keep || !e.ready) continue;
      if (victim == t.entries.end() || e.last_use.load(std::memory_order_relaxed) <
                                           victim->second->last_use.load(std::memory_order_relaxed))
        victim = it;
    }
    if (victim == t.entries.end()) return;
    t.memory_bytes -= victim->second->bytes;
    t.entries.erase(victim);
    t.evictions.fetch_add(1, std::memory_order_relaxed);
  }
}

// A failure holds no code; it counts its text so that remembered failures are bounded too.
int64_t footprint(const CachedKernel& kernel) {
  return kernel.code ? static_cast<int64_t>(kernel.code->bytes())
                     : static_cast<int64_t>(kernel.failure.size() + sizeof(CachedKernel));
}

}  // namespace

int64_t memoryTierCapacity() {
  static const int64_t capacity = byteCountSetting(
      "NEURON_CACHE_MEMORY_MAX_BYTES", int64_t{256} << 20, "the default of 256 MiB stays");
  return capacity;
}

KernelHandle kernelFor(Hash64 key, const std::function<std::string()>& build_mlir) {
  Table& t = table();
  {
    std::shared_lock<std::shared_mutex> read(t.mutex);
    auto it = t.entries.find(key);
    if (it != t.entries.end() && it->second->ready) {
      t.hits.fetch_add(1, std::memory_order_relaxed);
      it->second->last_use.store(t.clock.fetch_add(1, std::memory_order_relaxed),
                                 std::memory_order_relaxed);
      return it->second->kernel;
    }
  }
  std::shared_ptr<Entry> entry;
  {
    std::unique_lock<std::shared_mutex> write(t.mutex);
    auto [it, inserted] = t.entries.try_emplace(key, nullptr);
    if (!inserted) {  // another thread compiles it, or just did
      std::shared_ptr<Entry> pending = it->second;
      t.compiled.wait(write, [&] { return pending->ready; });
      t.hits.fetch_add(1, std::memory_order_relaxed);
      return pending->kernel;
    }
    it->second = std::make_shared<Entry>();
    entry = it->second;
  }
  t.misses.fetch_add(1, std::memory_order_relaxed);
  CachedKernel result;
  try {
    result = resolve(t, key, build_mlir);
  } catch (const std::exception& error) {  // e.g. building the module failed
    result.failure = error.what();
    t.failures.fetch_add(1, std::memory_order_relaxed);
  }
  KernelHandle handle = std::make_shared<const CachedKernel>(std::move(result));
  const int64_t capacity = memoryTierCapacity();
  {
    std::unique_lock<std::shared_mutex> write(t.mutex);
    entry->kernel = handle;
    entry->bytes = footprint(*handle);
    entry->last_use.store(t.clock.fetch_add(1, std::memory_order_relaxed));
    entry->ready = true;
    t.memory_bytes += entry->bytes;
    evictOverCapacity(t, entry.get(), capacity);
  }
  t.compiled.notify_all();
  return handle;
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
  stats.memory_evictions = t.evictions.load();
  std::shared_lock<std::shared_mutex> read(t.mutex);
  stats.entries = static_cast<int64_t>(t.entries.size());
  stats.memory_bytes = t.memory_bytes;
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
  t.evictions = 0;
  std::lock_guard<std::mutex> lock(t.latencies_mutex);
  t.latencies_ms.clear();
  t.load_ms.clear();
}

}  // namespace torchneuron

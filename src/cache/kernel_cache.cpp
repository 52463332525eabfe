#include "cache/kernel_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "cache/cache_warnings.h"
#include "cache/entry_verification.h"
#include "cache/executable_container.h"
#include "cache/persistent_store.h"
#include "cache/remote_cache.h"
#include "fusion/kernel_signature.h"
#include "launcher/object_loader.h"
#include "support/errors.h"
#include "support/fork_handlers.h"
#include "target/target.h"

namespace torchneuron {
namespace {

struct Entry {
  KernelHandle kernel;
  std::exception_ptr error; // an internal error of the resolving call, rethrown to its waiters
  bool ready = false;       // guarded by Table::mutex; waiters sleep on Table::compiled
  int64_t bytes = 0;        // what it counts against the memory tier's cap, set with `ready`
  std::atomic<uint64_t> last_use{0}; // Table::clock at the latest lookup
};

// A stored kernel linked ahead of need (prefetchStoredKernel), until the kernelFor() whose store
// key it is takes it. Guarded by Table::prefetch_mutex; `done` is set once, then the rest is
// immutable.
struct Prefetched {
  bool done = false;
  bool rejected = false;            // the entry failed verification (already counted)
  std::shared_ptr<LoadedCode> code; // null when absent or rejected
  std::string key_material;
};

// Locking: `mutex` guards `entries`, `memory_bytes` and every Entry's `ready`/`kernel`/`bytes`
// until ready is set; after that those are immutable and read under the shared side. Waiters
// hold their entry through a shared_ptr: eviction may take it out of the map meanwhile.
// `prefetch_mutex`, `first_use_mutex` and `latencies_mutex` each guard their own fields and are
// never held together, nor with `mutex`. Order (support/fork_handlers.h): `mutex`
// (ForkRank::kKernelCacheTable) may be held while the linker's lock is taken (an evicted
// kernel unlinks); the store, the compiler and the linker are used with none of these held.
// All four are held across fork(); the child drops the single-flight slots (entries not ready,
// prefetches not done) whose owners live only in the parent, and re-creates the condition
// variables and the rwlock, whose waiters live only there too.
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
  std::vector<double> latencies_ms;   // per compile since the last reset
  std::vector<double> load_ms;        // per persistent load since the last reset
  std::vector<double> remote_load_ms; // per remote hit (fetch, verify, link) since the last reset
  std::atomic<int64_t> persistent_hits{0}, persistent_rejected{0}, remote_hits{0};
  // Prefetched kernels by store key, and the bytes of those not yet taken.
  std::mutex prefetch_mutex;
  std::condition_variable prefetch_done;
  std::unordered_map<std::string, std::shared_ptr<Prefetched>> prefetched;
  int64_t prefetched_bytes = 0;
  std::atomic<int64_t> prefetch_count{0};
  // Store keys of the kernels used, in first-use order (what a warm-start profile lists).
  std::mutex first_use_mutex;
  std::vector<std::string> first_use_keys;
  std::unordered_set<std::string> first_use_seen;
};

// What the entry of kernel `key` must match. The key material names the entry symbol too: two
// signatures can lower to the same MLIR (sign and sgn), and each needs its own symbol in the
// process.
LoadRequirements requirementsFor(Hash64 key, const std::string& mlir) {
  LoadRequirements required = hostRequirements();
  required.key_material = fusion::kernelEntryName(key) + "\n" + mlir;
  return required;
}

bool retryFailedCompiles() { return cacheSettings().cache_retry_failed; }

// Runs one store operation; a fault of the store (an exception: RocksDB or the container code
// out of memory) is a miss, `fallback`, and one warning: the cache fails open.
template <typename Fn, typename T> T storeCall(const char* what, T fallback, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& error) {
    warnCacheOnce("store-fault", std::string("the compile cache failed while ") + what + " (" +
                                     error.what() + "); it is bypassed for this kernel");
    return fallback;
  }
}

// Notes an environment failure (support/errors.h): counted, kept for this process only.
void failHere(Table& t, CachedKernel& result, const std::string& why) {
  result = CachedKernel();
  result.failure = why + " (an environment failure: not remembered, the next process retries)";
  result.environmental = true;
  t.failures.fetch_add(1, std::memory_order_relaxed);
}

void recordLoadTime(Table& t, std::chrono::steady_clock::time_point start) {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(t.latencies_mutex);
  t.load_ms.push_back(ms);
}

// Parses and verifies the bytes a tier returned (their seal checked already), then links their
// code: null when any check or the link fails (`reject` is told why, unless the failure was a
// fault of this process rather than of the entry). `wanted` null: the requirements are this
// host's and the entry's own key material, which must hash to `key` (filed under its own key);
// the caller then compares the key material with its own before using the code.
std::shared_ptr<LoadedCode> verifyAndLink(const std::string& key, const std::vector<char>& bytes,
                                          const LoadRequirements* wanted,
                                          const std::function<void(const std::string&)>& reject,
                                          std::string* key_material = nullptr) {
  std::string why;
  std::optional<ExecutableContainer> container;
  const bool checked = storeCall("reading an entry", false, [&] {
    if (!wanted) {
      container.emplace();
      why = verifyEntryForHost(key, bytes, &*container);
      return true;
    }
    container = parseContainer(bytes, &why);
    if (container) why = verifyContainer(*container, *wanted);
    return true;
  });
  if (!checked) return nullptr; // a fault of this process, not of the entry
  std::shared_ptr<LoadedCode> code;
  if (why.empty()) {
    try {
      code = deviceTarget().link(container->object, container->kernels.front().symbol);
    } catch (const std::exception& error) {
      why = error.what();
    }
  }
  if (!code) {
    reject(why);
    return nullptr;
  }
  if (key_material) *key_material = std::move(container->key_material);
  return code;
}

// A rejection of an entry of the node's store: counted, warned once, overwritten by the compile.
std::function<void(const std::string&)> rejectStored(Table& t, PersistentStore& store,
                                                     const std::string& key) {
  return [&t, &store, key](const std::string& why) {
    store.noteCorrupt(key, why);
    t.persistent_rejected.fetch_add(1);
  };
}

// Loads `key` from the store if a verified entry is there; `rejected` tells a damaged or
// foreign entry (then recompiled and overwritten) from an absent one.
std::shared_ptr<LoadedCode> loadFromStore(Table& t, PersistentStore& store, const std::string& key,
                                          const LoadRequirements& wanted,
                                          bool* rejected = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  StoreRead read = StoreRead::kAbsent;
  std::optional<std::vector<char>> bytes = storeCall("reading", std::optional<std::vector<char>>(),
                                                     [&] { return store.get(key, &read); });
  if (read == StoreRead::kRejected) { // failed its checksum or MAC: counted, never mapped
    t.persistent_rejected.fetch_add(1);
    if (rejected) *rejected = true;
  }
  if (!bytes) return nullptr;
  std::shared_ptr<LoadedCode> code =
      verifyAndLink(key, *bytes, &wanted, rejectStored(t, store, key));
  if (!code) {
    if (rejected) *rejected = true;
    return nullptr;
  }
  t.persistent_hits.fetch_add(1);
  recordLoadTime(t, start);
  return code;
}

// The prefetched code of `key`, once its load is done; null when none was prefetched or its
// entry was absent. `rejected` as for loadFromStore; a key material that differs from `wanted`'s
// (a collision of the 128-bit store key) is rejected too.
std::shared_ptr<LoadedCode> takePrefetched(Table& t, PersistentStore& store, const std::string& key,
                                           const LoadRequirements& wanted, bool* rejected) {
  std::shared_ptr<Prefetched> slot;
  {
    std::unique_lock<std::mutex> lock(t.prefetch_mutex);
    auto it = t.prefetched.find(key);
    if (it == t.prefetched.end()) return nullptr;
    slot = it->second;
    t.prefetch_done.wait(lock, [&] { return slot->done; });
    if (auto again = t.prefetched.find(key); again != t.prefetched.end() && again->second == slot)
      t.prefetched.erase(again);
    if (slot->code) t.prefetched_bytes -= static_cast<int64_t>(slot->code->bytes());
  }
  if (slot->rejected) *rejected = true;
  if (!slot->code) return nullptr;
  if (slot->key_material != wanted.key_material) {
    store.noteCorrupt(key, "its key material differs from the kernel's");
    t.persistent_rejected.fetch_add(1);
    *rejected = true;
    return nullptr;
  }
  t.persistent_hits.fetch_add(1);
  return slot->code;
}

void rememberFirstUse(Table& t, const std::string& store_key) {
  std::lock_guard<std::mutex> lock(t.first_use_mutex);
  if (t.first_use_seen.insert(store_key).second) t.first_use_keys.push_back(store_key);
}

CachedKernel loaded(std::shared_ptr<LoadedCode> code) {
  CachedKernel kernel;
  kernel.function = code->function();
  kernel.code = std::move(code);
  return kernel;
}

// Where a memory miss looks after the memory tier, in order, and where a compile goes: the node's
// store and the cluster's remote tier, either of which may be absent; `key` is the store key,
// the same in both.
struct Tiers {
  PersistentStore* store = nullptr;
  RemoteCache* remote = nullptr;
  std::string key;
  bool same_key = false; // both tiers seal with one key: remote entries are stored as sealed
};

// Hands a compiled kernel's container to the store's background writer, with the key's compile
// lock, held until the entry is durable, and to the remote tier's publisher, with the key's
// lease, held until it is published; a fault only warns (storeCall).
void storeCompiled(const Tiers& tiers, const LoadRequirements& wanted, const ObjectCode& object,
                   std::unique_ptr<PersistentStore::KeyLock> lock,
                   std::shared_ptr<RemoteCache::Lease> lease) {
  storeCall("writing", false, [&] {
    ExecutableContainer container;
    container.engine_version = wanted.engine_version;
    container.llvm_version = wanted.llvm_version;
    container.target_triple = wanted.target_triple;
    container.cpu = deviceTarget().description().cpu;
    container.cpu_features = wanted.cpu_features;
    container.compile_options = wanted.compile_options;
    container.key_material = wanted.key_material;
    container.kernels = {{object.entry, "slots-v1"}};
    container.object = object.bytes;
    std::vector<char> bytes = container.serialize();
    if (tiers.store) tiers.store->putLater(tiers.key, bytes, std::move(lock));
    if (tiers.remote) tiers.remote->publishLater(tiers.key, std::move(bytes), std::move(lease));
    return true;
  });
}

// Compiles and loads; writes the container to the tiers there are. A compile failure
// (CompileError) is remembered, in the store too; an environment failure (EnvironmentError,
// std::bad_alloc) only in this process; any other exception is an internal error and
// propagates.
CachedKernel compileAndLoad(Table& t, Hash64 key, const std::string& mlir,
                            const LoadRequirements& wanted, const Tiers& tiers, bool* compiled,
                            std::unique_ptr<PersistentStore::KeyLock> lock = nullptr,
                            std::shared_ptr<RemoteCache::Lease> lease = nullptr) {
  CachedKernel result;
  ObjectCode object;
  try {
    const Target& target = deviceTarget();
    object = target.compile(mlir, fusion::kernelEntryName(key));
    result = loaded(target.link(object.bytes, object.entry));
    t.compiles.fetch_add(1, std::memory_order_relaxed);
    *compiled = true;
  } catch (const CompileError& error) {
    result.failure = error.what();
    t.failures.fetch_add(1, std::memory_order_relaxed);
    if (tiers.store != nullptr)
      storeCall("recording a failure", false, [&] {
        tiers.store->recordFailure(tiers.key, result.failure);
        return true;
      });
    return result;
  } catch (const EnvironmentError& error) {
    failHere(t, result, error.what());
    return result;
  } catch (const std::bad_alloc&) {
    failHere(t, result, "[cache] out of memory while compiling the kernel");
    return result;
  }
  if (tiers.store || tiers.remote)
    storeCompiled(tiers, wanted, object, std::move(lock), std::move(lease));
  return result;
}

// Links a verified entry of the remote tier and hands it to the node's store (with `lock`, the
// key's compile lock, when it is held: taken only on success); null when it does not verify.
// `start`: when the fetch began, for the remote load time (null: not a plain fetch).
std::shared_ptr<LoadedCode> adoptRemote(Table& t, const Tiers& tiers,
                                        const LoadRequirements& wanted, std::vector<char>& bytes,
                                        std::unique_ptr<PersistentStore::KeyLock>& lock,
                                        const std::chrono::steady_clock::time_point* start) {
  RemoteCache& remote = *tiers.remote;
  const std::string& key = tiers.key;
  std::shared_ptr<LoadedCode> code = verifyAndLink(
      key, bytes, &wanted, [&remote, &key](const std::string& why) { remote.reject(key, why); });
  if (!code) return nullptr;
  if (tiers.store)
    storeCall("writing", false, [&] {
      tiers.store->putLater(key, std::move(bytes), std::move(lock), tiers.same_key);
      return true;
    });
  t.remote_hits.fetch_add(1);
  if (start) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - *start)
            .count();
    std::lock_guard<std::mutex> guard(t.latencies_mutex);
    t.remote_load_ms.push_back(ms);
  }
  return code;
}

// A memory miss with a store or a remote tier: prefetched code, the node's stored entry, the
// remote tier's, else a compile (single-flight across the node's processes through the store's
// key lock, across the cluster through the remote tier's lease).
CachedKernel resolveInTiers(Table& t, const Tiers& tiers, Hash64 key, const std::string& mlir,
                            const LoadRequirements& wanted, bool* compiled) {
  PersistentStore* store = tiers.store;
  bool rejected = false;
  if (store) {
    if (auto code = takePrefetched(t, *store, tiers.key, wanted, &rejected)) return loaded(code);
    if (!rejected) {
      if (auto code = loadFromStore(t, *store, tiers.key, wanted, &rejected)) return loaded(code);
    }
    if (!retryFailedCompiles()) {
      if (std::optional<std::string> reason = storeCall(
              "reading", std::optional<std::string>(), [&] { return store->failure(tiers.key); })) {
        CachedKernel result;
        result.failure = "remembered from an earlier run: " + *reason;
        return result;
      }
    }
  }
  std::unique_ptr<PersistentStore::KeyLock> lock;
  bool remote_rejected = false;
  if (tiers.remote) {
    const auto start = std::chrono::steady_clock::now();
    RemoteRead read = RemoteRead::kAbsent;
    if (std::optional<std::vector<char>> bytes = tiers.remote->fetch(tiers.key, &read)) {
      if (auto code = adoptRemote(t, tiers, wanted, *bytes, lock, &start)) return loaded(code);
      read = RemoteRead::kRejected;
    }
    remote_rejected = read == RemoteRead::kRejected;
  }
  if (store) {
    lock = storeCall("locking", std::unique_ptr<PersistentStore::KeyLock>(),
                     [&] { return store->lockKey(tiers.key, std::chrono::seconds(120)); });
    // Another process may have stored it while this one waited (not worth a second look when
    // the entry there was damaged: this process overwrites it).
    if (!rejected) {
      if (auto code = loadFromStore(t, *store, tiers.key, wanted)) return loaded(code);
    }
  }
  std::shared_ptr<RemoteCache::Lease> lease;
  if (tiers.remote) {
    RemoteCache::Claim claim = tiers.remote->claim(tiers.key, /*recheck=*/!remote_rejected);
    if (claim.entry)
      if (auto code = adoptRemote(t, tiers, wanted, *claim.entry, lock, nullptr))
        return loaded(code);
    lease = std::move(claim.lease);
  }
  return compileAndLoad(t, key, mlir, wanted, tiers, compiled, std::move(lock), std::move(lease));
}

// A memory miss: the persistent store, else a compile. When it compiled, the whole time the
// calling thread spent here (building the MLIR, store lookups, waiting for another process's
// compile of the key, compiling, linking, handing the entry to the writer) is the compile's
// latency in the statistics: what a first use costs the program.
CachedKernel resolve(Table& t, Hash64 key, const std::function<std::string()>& build_mlir) {
  const auto start = std::chrono::steady_clock::now();
  bool compiled = false;
  CachedKernel result;
  const std::string mlir = build_mlir();
  const LoadRequirements wanted = requirementsFor(key, mlir);
  Tiers tiers;
  tiers.store = PersistentStore::fromEnvironment();
  tiers.remote = RemoteCache::fromEnvironment();
  if (tiers.store == nullptr && tiers.remote == nullptr) {
    result = compileAndLoad(t, key, mlir, wanted, tiers, &compiled);
  } else {
    tiers.key = storeKeyFor(wanted);
    tiers.same_key = tiers.store && tiers.remote && tiers.store->keyId() == tiers.remote->keyId();
    result = resolveInTiers(t, tiers, key, mlir, wanted, &compiled);
    if (result.code && tiers.store) rememberFirstUse(t, tiers.key);
  }
  if (compiled) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    t.compile_us.fetch_add(static_cast<int64_t>(ms * 1000));
    std::lock_guard<std::mutex> lock(t.latencies_mutex);
    t.latencies_ms.push_back(ms);
  }
  return result;
}

Table* table_instance = nullptr; // never destroyed: kernels stay callable at exit

void prepareFork() {
  Table& t = *table_instance;
  t.mutex.lock();
  t.prefetch_mutex.lock();
  t.first_use_mutex.lock();
  t.latencies_mutex.lock();
}

void releaseAfterFork() {
  Table& t = *table_instance;
  t.latencies_mutex.unlock();
  t.first_use_mutex.unlock();
  t.prefetch_mutex.unlock();
  t.mutex.unlock();
}

// In the child: the threads resolving pending entries and prefetches stayed in the parent.
void resetInChild() {
  Table& t = *table_instance;
  for (auto it = t.entries.begin(); it != t.entries.end();)
    it = it->second->ready ? std::next(it) : t.entries.erase(it);
  for (auto it = t.prefetched.begin(); it != t.prefetched.end();)
    it = it->second->done ? std::next(it) : t.prefetched.erase(it);
  // The old ones may count waiters that do not exist here: a broadcast could wait for them, and
  // unlocking the rwlock could hand it to a writer that never comes. Made afresh, unlocked.
  new (&t.compiled) std::condition_variable_any();
  new (&t.prefetch_done) std::condition_variable();
  t.latencies_mutex.unlock();
  t.first_use_mutex.unlock();
  t.prefetch_mutex.unlock();
  new (&t.mutex) std::shared_mutex();
}

Table& table() {
  static std::once_flag made; // std::call_once is pthread_once: a child may redo it
  std::call_once(made, [] {
    registerForkHandlers(ForkRank::kKernelCacheTable, {[] {
                                                         if (table_instance) prepareFork();
                                                       },
                                                       [] {
                                                         if (table_instance) releaseAfterFork();
                                                       },
                                                       [] {
                                                         if (table_instance) resetInChild();
                                                       }});
    table_instance = new Table();
  });
  return *table_instance;
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

} // namespace

int64_t memoryTierCapacity() { return cacheSettings().cache_memory_max_bytes; }

KernelHandle kernelFor(Hash64 key, const std::function<std::string()>& build_mlir) {
  flushCacheWarnings(); // those queued by threads that cannot warn (the warm start)
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
    if (!inserted) { // another thread compiles it, or just did
      std::shared_ptr<Entry> pending = it->second;
      t.compiled.wait(write, [&] { return pending->ready; });
      if (pending->error) std::rethrow_exception(pending->error);
      t.hits.fetch_add(1, std::memory_order_relaxed);
      return pending->kernel;
    }
    it->second = std::make_shared<Entry>();
    entry = it->second;
  }
  t.misses.fetch_add(1, std::memory_order_relaxed);
  CachedKernel result;
  std::exception_ptr internal;
  try {
    result = resolve(t, key, build_mlir);
  } catch (const CompileError& error) {
    result.failure = error.what();
    t.failures.fetch_add(1, std::memory_order_relaxed);
  } catch (const EnvironmentError& error) {
    failHere(t, result, error.what());
  } catch (const std::bad_alloc&) {
    failHere(t, result, "[cache] out of memory while resolving the kernel");
  } catch (...) { // an internal error (TORCH_INTERNAL_ASSERT, a bug): the caller's error
    internal = std::current_exception();
  }
  if (internal) {
    {
      std::unique_lock<std::shared_mutex> write(t.mutex);
      entry->error = internal;
      entry->ready = true;
      if (auto it = t.entries.find(key); it != t.entries.end() && it->second == entry)
        t.entries.erase(it); // not remembered: the next call tries again
    }
    t.compiled.notify_all();
    std::rethrow_exception(internal);
  }
  KernelHandle handle = std::make_shared<const CachedKernel>(std::move(result));
  const int64_t capacity = memoryTierCapacity();
  const int64_t bytes = footprint(*handle);
  if (handle->code && bytes > capacity)
    warnCacheOnce("memory-cap", "NEURON_CACHE_MEMORY_MAX_BYTES=" + std::to_string(capacity) +
                                    " bytes cannot hold one kernel (this one has " +
                                    std::to_string(bytes) +
                                    " bytes of object code): the memory tier keeps only the "
                                    "kernel used last, the others are reloaded or recompiled");
  {
    std::unique_lock<std::shared_mutex> write(t.mutex);
    entry->kernel = handle;
    entry->bytes = bytes;
    entry->last_use.store(t.clock.fetch_add(1, std::memory_order_relaxed));
    entry->ready = true;
    t.memory_bytes += entry->bytes;
    evictOverCapacity(t, entry.get(), capacity);
  }
  t.compiled.notify_all();
  return handle;
}

KernelHandle loadedKernel(Hash64 key) {
  flushCacheWarnings();
  Table& t = table();
  std::shared_lock<std::shared_mutex> read(t.mutex);
  auto it = t.entries.find(key);
  if (it == t.entries.end() || !it->second->ready) return nullptr;
  t.hits.fetch_add(1, std::memory_order_relaxed);
  it->second->last_use.store(t.clock.fetch_add(1, std::memory_order_relaxed),
                             std::memory_order_relaxed);
  return it->second->kernel;
}

KernelHandle storedKernelIfLoadable(Hash64 key, const std::string& mlir) {
  try {
    if (!storedKernelLoadable(persistentKeyFor(key, mlir))) return nullptr;
    KernelHandle kernel = kernelFor(key, [&] { return mlir; });
    return kernel->function != nullptr ? kernel : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::vector<std::string> storedKernelsInFirstUseOrder() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.first_use_mutex);
  return t.first_use_keys;
}

bool prefetchStoredKernel(const std::string& store_key) {
  PersistentStore* store = PersistentStore::fromEnvironment();
  if (store == nullptr) return false;
  Table& t = table();
  const int64_t capacity = memoryTierCapacity();
  {
    std::lock_guard<std::mutex> lock(t.first_use_mutex);
    if (t.first_use_seen.count(store_key)) return false; // the program got there first
  }
  auto slot = std::make_shared<Prefetched>();
  {
    std::lock_guard<std::mutex> lock(t.prefetch_mutex);
    if (t.prefetched_bytes >= capacity || !t.prefetched.try_emplace(store_key, slot).second)
      return false;
  }
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<LoadedCode> code;
  std::string key_material;
  StoreRead read = StoreRead::kAbsent;
  bool rejected = false;
  if (std::optional<std::vector<char>> bytes =
          storeCall("reading", std::optional<std::vector<char>>(),
                    [&] { return store->get(store_key, &read); })) {
    code = verifyAndLink(store_key, *bytes, nullptr, rejectStored(t, *store, store_key),
                         &key_material);
    rejected = code == nullptr;
  } else if (read == StoreRead::kRejected) {
    t.persistent_rejected.fetch_add(1);
    rejected = true;
  }
  {
    std::lock_guard<std::mutex> lock(t.prefetch_mutex);
    slot->done = true;
    slot->rejected = rejected;
    slot->code = code;
    slot->key_material = std::move(key_material);
    if (code) t.prefetched_bytes += static_cast<int64_t>(code->bytes());
  }
  t.prefetch_done.notify_all();
  if (!code) return false;
  t.prefetch_count.fetch_add(1);
  recordLoadTime(t, start);
  return true;
}

bool storedKernelLoadable(const std::string& store_key) {
  Table& t = table();
  {
    std::unique_lock<std::mutex> lock(t.prefetch_mutex);
    auto it = t.prefetched.find(store_key);
    if (it != t.prefetched.end()) { // the warm start got there first: wait for its load
      std::shared_ptr<Prefetched> slot = it->second;
      t.prefetch_done.wait(lock, [&] { return slot->done; });
      return slot->code != nullptr;
    }
  }
  return prefetchStoredKernel(store_key);
}

std::string persistentKeyFor(Hash64 key, const std::string& mlir) {
  return storeKeyFor(requirementsFor(key, mlir));
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
    std::vector<double> remote_loads = t.remote_load_ms;
    std::sort(remote_loads.begin(), remote_loads.end());
    if (!remote_loads.empty()) stats.remote_load_ms_median = remote_loads[remote_loads.size() / 2];
  }
  stats.persistent_hits = t.persistent_hits.load();
  stats.persistent_rejected = t.persistent_rejected.load();
  stats.remote_hits = t.remote_hits.load();
  stats.prefetched = t.prefetch_count.load();
  stats.memory_evictions = t.evictions.load();
  if (PersistentStore* store = PersistentStore::fromEnvironment()) {
    const StoreWriterStats writer = store->writerStats();
    stats.persistent_writes = writer.writes;
    stats.persistent_write_batches = writer.batches;
    stats.persistent_writes_pending = writer.pending;
  }
  std::shared_lock<std::shared_mutex> read(t.mutex);
  stats.entries = static_cast<int64_t>(t.entries.size());
  stats.memory_bytes = t.memory_bytes;
  return stats;
}

void flushPersistentWrites() {
  if (PersistentStore* store = PersistentStore::fromEnvironment()) store->flushWrites();
  if (RemoteCache* remote = RemoteCache::fromEnvironment()) remote->flushPublishes();
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
  t.remote_hits = 0;
  t.prefetch_count = 0;
  t.evictions = 0;
  std::lock_guard<std::mutex> lock(t.latencies_mutex);
  t.latencies_ms.clear();
  t.load_ms.clear();
  t.remote_load_ms.clear();
  if (RemoteCache* remote = RemoteCache::fromEnvironment()) remote->resetCounters();
}

} // namespace torchneuron

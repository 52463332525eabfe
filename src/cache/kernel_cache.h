#pragma once
// The in-memory kernel cache: kernel key -> loaded kernel, a least-recently-used tier capped at
// NEURON_CACHE_MEMORY_MAX_BYTES of object code (default 256 MiB; a cap below one kernel warns).
// A miss compiles once (concurrent callers of the same key wait for that compile). Failures
// (support/errors.h): a compile failure (MLIR/LLVM rejected the module) is remembered with its
// reason, in memory and in the persistent store, so the signature falls back without retrying;
// an environment failure (link error, out of memory, no address space) falls back for the rest
// of this process but is never persisted; an internal error propagates to the caller and is
// not remembered. Faults of the persistent store are misses (one warning per kind). Fork-safe:
// a forked child finds the kernels the parent had loaded and compiles the rest itself.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/kernel_abi.h"
#include "launcher/object_loader.h"
#include "support/hash.h"

namespace torchneuron {

struct CachedKernel {
  KernelFunction function = nullptr; // null when the compile failed
  std::string failure;               // why it failed ("" on success)
  bool environmental = false;        // an environment failure: retried by the next process
  std::shared_ptr<LoadedCode> code;  // keeps `function` mapped
};

// Hold it while calling the kernel: an evicted kernel is unlinked when its last holder lets go.
using KernelHandle = std::shared_ptr<const CachedKernel>;

struct KernelCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t compiles = 0;
  int64_t compile_failures = 0;
  // Per compile: all the dispatching thread waited for (MLIR, store lookups, lock waits,
  // compile, link); summed, median and max.
  double compile_ms_total = 0;
  double compile_ms_median = 0; // of the compiles since the last reset
  double compile_ms_max = 0;
  int64_t entries = 0;
  int64_t memory_bytes = 0;             // object code held by the memory tier
  int64_t memory_evictions = 0;         // kernels the memory tier dropped to stay under its cap
  int64_t persistent_hits = 0;          // kernels loaded from the on-disk cache, no compile
  int64_t persistent_rejected = 0;      // on-disk entries that failed verification (then compiled)
  double persistent_load_ms_median = 0; // store read + verification + ORC link
  int64_t prefetched = 0;        // loaded ahead of need by prefetchStoredKernel(), used or not
  int64_t persistent_writes = 0; // entries and last-use refreshes written to the store
  int64_t persistent_write_batches = 0;  // the synced writes that carried them
  int64_t persistent_writes_pending = 0; // handed to the background writer, not yet durable
  int64_t remote_hits = 0; // kernels loaded from the remote tier (remote_cache.h), no compile
  double remote_load_ms_median = 0; // remote fetch + verification + ORC link
};

// Returns the kernel for `key`. Tiers: the process's loaded kernels (LRU, capped), then the
// persistent store (NEURON_CACHE_DIR; see persistent_store.h), then the cluster's remote tier
// (NEURON_CACHE_REMOTE; remote_cache.h), whose hits are written to the store, then a compile of
// `build_mlir()`'s module, which exports `fusion::kernelEntryName(key)` and is written to the
// store and published to the remote tier. Compiles of one key are single-flight within the
// process, through the store across the node's processes, and through the remote tier's lease
// across the cluster. A
// failed compile is remembered in both places (NEURON_CACHE_RETRY_FAILED=1 retries it). Never null;
// throws what an internal error threw (to every caller waiting for that key). Delivers the
// cache warnings queued by threads that cannot warn (cache_warnings.h) first.
KernelHandle kernelFor(Hash64 key, const std::function<std::string()>& build_mlir);

// The kernel `key` when the memory tier holds it (compiled, loaded or failed), counted as a hit;
// otherwise null, without compiling, loading or waiting for a compile in flight. Delivers the
// queued cache warnings as kernelFor() does.
KernelHandle loadedKernel(Hash64 key);

// The kernel `key` compiled from `mlir` when the persistent store holds it verified
// (storedKernelLoadable()): read, verified and linked here, a few milliseconds and no compile.
// Null when it is not stored, when the store cannot be read (a compile then reports what is
// wrong) or when the stored entry records a failure.
KernelHandle storedKernelIfLoadable(Hash64 key, const std::string& mlir);

// The persistent store's key for the kernel `key` compiled from `mlir` (tests and tools).
std::string persistentKeyFor(Hash64 key, const std::string& mlir);

// Warm start (device/warm_start.h). The persistent-store keys of the kernels this process has
// loaded or compiled, in first-use order (empty when there is no store).
std::vector<std::string> storedKernelsInFirstUseOrder();
// Reads, verifies and links the stored entry `store_key` ahead of need, for the first
// kernelFor() whose store key it is: that call then compares the key material in full and
// takes the code without touching the store (a persistent hit). Verified as any load is
// (checksum, versions, target, CPU features, the entry filed under its own key) before its
// code is mapped. False when there is no store, the entry is absent, damaged or foreign
// (counted and warned like any load), or the prefetched code would exceed the memory tier's cap.
bool prefetchStoredKernel(const std::string& store_key);

// Whether the first kernelFor() whose store key is `store_key` will take verified, linked code
// without compiling: prefetchStoredKernel(), or a prefetch already made (the warm start's; waits
// for one in flight). For a caller that must not compile on its thread (fused kernels).
bool storedKernelLoadable(const std::string& store_key);

KernelCacheStats kernelCacheStats();
// Returns once every compiled kernel handed to the persistent store's background writer is
// durable, and every one handed to the remote tier's publisher is published or has failed
// (torchneuron.synchronize(), and at exit).
void flushPersistentWrites();
// Hits, misses, compiles, failures, times, and the remote tier's counters; keeps entries.
void resetKernelCacheCounters();

// The memory tier's cap in bytes of object code: NEURON_CACHE_MEMORY_MAX_BYTES
// (support/settings.h; an unparsable value warns through the cache's warnings and keeps the
// default).
int64_t memoryTierCapacity();

} // namespace torchneuron

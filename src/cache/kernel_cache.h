#pragma once
// The in-memory kernel cache: kernel key -> loaded kernel. A miss compiles once (concurrent
// callers of the same key wait for that compile); a failed compile is remembered with its
// reason, so the signature falls back without retrying.

#include <cstdint>
#include <functional>
#include <string>

#include "launcher/kernel_abi.h"
#include "support/hash.h"

namespace torchneuron {

struct CachedKernel {
  KernelFunction function = nullptr;  // null when the compile failed
  std::string failure;                // why it failed ("" on success)
};

struct KernelCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t compiles = 0;
  int64_t compile_failures = 0;
  double compile_ms_total = 0;   // MLIR to loaded kernel, summed over compiles
  double compile_ms_median = 0;  // of the compiles since the last reset
  double compile_ms_max = 0;
  int64_t entries = 0;
};

// Returns the kernel for `key`; on a miss calls `build_mlir` and compiles its module, exporting
// the entry point `fusion::kernelEntryName(key)`. The reference stays valid for the process.
const CachedKernel& kernelFor(Hash64 key, const std::function<std::string()>& build_mlir);

KernelCacheStats kernelCacheStats();
void resetKernelCacheCounters();  // hits, misses, compiles, failures and time; keeps entries

}  // namespace torchneuron

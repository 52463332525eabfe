#pragma once
// The fused kernels of hot windows (DESIGN.md decisions 5 and 11). A window's fused kernel is
// compiled on one background thread while the window keeps running its recorded launches one
// by one; the first batch after the compile finished runs fused. With NEURON_ADAPTIVE_SYNC=1 a
// batch waits for its compiles instead (tests, reproducible timing). Kernels go through the
// kernel cache (cache/kernel_cache.h) like eager ones, so they are stored in the persistent
// cache under their key and a later process loads them instead of compiling.
//
// A compile that fails is remembered for the process: its windows keep their unfused launches,
// with one warning per kernel. Nothing the thread throws reaches std::terminate.
//
// Locking: one mutex (ForkRank::kFusedCompiles), a leaf held only to read or change the table
// and queue; compiles run outside it. Held across fork(): a child finds the kernels that were
// ready and compiles the rest itself (queued compiles of the parent are requeued on demand).

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/fused_kernel.h"

namespace torchneuron::tracer {

// The fused kernel of `signature` (whose key is `key`) when it is compiled; otherwise null, and
// its compile is queued (once). `wait`: compile it now on this thread instead.
KernelHandle fusedKernel(const fusion::FusedElementwiseSignature& signature, Hash64 key, bool wait);

// Where the compile of the fused kernel `key` stands in this process.
enum class FusedKernelState : uint8_t { kUnknown, kCompiling, kReady, kFailed };
FusedKernelState fusedKernelState(Hash64 key);

// Waits until no fused compile is queued or running (synchronize(), tests).
void waitForFusedCompiles();

struct FusedKernelStats {
  int64_t compiles = 0; // fused kernels compiled or loaded (the cache says which)
  int64_t failures = 0; // fused kernels that did not compile (remembered)
  int64_t queued = 0;   // waiting or compiling now
};
FusedKernelStats fusedKernelStats();

// Warnings the background thread could not raise (it has no Python frame), delivered by the
// next traced call on a Python thread.
std::vector<std::string> takeFusedCompileWarnings();
namespace detail {
extern std::atomic<bool> warnings_pending;
}
inline bool fusedCompileWarningsPending() {
  return detail::warnings_pending.load(std::memory_order_relaxed);
}

} // namespace torchneuron::tracer

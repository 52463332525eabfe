#pragma once
// fork() in a threaded process (DataLoader workers fork): a child starts with one thread, and
// every mutex another thread held at the fork stays locked there forever. So each lock a thread
// can hold across fork() is registered here: the forking thread takes them all before fork()
// (prepare) and releases them after it, in the parent and in the child. State a child cannot
// use as inherited (condition variables with waiters that do not exist there, single-flight
// slots owned by threads that do not exist there) is re-created by the child handler.
//
// Locking: prepare handlers run in ascending ForkRank, parent and child handlers in descending
// ForkRank. A lock of a lower rank may be held while taking one of a higher rank, never the
// reverse; two locks of one rank are never held together. Every registered lock obeys this
// order in normal operation too, so the prepare step cannot deadlock with a thread that holds
// one of them (it only waits for that thread to finish its critical section: at worst one
// compile). Registering is allowed while holding any registered lock: the registry's own lock
// ranks above them all and is never held while a handler waits. The caching allocator's lock is the
// leaf below all of these: it registers its own pthread_atfork handler when the device library
// loads, before anything registers here (all registration is lazy), so its prepare handler runs
// after these.

#include <atomic>
#include <mutex>

namespace torchneuron {

enum class ForkRank : int {
  kTracerWindow = 5,        // tracer/tracer.cpp: the op window (held while a traced op compiles)
  kWarmStartItem = 10,      // device/warm_start.cpp: the kernel or block the thread works on
  kFusedCompiles = 15,      // tracer/fused_kernels.cpp: the fused kernels' states and queue
  kSignatureIntern = 16,    // fusion/kernel_signature.cpp: the interned signatures
  kBackgroundCompiles = 18, // cache/background_compiles.cpp: the eager kernels queued to compile
  kKernelCacheTable = 20,   // cache/kernel_cache.cpp: the memory tier, single-flight, prefetches
  kStoreLocks = 30,         // cache/persistent_store.cpp: descriptors of held flock() locks
  kStoreWriter = 35,        // cache/store_writer.cpp: the writers and their queues
  kCompiler = 40,           // fusion/compiler.cpp: the MLIR context and target machine
  kLinker = 50,             // launcher/object_loader.cpp: the ORC JIT
  kLaunchArenas = 60,       // launcher/parallel_launch.cpp: the TBB arena table
  kMetrics = 70,            // device/metrics.cpp: the launch counter table
  kWarnOnce = 80,           // warn-once sets (fallbacks, compile failures)
  kRemoteCache = 85,        // cache/remote_cache.cpp: the remote tiers, then each one's backend
  kCacheWarnings = 90,      // cache/cache_warnings.cpp: warned kinds and the warning queue
  kWarmStartStats = 95,     // device/warm_start.cpp: the warm start's statistics
  kBlasThreads = 96,        // device/direct_gemm.cpp: OpenBLAS's thread count while products split
  kUnbackedRange = 97,      // tracer/unbacked_results.cpp: the reserved range's bump pointer
  kCpuGenerator = 98,       // device/torch_fork_safety.cpp: PyTorch's default CPU generator
  kLentBlocks = 99,         // device/host_kernel_allocator.cpp: device blocks lent to CPU buffers
};

struct ForkHandlers {
  void (*prepare)() = nullptr; // takes the lock (waits for its holder)
  void (*parent)() = nullptr;  // releases it
  void (*child)() = nullptr;   // releases it, or re-creates the state
};

// Registers one lock's handlers (thread-safe; at most 64 registrations per process). Call it
// before the lock is first used, never from a static initializer.
void registerForkHandlers(ForkRank rank, ForkHandlers handlers);

// Holds the mutex `kMutex` (an object of static storage) across fork() at `rank`: for a lock
// with no state to re-create in the child. Registers at its first call; after that it costs one
// atomic load (std::call_once alone would cost two thread-local writes and a pthread_once call
// each time, on paths that run per op). Call it before each first use of the mutex on a path.
template <std::mutex& kMutex> void holdAcrossFork(ForkRank rank) {
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return;
  static std::once_flag registered;
  std::call_once(registered, [rank] {
    registerForkHandlers(rank,
                         {[] { kMutex.lock(); }, [] { kMutex.unlock(); }, [] { kMutex.unlock(); }});
  });
  done.store(true, std::memory_order_release);
}

// True in a process forked from the one that registered handlers here.
bool inForkedChild();

} // namespace torchneuron

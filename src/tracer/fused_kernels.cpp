#include "tracer/fused_kernels.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>

#include "cache/cache_warnings.h"
#include "fusion/kernel_signature.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron::tracer {
namespace detail {
std::atomic<bool> warnings_pending{false};
} // namespace detail
namespace {

enum class State : uint8_t { kQueued, kReady, kFailed };

struct Entry {
  State state = State::kQueued;
  KernelHandle kernel;
  fusion::FusedElementwiseSignature signature; // kept while queued
};

struct Compiles {
  std::mutex mutex;
  std::condition_variable changed; // a compile finished or was queued
  std::unordered_map<Hash64, Entry> entries;
  std::deque<Hash64> queue;
  int64_t running = 0;
  FusedKernelStats stats;
  std::vector<std::string> warnings;
  std::thread* worker = nullptr; // leaked in a forked child, where the thread does not exist
  pid_t owner = 0;
  bool stopping = false;
};

// Made at first use, never destroyed (the worker may outlive static destruction's start).
Compiles& compiles() {
  static MadeOnce<Compiles> instance; // fork-safe (made_once.h): the making registers
  return instance.get([] {
    auto* c = new Compiles();
    registerForkHandlers(ForkRank::kFusedCompiles,
                         {[] { compiles().mutex.lock(); }, [] { compiles().mutex.unlock(); },
                          [] {
                            Compiles& child = compiles();
                            new (&child.mutex) std::mutex();
                            new (&child.changed) std::condition_variable();
                            child.worker = nullptr;
                            child.running = 0;
                            child.queue.clear();
                            // Queued in the parent: requeued by the child's next batch.
                            for (auto it = child.entries.begin(); it != child.entries.end();)
                              it = it->second.state == State::kQueued ? child.entries.erase(it)
                                                                      : std::next(it);
                            child.stats.queued = 0;
                          }});
    return c;
  });
}

// Compiles one kernel; the result as the entry's new state.
void compileInto(Hash64 key, const fusion::FusedElementwiseSignature& signature, Entry& entry,
                 std::string& warning) {
  try {
    KernelHandle kernel =
        kernelFor(key, [&] { return fusion::buildFusedElementwiseKernel(signature); });
    if (kernel->function != nullptr) {
      entry.kernel = std::move(kernel);
      entry.state = State::kReady;
      return;
    }
    warning = "[adaptive] the fused kernel " + signature.describe() +
              " did not compile; its window keeps running op by op: " + kernel->failure;
  } catch (const std::exception& error) {
    warning = "[adaptive] compiling the fused kernel " + signature.describe() +
              " failed; its window keeps running op by op: " + error.what();
  }
  entry.state = State::kFailed;
}

// The kernel when an earlier run stored it (persistent cache): loaded here, a few milliseconds
// and no compile, so a rerun runs its hot windows fused from their first hot occurrence.
KernelHandle storedKernel(const fusion::FusedElementwiseSignature& signature, Hash64 key) {
  try {
    return storedKernelIfLoadable(key, fusion::buildFusedElementwiseKernel(signature));
  } catch (const std::exception&) {
    return nullptr;
  }
}

// Records a finished compile of `key` and wakes its waiters. The caller holds `c.mutex`.
void finishCompile(Compiles& c, Hash64 key, Entry result, std::string warning) {
  Entry& entry = c.entries[key];
  entry.state = result.state;
  entry.kernel = std::move(result.kernel);
  entry.signature = fusion::FusedElementwiseSignature();
  if (entry.state == State::kReady)
    ++c.stats.compiles;
  else
    ++c.stats.failures;
  if (!warning.empty()) {
    c.warnings.push_back(std::move(warning));
    detail::warnings_pending.store(true, std::memory_order_relaxed);
  }
  c.changed.notify_all();
}

void joinAtExit() {
  Compiles& c = compiles();
  std::thread* worker;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.owner != getpid()) return;
    c.stopping = true;
    c.queue.clear();
    worker = c.worker;
    c.worker = nullptr;
  }
  c.changed.notify_all();
  if (worker != nullptr && worker->joinable()) worker->join();
}

void work() {
  QueueCacheWarningsHere queued; // the kernel cache's warnings wait for a Python thread
  Compiles& c = compiles();
  std::unique_lock<std::mutex> lock(c.mutex);
  while (true) {
    c.changed.wait(lock, [&] { return c.stopping || !c.queue.empty(); });
    if (c.stopping) return;
    const Hash64 key = c.queue.front();
    c.queue.pop_front();
    auto found = c.entries.find(key);
    if (found == c.entries.end()) continue;
    const fusion::FusedElementwiseSignature signature = found->second.signature;
    ++c.running;
    lock.unlock();
    Entry result;
    std::string warning;
    compileInto(key, signature, result, warning);
    lock.lock();
    --c.running;
    --c.stats.queued;
    finishCompile(c, key, std::move(result), std::move(warning));
  }
}

} // namespace

KernelHandle fusedKernel(const fusion::FusedElementwiseSignature& signature, Hash64 key,
                         bool wait) {
  Compiles& c = compiles();
  std::unique_lock<std::mutex> lock(c.mutex);
  auto found = c.entries.find(key);
  if (found != c.entries.end()) {
    if (found->second.state == State::kReady) return found->second.kernel;
    if (found->second.state == State::kFailed || !wait) return nullptr;
    c.changed.wait(lock, [&] { return c.entries[key].state != State::kQueued; });
    return c.entries[key].kernel;
  }
  if (wait) {
    c.entries[key]; // queued: other callers wait for this compile
    lock.unlock();
    Entry result;
    std::string warning;
    compileInto(key, signature, result, warning);
    lock.lock();
    KernelHandle kernel = result.kernel;
    finishCompile(c, key, std::move(result), std::move(warning));
    return kernel;
  }
  // Compiling: callers that wait, wait for it; the others run the group as recorded.
  c.entries[key];
  lock.unlock();
  if (KernelHandle stored = storedKernel(signature, key)) {
    lock.lock();
    Entry& done = c.entries[key];
    done.state = State::kReady;
    done.kernel = stored;
    ++c.stats.compiles;
    c.changed.notify_all();
    return stored;
  }
  lock.lock();
  Entry& entry = c.entries[key];
  entry.signature = signature;
  c.queue.push_back(key);
  ++c.stats.queued;
  if (c.worker == nullptr && !c.stopping) {
    const bool first = c.owner == 0;
    c.owner = getpid();
    c.worker = new std::thread(work);
    // Joined before the static destructors of what the compile uses (the kernel cache, the
    // store), which were constructed before this handler was registered.
    if (first) std::atexit(joinAtExit);
  }
  c.changed.notify_all();
  return nullptr;
}

FusedKernelState fusedKernelState(Hash64 key) {
  Compiles& c = compiles();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto found = c.entries.find(key);
  if (found == c.entries.end()) return FusedKernelState::kUnknown;
  switch (found->second.state) {
  case State::kQueued:
    return FusedKernelState::kCompiling;
  case State::kReady:
    return FusedKernelState::kReady;
  case State::kFailed:
    break;
  }
  return FusedKernelState::kFailed;
}

void waitForFusedCompiles() {
  Compiles& c = compiles();
  std::unique_lock<std::mutex> lock(c.mutex);
  c.changed.wait(lock, [&] { return c.stopping || (c.queue.empty() && c.running == 0); });
}

FusedKernelStats fusedKernelStats() {
  Compiles& c = compiles();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

std::vector<std::string> takeFusedCompileWarnings() {
  Compiles& c = compiles();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::vector<std::string> warnings;
  warnings.swap(c.warnings);
  detail::warnings_pending.store(false, std::memory_order_relaxed);
  return warnings;
}

} // namespace torchneuron::tracer

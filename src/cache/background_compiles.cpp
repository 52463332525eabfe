#include "cache/background_compiles.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "cache/cache_warnings.h"
#include "cache/kernel_cache.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron {
namespace {

struct Queue {
  std::mutex mutex;
  std::condition_variable changed; // a compile was queued or finished
  std::deque<Hash64> order;
  std::unordered_map<Hash64, std::string> pending; // queued or compiling: key -> MLIR
  std::unordered_set<Hash64> threw;
  BackgroundCompileStats stats;
  std::thread* worker = nullptr; // leaked in a forked child, where the thread does not exist
  pid_t owner = 0;
  bool stopping = false;
};

// Made at first use, never destroyed (the worker may outlive static destruction's start).
Queue& queue() {
  static MadeOnce<Queue> instance; // fork-safe (made_once.h): the making registers
  return instance.get([] {
    auto* q = new Queue();
    registerForkHandlers(ForkRank::kBackgroundCompiles,
                         {[] { queue().mutex.lock(); }, [] { queue().mutex.unlock(); },
                          [] {
                            Queue& child = queue();
                            new (&child.mutex) std::mutex();
                            new (&child.changed) std::condition_variable();
                            child.worker = nullptr;
                            child.order.clear();
                            child.pending.clear();
                            child.stats.pending = 0;
                          }});
    return q;
  });
}

// The worker's thread is joined at exit before the static destructors of what a compile uses
// (the kernel cache, the store), which were constructed before this handler was registered. The
// queue is finished first by waitForBackgroundCompiles() (torchneuron's atexit); a program that
// never imported the Python package drops what is left.
void joinAtExit() {
  Queue& q = queue();
  std::thread* worker;
  {
    std::lock_guard<std::mutex> lock(q.mutex);
    if (q.owner != getpid()) return;
    q.stopping = true;
    q.order.clear();
    worker = q.worker;
    q.worker = nullptr;
  }
  q.changed.notify_all();
  if (worker != nullptr && worker->joinable()) worker->join();
}

void work() {
  QueueCacheWarningsHere queued; // the kernel cache's warnings wait for a Python thread
  Queue& q = queue();
  std::unique_lock<std::mutex> lock(q.mutex);
  while (true) {
    q.changed.wait(lock, [&] { return q.stopping || !q.order.empty(); });
    if (q.stopping) return;
    const Hash64 key = q.order.front();
    q.order.pop_front();
    auto found = q.pending.find(key);
    if (found == q.pending.end()) continue;
    const std::string mlir = found->second;
    lock.unlock();
    bool threw = false;
    try {
      kernelFor(key, [&] { return mlir; }); // compiled, loaded or failed: now in the memory tier
    } catch (...) {
      threw = true; // the dispatch thread's own compile reports it (header)
    }
    lock.lock();
    q.pending.erase(key);
    if (threw) q.threw.insert(key);
    --q.stats.pending;
    q.changed.notify_all();
  }
}

} // namespace

bool compileInBackground(Hash64 key, std::string mlir) {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  if (q.stopping) return false;
  if (q.worker == nullptr) {
    try {
      q.worker = new std::thread(work);
    } catch (const std::exception&) { // no thread (resource limits): the caller compiles
      return false;
    }
    const bool first = q.owner == 0;
    q.owner = getpid();
    if (first) std::atexit(joinAtExit);
  }
  if (!q.pending.try_emplace(key, std::move(mlir)).second) return true;
  q.order.push_back(key);
  ++q.stats.queued;
  ++q.stats.pending;
  q.changed.notify_all();
  return true;
}

bool compilingInBackground(Hash64 key) {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  return q.pending.count(key) > 0;
}

bool backgroundCompileThrew(Hash64 key) {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  return q.threw.count(key) > 0;
}

void waitForBackgroundCompiles() {
  Queue& q = queue();
  std::unique_lock<std::mutex> lock(q.mutex);
  q.changed.wait(lock, [&] { return q.stopping || q.pending.empty(); });
}

BackgroundCompileStats backgroundCompileStats() {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  return q.stats;
}

} // namespace torchneuron

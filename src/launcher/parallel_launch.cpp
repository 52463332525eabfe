#include "launcher/parallel_launch.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

std::atomic<bool> inline_only{false};

// One arena per thread count, never destroyed (a forked child must not tear down arenas whose
// workers exist only in its parent). Locking: `arenas_mutex` guards the table and is held
// across fork() (ForkRank::kLaunchArenas); arenas themselves are thread-safe.
std::mutex arenas_mutex;
tbb::task_arena* arenas[256] = {};

tbb::task_arena& arenaFor(int threads) {
  static std::once_flag fork_handlers;
  std::call_once(fork_handlers, [] {
    registerForkHandlers(ForkRank::kLaunchArenas,
                         {[] { arenas_mutex.lock(); }, [] { arenas_mutex.unlock(); },
                          [] {
                            runLaunchesInline();
                            arenas_mutex.unlock();
                          }});
  });
  const int slot = std::clamp(threads, 1, 255);
  std::lock_guard<std::mutex> lock(arenas_mutex);
  if (!arenas[slot]) arenas[slot] = new tbb::task_arena(slot);
  return *arenas[slot];
}

} // namespace

void runLaunchesInline() { inline_only.store(true); }

bool launchesRunInline() {
  if (inForkedChild()) runLaunchesInline(); // TBB's workers live in the parent only
  return inline_only.load();
}

void runOnLaunchThreads(int threads, const std::function<void()>& work) {
  arenaFor(threads).execute(work);
}

void launchKernel(KernelFunction kernel, const int64_t* slots, const LaunchShape& shape) {
  if (shape.range <= 0) return;
  const int64_t work = shape.range * std::max<int64_t>(shape.work_per_index, 1);
  if (shape.threads <= 1 || shape.range == 1 || work < kInlineWorkLimit || launchesRunInline()) {
    kernel(slots, 0, shape.range);
    return;
  }
  // Chunks of at least kInlineWorkLimit elements, about four per thread for balance.
  const int64_t per_index = std::max<int64_t>(shape.work_per_index, 1);
  const int64_t min_grain = std::max<int64_t>(1, kInlineWorkLimit / per_index);
  const int64_t balanced = shape.range / (4 * static_cast<int64_t>(shape.threads));
  const int64_t grain = std::max(min_grain, balanced);
  arenaFor(shape.threads).execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, shape.range, grain),
        [&](const tbb::blocked_range<int64_t>& chunk) {
          kernel(slots, chunk.begin(), chunk.end());
        },
        tbb::simple_partitioner());
  });
}

} // namespace torchneuron

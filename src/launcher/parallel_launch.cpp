#include "launcher/parallel_launch.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "support/fork_handlers.h"
#include "support/settings.h"

namespace torchneuron {
namespace {

std::atomic<bool> inline_only{false};

// One arena per thread count, never destroyed (a forked child must not tear down arenas whose
// workers exist only in its parent). Locking: `arenas_mutex` guards the table and is held
// across fork() (ForkRank::kLaunchArenas); arenas themselves are thread-safe.
std::mutex arenas_mutex;
tbb::task_arena* arenas[256] = {};

tbb::task_arena& arenaFor(int threads) {
  // Registered once; afterwards one atomic load (std::call_once alone costs thread-local writes
  // and a pthread_once call at every launch).
  static std::atomic<bool> registered{false};
  static std::once_flag fork_handlers;
  if (!registered.load(std::memory_order_acquire)) {
    std::call_once(fork_handlers, [] {
      registerForkHandlers(ForkRank::kLaunchArenas,
                           {[] { arenas_mutex.lock(); }, [] { arenas_mutex.unlock(); },
                            [] {
                              runLaunchesInline();
                              arenas_mutex.unlock();
                            }});
    });
    registered.store(true, std::memory_order_release);
  }
  const int slot = std::clamp(threads, 1, 255);
  std::lock_guard<std::mutex> lock(arenas_mutex);
  if (!arenas[slot]) arenas[slot] = new tbb::task_arena(slot);
  return *arenas[slot];
}

} // namespace

void runLaunchesInline() { inline_only.store(true); }

bool launchesRunInline() {
  // The pools' workers live in the parent only (and libgomp's team is not usable after fork).
  if (inForkedChild()) runLaunchesInline();
  return inline_only.load();
}

void runParts(int threads, int64_t parts, const std::function<void(int64_t)>& part) {
  if (settings().launch_pool == LaunchPool::kTbb) {
    arenaFor(threads).execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<int64_t>(0, parts, 1),
          [&](const tbb::blocked_range<int64_t>& chunk) {
            for (int64_t p = chunk.begin(); p < chunk.end(); ++p)
              part(p);
          },
          tbb::simple_partitioner());
    });
    return;
  }
  if (omp_in_parallel()) { // a launch from inside a parallel region gets no team of its own
    for (int64_t p = 0; p < parts; ++p)
      part(p);
    return;
  }
  // Parts are claimed one at a time: a thread the busy machine has not scheduled yet holds
  // nothing up.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t p = 0; p < parts; ++p)
    part(p);
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
  const int64_t parts = (shape.range + grain - 1) / grain;
  runParts(shape.threads, parts, [&](int64_t part) {
    kernel(slots, part * grain, std::min(shape.range, (part + 1) * grain));
  });
}

} // namespace torchneuron

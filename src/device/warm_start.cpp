#include "device/warm_start.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_warnings.h"
#include "cache/kernel_cache.h"
#include "cache/persistent_store.h"
#include "cache/warm_start_profile.h"
#include "device/caching_allocator.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron {
namespace {

constexpr int64_t kDefaultMaxBytes = int64_t{1} << 30;

// A quarter of MemAvailable, so that warming never crowds out the program or its neighbours.
int64_t quarterOfAvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> name >> kib >> unit)
    if (name == "MemAvailable:") return kib * 1024 / 4;
  return kDefaultMaxBytes;
}

// The blocks of `listed` to make ahead of need: valid capacities, in order, up to `budget` bytes.
std::vector<size_t> blocksWithin(const std::vector<size_t>& listed, int64_t budget) {
  std::vector<size_t> chosen;
  int64_t total = 0;
  for (size_t bytes : listed) {
    if (bytes != roundedBlockSize(bytes)) continue; // not a capacity this allocator makes
    if (total + static_cast<int64_t>(bytes) > budget) break;
    total += static_cast<int64_t>(bytes);
    chosen.push_back(bytes);
  }
  return chosen;
}

// Locking: `mutex` guards `stats` and `text_read` (a leaf, ForkRank::kWarmStartStats); `stop`
// is polled by the thread between items. The thread holds `item` while it works on one kernel
// or block, and fork() takes it first (ForkRank::kWarmStartItem, before every other lock: the
// item takes the kernel cache's, the store's, the linker's and the allocator's), so a child is
// never forked with those locked by this thread. Both are held across fork().
struct WarmStart {
  std::mutex mutex;
  std::mutex item;
  WarmStartStats stats;
  std::string program;
  std::string directory;
  std::string text_read; // the profile as read, so an unchanged one is not rewritten
  std::atomic<bool> stop{false};
  std::thread thread;
  int64_t max_bytes = 0; // NEURON_WARM_START_MAX_BYTES, read on the importing thread
  pid_t owner = 0;       // a forked child neither joins the parent's thread nor writes a profile
  bool started = false, finished = false;
};

WarmStart& state() {
  // Never destroyed: finishWarmStart may run at exit. Fork-safe (made_once.h).
  static MadeOnce<WarmStart> instance;
  return instance.get([] { return new WarmStart(); });
}

void warmUpProfile(WarmStart& w) {
  const auto start = std::chrono::steady_clock::now();
  const std::string path = profilePath(w.directory, w.program);
  std::optional<std::string> text = readProfileFile(path);
  std::optional<WarmStartProfile> profile;
  if (text) {
    std::string why;
    bool other_engine = false;
    profile = parseProfile(*text, &why, &other_engine);
    if (!profile && !other_engine)
      warnCacheOnce("profile", "the warm-start profile " + path + " is unusable (" + why +
                                   "); this run starts cold and rewrites it");
  }
  if (profile) {
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      w.text_read = *text;
      w.stats.profile_found = true;
      w.stats.kernels_listed = static_cast<int64_t>(profile->kernel_keys.size());
      w.stats.blocks_listed = static_cast<int64_t>(profile->block_bytes.size());
      for (size_t bytes : profile->block_bytes)
        w.stats.bytes_listed += static_cast<int64_t>(bytes);
    }
    // Kernels first: the first op needs one, while memory is needed a block at a time.
    for (const std::string& key : profile->kernel_keys) {
      if (w.stop.load()) break;
      std::lock_guard<std::mutex> working(w.item);
      if (prefetchStoredKernel(key)) {
        std::lock_guard<std::mutex> lock(w.mutex);
        ++w.stats.kernels_prefetched;
      }
    }
    const int64_t budget = std::min(w.max_bytes, quarterOfAvailableMemory());
    const std::vector<size_t> blocks = blocksWithin(profile->block_bytes, budget);
    expectPrefaultedBlocks(blocks);
    for (size_t bytes : blocks) {
      if (w.stop.load()) break;
      std::lock_guard<std::mutex> working(w.item);
      if (prefaultBlock(bytes)) {
        std::lock_guard<std::mutex> lock(w.mutex);
        w.stats.bytes_prefaulted += static_cast<int64_t>(bytes);
      }
    }
  }
  std::lock_guard<std::mutex> lock(w.mutex);
  w.stats.background_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The thread's body. Its warnings are queued for the next Python-side call (this thread cannot
// raise Python warnings); whatever it throws ends the warm start with one warning, never
// std::terminate. `done` is set however it ends, so a caller polling it never hangs.
void warmUp(WarmStart& w) {
  QueueCacheWarningsHere queued;
  try {
    warmUpProfile(w);
  } catch (const std::exception& error) {
    warnCacheOnce("warm-start", std::string("the warm start stopped early (") + error.what() +
                                    "); the program runs on, starting colder");
  } catch (...) {
    warnCacheOnce("warm-start", "the warm start stopped early (an unknown exception); the "
                                "program runs on, starting colder");
  }
  std::lock_guard<std::mutex> lock(w.mutex);
  w.stats.done = true;
}

void joinAtExit() {
  WarmStart& w = state();
  if (w.owner != getpid()) return;
  w.stop.store(true);
  if (w.thread.joinable()) w.thread.join();
}

} // namespace

void startWarmStart() {
  WarmStart& w = state();
  if (w.started) return;
  PersistentStore* store =
      cacheSettings().warm_start ? PersistentStore::fromEnvironment() : nullptr;
  if (store == nullptr) { // off: nothing will happen, so a caller polling `done` goes on
    std::lock_guard<std::mutex> lock(w.mutex);
    w.stats.done = true;
    return;
  }
  w.started = true;
  w.owner = getpid();
  w.program = currentProgramIdentity();
  w.directory = store->directory();
  w.max_bytes = cacheSettings().warm_start_max_bytes;
  // fork() waits for the item in hand. The allocator registered its own handler when the device
  // library loaded, so its prepare step runs after these: the item may need its lock to finish.
  neuronAllocator();
  registerForkHandlers(
      ForkRank::kWarmStartItem,
      {[] { state().item.lock(); }, [] { state().item.unlock(); }, [] { state().item.unlock(); }});
  registerForkHandlers(ForkRank::kWarmStartStats,
                       {[] { state().mutex.lock(); }, [] { state().mutex.unlock(); },
                        [] { state().mutex.unlock(); }});
  w.thread = std::thread([&w] { warmUp(w); });
  // A program that exits without finishWarmStart() (no interpreter atexit) still joins the
  // thread before the static destructors of everything constructed so far (the store, the
  // allocator, PyTorch), which run after this later-registered handler.
  std::atexit(joinAtExit);
}

void finishWarmStart() {
  WarmStart& w = state();
  if (!w.started || w.finished || w.owner != getpid()) return;
  w.finished = true;
  joinAtExit();
  WarmStartProfile used;
  used.kernel_keys = storedKernelsInFirstUseOrder();
  used.block_bytes = blocksInFirstUseOrder();
  if (used.kernel_keys.empty() && used.block_bytes.empty()) return; // nothing worth keeping
  const std::string text = serializeProfile(used);
  std::string read;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    read = w.text_read;
  }
  if (text == read) return;
  const std::string path = profilePath(w.directory, w.program);
  if (!writeProfileFile(path, text))
    warnCacheIfFirst("profile-write", "cannot write the warm-start profile " + path +
                                          "; the next run of this program starts cold");
}

WarmStartStats warmStartStats() {
  WarmStart& w = state();
  std::lock_guard<std::mutex> lock(w.mutex);
  return w.stats;
}

} // namespace torchneuron

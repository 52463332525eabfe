#include "worker_team.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace torchneuron::bench {
namespace {

// Spins a worker waits for the next call before it blocks (well under a millisecond):
// back-to-back calls do not pay a wake-up, an idle team costs no CPU.
constexpr int kSpinsBeforeBlocking = 1 << 14;

// Threads per team at most (a call's part count must fit the 16 bits it has in Team::claims_).
constexpr int kMostThreads = 4096;

// Parts per thread at most: a thread the system runs slower than the others (a busy machine)
// holds a call up by a fraction of its share, the others claiming the rest.
constexpr int kPartsPerThread = 4;

inline void spinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// `size` threads: the caller and size - 1 workers. A call's parts are claimed one at a time by
// whoever comes first, the caller included, so a worker the system has not scheduled yet (a busy
// machine) delays nothing: the caller runs every part no worker has claimed. Teams live until the
// process exits (their workers detached, blocked on `wake_`), so nothing joins a thread from a
// static destructor.
class Team {
public:
  explicit Team(int size) {
    for (int w = 1; w < size; ++w)
      std::thread([this] { work(); }).detach();
  }

  void run(int parts, const std::function<void(int)>& part) {
    std::lock_guard<std::mutex> one_call(call_mutex_);
    part_ = &part;
    finished_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (claims_.load(std::memory_order_relaxed) >> 32) + 1;
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);
      claims_.store(generation << 32 | static_cast<uint64_t>(parts) << 16,
                    std::memory_order_release);
    }
    wake_.notify_all();
    runClaimedParts(generation);
    for (int spins = 0; finished_.load(std::memory_order_acquire) != parts; ++spins) {
      if (spins < kSpinsBeforeBlocking)
        spinPause();
      else
        std::this_thread::yield();
    }
  }

private:
  // claims_ holds the call's generation (bits 32-63), its part count (16-31) and the next part
  // to hand out (0-15). A part claimed in a generation keeps that call waiting, so part_ stays
  // the call's own until the part is done.
  void runClaimedParts(uint64_t generation) {
    uint64_t claims = claims_.load(std::memory_order_acquire);
    while (claims >> 32 == generation && (claims & 0xffff) < ((claims >> 16) & 0xffff)) {
      if (!claims_.compare_exchange_weak(claims, claims + 1, std::memory_order_acq_rel)) continue;
      (*part_)(static_cast<int>(claims & 0xffff));
      finished_.fetch_add(1, std::memory_order_release);
      claims = claims_.load(std::memory_order_acquire);
    }
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t now = claims_.load(std::memory_order_acquire) >> 32;
      for (int spins = 0; now == seen && spins < kSpinsBeforeBlocking; ++spins) {
        spinPause();
        now = claims_.load(std::memory_order_acquire) >> 32;
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(wake_mutex_);
        wake_.wait(lock,
                   [&] { return (now = claims_.load(std::memory_order_acquire) >> 32) != seen; });
      }
      seen = now;
      runClaimedParts(now);
    }
  }

  std::mutex call_mutex_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> claims_{0};
  std::atomic<int> finished_{0};
  const std::function<void(int)>* part_ = nullptr; // the current call's, published by claims_
};

Team& teamOf(int size) {
  static std::mutex mutex;
  static auto* teams = new std::map<int, Team*>(); // never destroyed: see Team
  std::lock_guard<std::mutex> lock(mutex);
  Team*& team = (*teams)[size];
  if (!team) team = new Team(size);
  return *team;
}

} // namespace

void parallelFor(int64_t n, int64_t grain, int threads,
                 const std::function<void(int64_t, int64_t)>& body) {
  if (threads < 1 || threads > kMostThreads)
    throw std::invalid_argument("[bench] limit loops take 1 to " + std::to_string(kMostThreads) +
                                " threads, got " + std::to_string(threads));
  if (n <= 0) return;
  const int64_t most = grain > 0 ? std::max<int64_t>(1, n / grain) : n;
  const int parts =
      threads == 1 ? 1 : static_cast<int>(std::min<int64_t>(threads * kPartsPerThread, most));
  if (parts == 1) {
    body(0, n);
    return;
  }
  teamOf(threads).run(parts, [&](int p) { body(n * p / parts, n * (p + 1) / parts); });
}

} // namespace torchneuron::bench

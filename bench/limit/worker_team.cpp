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

inline void spinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// `size` threads: the caller and size - 1 workers. Teams live until the process exits (their
// workers detached, blocked on `wake`), so nothing joins a thread from a static destructor.
class Team {
public:
  explicit Team(int size) : workers_(size - 1) {
    for (int w = 1; w < size; ++w)
      std::thread([this, w] { work(w); }).detach();
  }

  void run(int parts, const std::function<void(int)>& part) {
    std::lock_guard<std::mutex> one_call(call_mutex_);
    part_ = &part;
    parts_ = parts;
    pending_.store(workers_, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    part(0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < kSpinsBeforeBlocking)
        spinPause();
      else
        std::this_thread::yield();
    }
  }

private:
  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t now = generation_.load(std::memory_order_acquire);
      for (int spins = 0; now == seen && spins < kSpinsBeforeBlocking; ++spins) {
        spinPause();
        now = generation_.load(std::memory_order_acquire);
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(wake_mutex_);
        wake_.wait(lock,
                   [&] { return (now = generation_.load(std::memory_order_acquire)) != seen; });
      }
      seen = now;
      if (index < parts_) (*part_)(index);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::mutex call_mutex_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* part_ = nullptr; // published by generation_
  int parts_ = 0;
  const int workers_;
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
  if (threads < 1)
    throw std::invalid_argument("[bench] limit loops need at least 1 thread, got " +
                                std::to_string(threads));
  if (n <= 0) return;
  const int64_t most = grain > 0 ? std::max<int64_t>(1, n / grain) : n;
  const int parts = static_cast<int>(std::min<int64_t>(threads, most));
  if (parts == 1) {
    body(0, n);
    return;
  }
  teamOf(threads).run(parts, [&](int p) { body(n * p / parts, n * (p + 1) / parts); });
}

} // namespace torchneuron::bench

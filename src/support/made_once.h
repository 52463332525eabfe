#pragma once
// A process-wide object made at its first use, for the objects whose making may wait for a lock
// that fork() holds (a lock registered in support/fork_handlers.h, or the registry's own lock
// that a registration takes) or may be under way when another thread forks.
//
// A function-local static is not safe there. A thread that is inside the static's initializer
// when another thread forks (waiting, say, for the launch counter table's lock, which fork()
// holds) leaves the static's guard taken in the child for ever, and the child's first use of
// the static hangs. pthread_once, which std::call_once is built on, instead restarts in the
// child an initialization that a fork interrupted: the child makes the object itself. An object
// the parent had made before the fork is the child's too.
//
// Usage: `static MadeOnce<T> made;` (constant-initialized, so it has no guard of its own) and
// `T& t = made.get([] { return new T(...); });`. The object is never destroyed (it may be used
// during exit); `make` runs at most once per process and must not return null.

#include <atomic>
#include <mutex>
#include <type_traits>

namespace torchneuron {

template <typename T> class MadeOnce {
public:
  constexpr MadeOnce() = default;
  MadeOnce(const MadeOnce&) = delete;
  MadeOnce& operator=(const MadeOnce&) = delete;

  template <typename Make> T& get(Make make) {
    if (T* made = object_.load(std::memory_order_acquire)) return *made;
    std::call_once(once_, [&] {
      // A child whose parent stored the object just before forking keeps that one.
      if (object_.load(std::memory_order_relaxed) == nullptr)
        object_.store(make(), std::memory_order_release);
    });
    return *object_.load(std::memory_order_acquire);
  }

private:
  std::once_flag once_;
  std::atomic<T*> object_{nullptr};
};

// A member with a destructor would give every `static MadeOnce` a guard (and an exit-time
// destructor) again.
static_assert(std::is_trivially_destructible_v<MadeOnce<int>>);

} // namespace torchneuron

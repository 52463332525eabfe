#include "support/fork_handlers.h"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

#include "support/settings.h"

namespace torchneuron {
namespace {

// Every member has an initializer, so the default constructor is constexpr and `registered`
// below is constant-initialized. With `rank` left uninitialized it was not: the table had a
// dynamic initializer that ran at library load after other files' static initializers had
// already registered (the tracer's window lock, the launch counters' and cache warnings' locks,
// through op registration), and it reset those entries' handlers to null, so those locks were
// not held across fork() and a child could inherit one locked by a thread it does not have.
struct Registered {
  ForkRank rank{};
  ForkHandlers handlers;
};

constexpr int kCapacity = 64;

// Locking: `registry_mutex` guards the table and is the highest rank of all: it is never held
// while a handler runs or while another lock is taken, so a thread may register while it holds
// any registered lock (registration is lazy, at first use, often inside a critical section).
// The forking thread therefore takes the registered locks first, from a snapshot of the table,
// and `registry_mutex` last; if a registration slipped in while it waited, it lets everything go
// and starts over, so the locks held across fork() are always all the registered ones. The
// table only grows (at most kCapacity entries), so this ends. Constant-initialized, so it is
// usable whatever the order of static initialization.
std::mutex registry_mutex;
Registered registered[kCapacity];
int count = 0; // entries sorted by rank, ties in registration order
std::atomic<bool> forked_child{false};
pthread_once_t installed = PTHREAD_ONCE_INIT;

// Runs the release step of `entries[0, n)` in descending rank order.
template <void (*ForkHandlers::*kStep)()> void releaseInReverse(const Registered* entries, int n) {
  for (int i = n - 1; i >= 0; --i)
    if (entries[i].handlers.*kStep) (entries[i].handlers.*kStep)();
}

void prepare() {
  settings();                            // made before the fork, never during it
  static Registered snapshot[kCapacity]; // only the forking thread touches it, under the fork
  for (;;) {
    int taken;
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      taken = count;
      for (int i = 0; i < taken; ++i)
        snapshot[i] = registered[i];
    }
    for (int i = 0; i < taken; ++i)
      if (snapshot[i].handlers.prepare) snapshot[i].handlers.prepare();
    registry_mutex.lock(); // held until the parent or child step: no registration across fork()
    if (count == taken) return;
    registry_mutex.unlock();
    releaseInReverse<&ForkHandlers::parent>(snapshot, taken);
  }
}

void parent() {
  releaseInReverse<&ForkHandlers::parent>(registered, count);
  registry_mutex.unlock();
}

void child() {
  forked_child.store(true);
  releaseInReverse<&ForkHandlers::child>(registered, count);
  registry_mutex.unlock();
}

} // namespace

void registerForkHandlers(ForkRank rank, ForkHandlers handlers) {
  // pthread_once (unlike a function-local static) is reset in a child forked during it.
  pthread_once(&installed, [] { pthread_atfork(&prepare, &parent, &child); });
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (count == kCapacity) throw std::logic_error("[support] more than 64 fork handlers registered");
  int at = count++;
  for (; at > 0 && static_cast<int>(registered[at - 1].rank) > static_cast<int>(rank); --at)
    registered[at] = registered[at - 1];
  registered[at] = {rank, handlers};
}

bool inForkedChild() { return forked_child.load(); }

} // namespace torchneuron

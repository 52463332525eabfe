#include "support/fork_handlers.h"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

#include "support/settings.h"

namespace torchneuron {
namespace {

struct Registered {
  ForkRank rank;
  ForkHandlers handlers;
};

constexpr int kCapacity = 64;

// Locking: `registry_mutex` guards the table; the forking thread holds it from prepare to the
// parent or child step, so no registration happens across a fork. Constant-initialized, so it
// is usable whatever the order of static initialization.
std::mutex registry_mutex;
Registered registered[kCapacity];
int count = 0; // entries sorted by rank, ties in registration order
std::atomic<bool> forked_child{false};
pthread_once_t installed = PTHREAD_ONCE_INIT;

void prepare() {
  settings(); // its function-local static is made before the fork, never during it
  registry_mutex.lock();
  for (int i = 0; i < count; ++i)
    if (registered[i].handlers.prepare) registered[i].handlers.prepare();
}

void parent() {
  for (int i = count - 1; i >= 0; --i)
    if (registered[i].handlers.parent) registered[i].handlers.parent();
  registry_mutex.unlock();
}

void child() {
  forked_child.store(true);
  for (int i = count - 1; i >= 0; --i)
    if (registered[i].handlers.child) registered[i].handlers.child();
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

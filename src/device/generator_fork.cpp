#include "device/generator_fork.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

// Locking: ATen takes the generator's mutex inside a random kernel, around the draw only; while
// it is held, a device random op may take the lent-block lock (a CPU temporary lent a device
// block, ForkRank::kLentBlocks) and the caching allocator's, never one of a lower rank. Set once,
// before the handlers are registered.
std::mutex* generator_mutex = nullptr;

} // namespace

void holdCpuGeneratorAcrossFork() {
  static std::once_flag registered; // constant-initialized: no guard a fork could catch
  std::call_once(registered, [] {
    // The default generator is a function-local static of PyTorch's: made here, not in a fork.
    generator_mutex = &at::detail::getDefaultCPUGenerator().unsafeGetGeneratorImpl()->mutex_;
    registerForkHandlers(ForkRank::kCpuGenerator,
                         {[] { generator_mutex->lock(); }, [] { generator_mutex->unlock(); },
                          [] { generator_mutex->unlock(); }});
  });
}

} // namespace torchneuron

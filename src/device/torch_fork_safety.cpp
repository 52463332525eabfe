#include "device/torch_fork_safety.h"

#include <ATen/ATen.h>
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

void makeTorchForkSafe() {
  static std::once_flag registered; // constant-initialized: no guard a fork could catch
  std::call_once(registered, [] {
    // A CPU kernel through ATen's DispatchStub makes ATen's CPU capability (its static) now: an add
    // of 16 elements (fill_ of one element has a path of its own that skips the DispatchStub).
    const at::Tensor sixteen = at::empty({16}, at::kFloat);
    at::add_out(const_cast<at::Tensor&>(sixteen), sixteen, sixteen);
    // The default generator is a function-local static of PyTorch's: made here, not in a fork.
    generator_mutex = &at::detail::getDefaultCPUGenerator().unsafeGetGeneratorImpl()->mutex_;
    registerForkHandlers(ForkRank::kCpuGenerator,
                         {[] { generator_mutex->lock(); }, [] { generator_mutex->unlock(); },
                          [] { generator_mutex->unlock(); }});
  });
}

} // namespace torchneuron

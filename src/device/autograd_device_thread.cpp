#include "device/autograd_device_thread.h"

#include <c10/util/CallOnce.h>
#include <torch/csrc/autograd/engine.h>

#include "device/device.h"

namespace torchneuron {
namespace {

// Resets a c10::once_flag (its own reset_once(), private to the flag and to c10::call_once, whose
// specialization below this type selects).
struct ResetOnceFlag {};

} // namespace
} // namespace torchneuron

namespace c10 {
template <>
inline void
call_once<c10::once_flag, torchneuron::ResetOnceFlag>(c10::once_flag& flag,
                                                      torchneuron::ResetOnceFlag&& /*reset*/) {
  flag.reset_once();
}
} // namespace c10

namespace torchneuron {
namespace {

// The engine's state the repair reads and resets: protected members of Engine, reached through
// member pointers named in a class derived from it (the language's access rule for protected
// members; no object of this type is ever made).
struct EngineInternals : torch::autograd::Engine {
  static auto deviceQueues() { return &EngineInternals::device_ready_queues_; }
  static auto threadPool() { return &EngineInternals::thread_pool_shared_; }
  static auto startFlag() { return &EngineInternals::start_device_threads_flag_; }
};

} // namespace

bool startMissingAutogradDeviceThread() {
  if (neuronDeviceCount() == 0) return false;
  torch::autograd::Engine& engine = torch::autograd::Engine::get_default_engine();
  // start_device_threads() makes the reentrant-backward pool before it counts the devices.
  // Without a pool no backward pass has run, and the first one will count the device.
  if (engine.*EngineInternals::threadPool() == nullptr) return false;
  try {
    // Waits for a first backward pass of another thread that is starting the engine's threads.
    engine.initialize_device_threads_pool();
    if (!(engine.*EngineInternals::deviceQueues()).empty()) return false;
    // It ran before the device existed and counted none: run it again, now that it counts the
    // device. It makes the queues and worker threads, waits for them to start, and registers
    // PyTorch's fork guard (a forked child then refuses backward passes, as after any start of
    // device threads), as at a first backward pass.
    c10::call_once(engine.*EngineInternals::startFlag(), ResetOnceFlag{});
    engine.initialize_device_threads_pool();
  } catch (const c10::Error&) {
    // A forked child of a process whose autograd had started device threads: PyTorch refuses to
    // start them here, and says so at its first backward pass.
    return false;
  }
  return !(engine.*EngineInternals::deviceQueues()).empty();
}

} // namespace torchneuron

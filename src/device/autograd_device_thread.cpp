#include "device/autograd_device_thread.h"

#include <torch/csrc/autograd/engine.h>

#include <memory>
#include <thread>

#include "device/device.h"

namespace torchneuron {
namespace {

// The engine's state the repair reads and extends: protected members of Engine, reached through
// member pointers named in a class derived from it (the language's access rule for protected
// members; no object of this type is ever made).
struct EngineInternals : torch::autograd::Engine {
  static auto deviceQueues() { return &EngineInternals::device_ready_queues_; }
  static auto threadPool() { return &EngineInternals::thread_pool_shared_; }
};

} // namespace

bool startMissingAutogradDeviceThread() {
  torch::autograd::Engine& engine = torch::autograd::Engine::get_default_engine();
  auto& queues = engine.*EngineInternals::deviceQueues();
  // start_device_threads() makes the reentrant-backward pool first, then returns early when it
  // counts no device: a pool without device queues is an engine started before the device.
  // Without a pool nothing has started, and the first backward pass will count the device.
  if (engine.*EngineInternals::threadPool() == nullptr || !queues.empty()) return false;
  const int devices = static_cast<int>(neuronDeviceCount());
  if (devices == 0) return false;
  for (int index = 0; index < devices; ++index) {
    queues.push_back(std::make_shared<torch::autograd::ReadyQueue>());
    // As start_device_threads() does: thread_init is virtual, so Python's engine sets up the
    // worker's Python thread state (it takes the GIL once this thread releases it).
    std::thread(&torch::autograd::Engine::thread_init, &engine, index, queues.back(), true)
        .detach();
  }
  return true;
}

} // namespace torchneuron

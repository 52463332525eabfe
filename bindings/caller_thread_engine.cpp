#include "caller_thread_engine.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/CallOnce.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/graph_task.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace torchneuron {
namespace {

using torch::autograd::edge_list;
using torch::autograd::GraphTask;
using torch::autograd::InputBuffer;
using torch::autograd::Node;
using torch::autograd::variable_list;

// The device indices Engine::ready_queue() may be asked for: the largest device count of any
// registered device type, as the engine's start_device_threads() counts them.
size_t deviceIndexCount() {
  c10::DeviceIndex count = 1;
  for (size_t type = 0; type < static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
       ++type) {
    const c10::impl::DeviceGuardImplInterface* impl =
        c10::impl::device_guard_impl_registry[type].load();
    if (impl != nullptr) count = std::max(count, impl->deviceCount());
  }
  return static_cast<size_t>(count);
}

class CallerThreadEngine final : public torch::autograd::Engine {
public:
  CallerThreadEngine() {
    // The engine's once-only start of device threads, marked done without starting any; the
    // pool of reentrant helper threads it would have made with them is made here.
    c10::call_once(start_device_threads_flag_, [] {});
    thread_pool_shared_ = std::make_shared<ThreadPoolShared>();
  }

  ~CallerThreadEngine() override {
    // The queues are the thread's own CPU queue, not worker queues stop() could shut down.
    device_ready_queues_.clear();
    Engine::stop();
  }

  variable_list execute(const edge_list& roots, const variable_list& inputs, bool keep_graph,
                        bool create_graph, bool accumulate_grad,
                        const edge_list& outputs) override {
    TORCH_CHECK(!PyGILState_Check(), "[device] the autograd engine was called while holding the "
                                     "GIL (torchneuron's backward pass releases it first)");
    try {
      return Engine::execute(roots, inputs, keep_graph, create_graph, accumulate_grad, outputs);
    } catch (python_error& e) {
      e.restore();
      throw;
    }
  }

  c10::intrusive_ptr<at::ivalue::Future>
  execute_with_graph_task(const std::shared_ptr<GraphTask>& graph_task,
                          std::shared_ptr<Node> graph_root, InputBuffer&& input_buffer) override {
    const std::shared_ptr<torch::autograd::ReadyQueue>& own = graph_task->cpu_ready_queue_;
    if (device_ready_queues_.empty() || device_ready_queues_.front() != own)
      device_ready_queues_.assign(deviceIndexCount(), own);
    try {
      return Engine::execute_with_graph_task(graph_task, std::move(graph_root),
                                             std::move(input_buffer));
    } catch (python_error& e) {
      pybind11::gil_scoped_acquire gil;
      if (!PyErr_Occurred()) e.restore();
      throw;
    }
  }

  void thread_on_exception(std::shared_ptr<GraphTask> graph_task, const std::shared_ptr<Node>& fn,
                           std::exception& e) override {
    // A Python exception raised by a hook or a custom Function's backward: kept (with the GIL)
    // so the caller re-raises it as itself.
    if (auto* python_err = dynamic_cast<python_error*>(&e)) python_err->persist();
    Engine::thread_on_exception(std::move(graph_task), fn, e);
  }
};

// Forks so far, counted in each child: a thread's engine from before a fork() is not used after
// it. Its reentrant helper threads (if a pass ever went that deep) did not survive the fork, and
// their count would send a deep pass to wait for them; the child's engine is a new one and the old
// one is left alone (its state may be mid-update by a thread the fork did not copy).
std::atomic<uint64_t> forks{0};

void countForkInChild() { forks.fetch_add(1, std::memory_order_relaxed); }

} // namespace

torch::autograd::Engine& callerThreadEngine() {
  static const bool registered = [] {
    return pthread_atfork(nullptr, nullptr, countForkInChild) == 0;
  }();
  TORCH_CHECK(registered, "[device] could not register the backward engine's fork handler");
  thread_local std::unique_ptr<CallerThreadEngine> engine;
  thread_local uint64_t made_after_forks = 0;
  const uint64_t now = forks.load(std::memory_order_relaxed);
  if (engine != nullptr && made_after_forks != now) (void)engine.release(); // see `forks`
  if (engine == nullptr) {
    engine = std::make_unique<CallerThreadEngine>();
    made_after_forks = now;
  }
  return *engine;
}

} // namespace torchneuron

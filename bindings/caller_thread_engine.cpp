#include "caller_thread_engine.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/CallOnce.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

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

  // Never destroyed (callerThreadEngine() keeps every engine it makes): a reentrant helper thread
  // the engine started runs on `this` for the rest of the process.

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

std::atomic<int64_t> engines_made{0};

} // namespace

torch::autograd::Engine& callerThreadEngine() {
  // Engines of threads that have exited, for the next threads: an engine is never freed, since
  // the reentrant helper threads it may have started (a pass nested deeper than the engine's
  // recursion limit) keep using it, and reusing it reuses them.
  static std::mutex* const idle_mutex = new std::mutex;
  static std::vector<CallerThreadEngine*>* const idle = new std::vector<CallerThreadEngine*>;
  struct ThisThreads {
    CallerThreadEngine* engine = nullptr;
    ~ThisThreads() {
      if (engine == nullptr) return;
      std::lock_guard<std::mutex> lock(*idle_mutex);
      idle->push_back(engine);
    }
  };
  thread_local ThisThreads mine;
  if (mine.engine == nullptr) {
    {
      std::lock_guard<std::mutex> lock(*idle_mutex);
      if (!idle->empty()) {
        mine.engine = idle->back();
        idle->pop_back();
      }
    }
    if (mine.engine == nullptr) {
      mine.engine = new CallerThreadEngine();
      engines_made.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return *mine.engine;
}

int64_t callerThreadEnginesMade() { return engines_made.load(std::memory_order_relaxed); }

} // namespace torchneuron

#pragma once
// NEURON_ADAPTIVE_DEBUG=1: each recorded call remembers where in Python it was written, and each
// batch of recorded steps is also run eagerly, op by op, by ATen's CPU kernels on copies of the
// memory it starts from; results that differ are reported as warnings naming the op and its line.
//
// Locking: everything here runs under the tracer's window lock (tracer.cpp).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torchneuron::tracer {

// The innermost Python frame outside torch's and torchneuron's own files ("train.py:42"), or ""
// when the thread runs no Python (autograd's device thread). Set by the Python bindings.
using SourceLocator = std::string (*)();
void setSourceLocator(SourceLocator locator);
std::string locateSource();

// One recorded call as the debug check replays it: its arguments and results with their geometry
// as of the call (later metadata changes of the tensors do not reach them).
struct DebugCall {
  c10::OperatorHandle op;
  std::vector<c10::IValue> arguments;
  std::vector<c10::IValue> results;
  std::string where;
};

// The arguments of a call about to run, frozen (tensors' geometry as of now).
std::vector<c10::IValue> frozenValues(c10::ArrayRef<c10::IValue> values);

// The eager twin of the recorded steps: each recorded call is rerun at once, in program order,
// by ATen's CPU kernels over CPU copies ("shadows") of the device storages it touches, a shadow
// made from device memory as it is when the batch first touches that storage. When the batch
// runs, every call's results on the device are compared with the shadows'. Differences mean
// the window computed something eager mode would not (a stale read, a wrong replay, a write the
// tracer did not see): each is one line naming the op and its source line.
class DebugShadow {
public:
  bool empty() const { return calls_.empty(); }
  // Reruns `call` (a recorded call: its arguments frozen before it, its results after).
  void rerun(DebugCall call);
  // After the batch ran: compares every rerun call's results, then forgets the batch.
  std::vector<std::string> compareAndReset();
  void reset();

private:
  const c10::Storage& shadowOf(const at::Tensor& device_tensor);
  at::Tensor onCpu(const at::Tensor& t);

  std::vector<DebugCall> calls_;
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> shadows_; // device -> CPU copy
  std::vector<std::string> failures_; // calls the CPU could not rerun
};

} // namespace torchneuron::tracer

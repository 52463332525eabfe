#pragma once
// The Work of a neuron collective or point-to-point op. It completes when its transport (gloo)
// work does, and result() and getFuture() hand back the caller's tensors (device tensors, not
// the host views the transport wrote), which DDP's reducer reads its averaged gradients from.

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torchneuron {

class NeuronWork : public c10d::Work {
public:
  // `transport`: the transport's works, waited for in order (may be empty); `future`: completes
  // with the caller's tensors (null for an op without one, as gloo's send); `description` names
  // the op and the rank in errors ("all_reduce(sum) on float32[4] on rank 0 of 2").
  NeuronWork(int rank, c10d::OpType op, std::string description, std::vector<at::Tensor> outputs,
             std::vector<c10::intrusive_ptr<c10d::Work>> transport,
             c10::intrusive_ptr<c10::ivalue::Future> future);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  // Throws the op's error, naming the op and the rank, when it failed (a rank died, sizes
  // differed, the timeout passed).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // The rank a recv got its tensor from, set before its future completes.
  void setSourceRank(int rank) { source_rank_ = rank; }

private:
  std::string description_;
  std::vector<at::Tensor> outputs_;
  std::vector<c10::intrusive_ptr<c10d::Work>> transport_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<int> source_rank_{-1};
};

// A future of the caller's tensors that completes after `transport` does: it runs `finish` (on
// the transport's thread; may be empty), then maps the transport's value back through `toCaller`.
// A transport error becomes an error naming `description`.
c10::intrusive_ptr<c10::ivalue::Future>
callerFuture(const c10::intrusive_ptr<c10::ivalue::Future>& transport, std::string description,
             std::function<void()> finish, std::function<c10::IValue(const c10::IValue&)> toCaller);

// Throws a c10::Error "[distributed] <description> failed: <what error says>".
[[noreturn]] void rethrowNamed(const std::string& description, const std::exception_ptr& error);

} // namespace torchneuron

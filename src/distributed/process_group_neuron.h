#pragma once
// The c10d backend "neuron" (torch.distributed.init_process_group(backend="neuron")): PyTorch's
// gloo collectives run on host views of device tensors (device memory is host memory), so no
// byte is copied and no transport is home-made. docs/distributed.md describes it.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/collective_fingerprint.h"
#include "distributed/collective_operands.h"

namespace torchneuron {

class ProcessGroupNeuron final : public c10d::ProcessGroup {
public:
  // `transport`: a gloo process group over the same ranks, which this group owns from now on.
  explicit ProcessGroupNeuron(c10::intrusive_ptr<c10d::ProcessGroup> transport);

  const std::string getBackendName() const override { return "neuron"; }

  // Every collective first exchanges a fingerprint of the call with the other ranks (an
  // all-gather of 11 integers; see collective_fingerprint.h): ranks that disagree get an error
  // naming the op and each rank's call instead of gloo aborting the process. ReduceOp.AVG, which
  // gloo refuses, is a sum divided by the group size.
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  // The fingerprint exchange is itself a barrier, so a barrier is that exchange alone.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // A send is a header (the fingerprint) and the tensor; the receiver posts its receive only
  // after the header matched its tensor's dtype and element count, so a mismatch is an error
  // on the receiver (the sender's tensor is drained) instead of a gloo abort.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

private:
  // "<what> on rank R of N", the op as errors name it.
  std::string describe(const std::string& what) const;
  // Checks the call against the other ranks' (fingerprint exchange), runs `launch` (the
  // transport's op on the host tensors) and wraps its work; `finish` runs once the transport
  // succeeded, before the work's future completes with `outputs`.
  c10::intrusive_ptr<c10d::Work>
  issueCollective(const CollectiveFingerprint& print,
                  const std::shared_ptr<CollectiveOperands>& operands,
                  std::vector<at::Tensor> outputs,
                  const std::function<c10::intrusive_ptr<c10d::Work>()>& launch,
                  std::function<void()> finish = nullptr);
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int src_rank, int tag);

  c10::intrusive_ptr<c10d::ProcessGroup> transport_;
  // Locking: a collective's fingerprint exchange and the transport call that follows it are
  // issued under issue_mutex_, so two threads of one process (DDP's reducer runs on the autograd
  // thread) cannot interleave them; point-to-point ops do not take it (gloo matches them by tag).
  std::mutex issue_mutex_;
};

} // namespace torchneuron

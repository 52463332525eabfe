#include "distributed/process_group_neuron.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <thread>

#include "distributed/neuron_work.h"

namespace torchneuron {
namespace {

using c10d::OpType;

// ReduceOp.AVG is a sum the caller divides by the group size; gloo (PyTorch 1.13) refuses AVG.
c10d::ReduceOp transportReduceOp(const c10d::ReduceOp& op, const char* name,
                                 const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(op.op_ != c10d::ReduceOp::PREMUL_SUM, "[distributed] ", name,
              ": ReduceOp.PREMUL_SUM is NCCL's; the neuron backend does not support it");
  if (op.op_ != c10d::ReduceOp::AVG) return op;
  for (size_t i = 0; i < tensors.size(); ++i)
    TORCH_CHECK(at::isFloatingType(tensors[i].scalar_type()) ||
                    at::isComplexType(tensors[i].scalar_type()),
                "[distributed] ", name, "(avg) needs floating-point tensors, tensor ", i, " is ",
                tensors[i].scalar_type());
  return c10d::ReduceOp::SUM;
}

// Divides the reduced tensors in place (their host views: no device kernel, no copy).
std::function<void()> divideBy(std::vector<at::Tensor> host, int64_t divisor) {
  return [host = std::move(host), divisor]() mutable {
    for (at::Tensor& t : host)
      t.div_(divisor);
  };
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists)
    all.insert(all.end(), list.begin(), list.end());
  return all;
}

} // namespace

ProcessGroupNeuron::ProcessGroupNeuron(c10::intrusive_ptr<c10d::ProcessGroup> transport)
    : c10d::ProcessGroup(transport->getRank(), transport->getSize()),
      transport_(std::move(transport)) {
  init();
}

std::string ProcessGroupNeuron::describe(const std::string& what) const {
  return what + " on rank " + std::to_string(getRank()) + " of " + std::to_string(getSize());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::issueCollective(
    const CollectiveFingerprint& print, const std::shared_ptr<CollectiveOperands>& operands,
    std::vector<at::Tensor> outputs, const std::function<c10::intrusive_ptr<c10d::Work>()>& launch,
    std::function<void()> finish) {
  const std::string description = describe(print.describe());
  c10::intrusive_ptr<c10d::Work> work;
  {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    checkCollective(*transport_, print);
    work = launch();
  }
  auto future = callerFuture(work->getFuture(), description, std::move(finish),
                             [operands](const c10::IValue& v) { return operands->toCaller(v); });
  return c10::make_intrusive<NeuronWork>(getRank(), print.op, description, std::move(outputs),
                                         std::vector<c10::intrusive_ptr<c10d::Work>>{work},
                                         std::move(future));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  auto operands = std::make_shared<CollectiveOperands>(OpType::BROADCAST);
  std::vector<at::Tensor> host = operands->toTransport(tensors);
  const auto print = CollectiveFingerprint::of(OpType::BROADCAST, opts.rootRank, tensors);
  return issueCollective(print, operands, tensors,
                         [&] { return transport_->broadcast(host, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  auto operands = std::make_shared<CollectiveOperands>(OpType::ALLREDUCE);
  std::vector<at::Tensor> host = operands->toTransport(tensors);
  c10d::AllreduceOptions transport_opts = opts;
  transport_opts.reduceOp = transportReduceOp(opts.reduceOp, "all_reduce", tensors);
  const auto print = CollectiveFingerprint::of(OpType::ALLREDUCE, opts.reduceOp.op_, tensors);
  std::function<void()> finish;
  if (opts.reduceOp.op_ == c10d::ReduceOp::AVG) finish = divideBy(host, getSize());
  return issueCollective(
      print, operands, tensors, [&] { return transport_->allreduce(host, transport_opts); },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  auto operands = std::make_shared<CollectiveOperands>(OpType::REDUCE);
  std::vector<at::Tensor> host = operands->toTransport(tensors);
  c10d::ReduceOptions transport_opts = opts;
  transport_opts.reduceOp = transportReduceOp(opts.reduceOp, "reduce", tensors);
  const auto print =
      CollectiveFingerprint::of(OpType::REDUCE, opts.reduceOp.op_ + 256 * opts.rootRank, tensors);
  std::function<void()> finish;
  if (opts.reduceOp.op_ == c10d::ReduceOp::AVG && getRank() == opts.rootRank)
    finish = divideBy(host, getSize());
  return issueCollective(
      print, operands, tensors, [&] { return transport_->reduce(host, transport_opts); },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                              std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  auto operands = std::make_shared<CollectiveOperands>(OpType::ALLGATHER);
  std::vector<at::Tensor> host_inputs = operands->toTransport(inputs);
  std::vector<std::vector<at::Tensor>> host_outputs = operands->toTransport(outputs);
  const auto print = CollectiveFingerprint::of(OpType::ALLGATHER, -1, inputs);
  return issueCollective(print, operands, flatten(outputs),
                         [&] { return transport_->allgather(host_outputs, host_inputs, opts); });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::gather(std::vector<std::vector<at::Tensor>>& outputs,
                           std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  auto operands = std::make_shared<CollectiveOperands>(OpType::GATHER);
  std::vector<at::Tensor> host_inputs = operands->toTransport(inputs);
  std::vector<std::vector<at::Tensor>> host_outputs = operands->toTransport(outputs);
  const auto print = CollectiveFingerprint::of(OpType::GATHER, opts.rootRank, inputs);
  return issueCollective(print, operands, flatten(outputs),
                         [&] { return transport_->gather(host_outputs, host_inputs, opts); });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::scatter(std::vector<at::Tensor>& outputs,
                            std::vector<std::vector<at::Tensor>>& inputs,
                            const c10d::ScatterOptions& opts) {
  auto operands = std::make_shared<CollectiveOperands>(OpType::SCATTER);
  std::vector<at::Tensor> host_outputs = operands->toTransport(outputs);
  std::vector<std::vector<at::Tensor>> host_inputs = operands->toTransport(inputs);
  const auto print = CollectiveFingerprint::of(OpType::SCATTER, opts.rootRank, outputs);
  return issueCollective(print, operands, outputs,
                         [&] { return transport_->scatter(host_outputs, host_inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions& opts) {
  const auto print = CollectiveFingerprint::of(OpType::BARRIER, -1, {});
  {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    checkCollective(*transport_, print);
  }
  auto done = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  done->markCompleted(c10::IValue(std::vector<at::Tensor>()));
  return c10::make_intrusive<NeuronWork>(getRank(), OpType::BARRIER, describe("barrier"),
                                         std::vector<at::Tensor>{},
                                         std::vector<c10::intrusive_ptr<c10d::Work>>{}, done);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "[distributed] send takes one tensor, got ", tensors.size());
  CollectiveOperands operands(OpType::SEND);
  std::vector<at::Tensor> host = operands.toTransport(tensors);
  const auto print = CollectiveFingerprint::of(OpType::SEND, -1, tensors);
  std::vector<at::Tensor> header{print.toTensor()};
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(transport_->send(header, dst_rank, tag));
  works.push_back(transport_->send(host, dst_rank, tag));
  return c10::make_intrusive<NeuronWork>(
      getRank(), OpType::SEND, describe(print.describe() + " to rank " + std::to_string(dst_rank)),
      tensors, std::move(works), c10::intrusive_ptr<c10::ivalue::Future>());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  return receive(tensors, src_rank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  return receive(tensors, -1, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::receive(std::vector<at::Tensor>& tensors,
                                                           int src_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "[distributed] recv takes one tensor, got ", tensors.size());
  CollectiveOperands operands(OpType::RECV);
  const at::Tensor host = operands.toTransport(tensors).front();
  const auto mine = CollectiveFingerprint::of(OpType::RECV, -1, tensors);
  const std::string description =
      describe(mine.describe() + (src_rank >= 0 ? " from rank " + std::to_string(src_rank) : ""));
  std::vector<at::Tensor> header{at::empty({CollectiveFingerprint::kFields}, at::kLong)};
  c10::intrusive_ptr<c10d::Work> header_work = src_rank >= 0
                                                   ? transport_->recv(header, src_rank, tag)
                                                   : transport_->recvAnysource(header, tag);
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  auto work =
      c10::make_intrusive<NeuronWork>(getRank(), OpType::RECV, description, tensors,
                                      std::vector<c10::intrusive_ptr<c10d::Work>>{}, future);
  // The tensor's own receive can be posted only once the header says what comes, so a thread
  // waits for the header (a recv must not block its caller: two ranks may irecv, then send).
  // It holds the transport, the buffers and the work, and ends when the receive does or fails
  // (gloo bounds both waits by the group's timeout).
  std::thread([transport = transport_, header_work, header, host, tensors, future, work, mine,
               description, tag, rank = getRank()] {
    try {
      try {
        header_work->wait();
      } catch (...) {
        rethrowNamed(description, std::current_exception());
      }
      const int source = header_work->sourceRank();
      const auto sent = CollectiveFingerprint::fromTensor(header.front());
      if (sent.dtype != mine.dtype || sent.numel != mine.numel) {
        std::vector<at::Tensor> drain{
            at::empty({sent.numel}, static_cast<c10::ScalarType>(sent.dtype))};
        transport->recv(drain, source, tag)->wait();
        TORCH_CHECK(false, "[distributed] mismatched send/recv: rank ", source, " sent ",
                    sent.describeTensors(), " but rank ", rank, " receives into ",
                    mine.describeTensors(), " (dtype and element count must match)");
      }
      std::vector<at::Tensor> payload{host};
      try {
        transport->recv(payload, source, tag)->wait();
      } catch (...) {
        rethrowNamed(description, std::current_exception());
      }
      work->setSourceRank(source);
      future->markCompleted(c10::IValue(tensors));
    } catch (...) {
      future->setError(std::current_exception());
    }
  }).detach();
  return work;
}

void ProcessGroupNeuron::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  transport_->monitoredBarrier(opts, wait_all_ranks);
}

void ProcessGroupNeuron::setSequenceNumberForGroup() { transport_->setSequenceNumberForGroup(); }

uint64_t ProcessGroupNeuron::getSequenceNumberForGroup() {
  return transport_->getSequenceNumberForGroup();
}

} // namespace torchneuron

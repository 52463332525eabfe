#pragma once
// The tensors of one collective as the transport (gloo) sees them: host views of device tensors,
// which alias device memory (no copy), or CPU tensors as they are; and the way back from the
// transport's results to the caller's tensors.

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <unordered_map>
#include <vector>

namespace torchneuron {

class CollectiveOperands {
public:
  explicit CollectiveOperands(c10d::OpType op) : op_(op) {}

  // The transport's tensor for `tensor`. A device tensor's storage is materialized first
  // (hostView -> materializeStorage), the one point where pending contents are flushed before a
  // collective reads or writes them. Throws, naming the op, for a sparse tensor, a device other
  // than the neuron device or the CPU, or a call that mixes the neuron device and the CPU.
  at::Tensor toTransport(const at::Tensor& tensor);
  std::vector<at::Tensor> toTransport(const std::vector<at::Tensor>& tensors);
  std::vector<std::vector<at::Tensor>>
  toTransport(const std::vector<std::vector<at::Tensor>>& tensors);

  // `value` (a tensor, a list of tensors or a list of such lists, as a transport's future holds)
  // with each transport tensor replaced by the caller's tensor it stands for.
  c10::IValue toCaller(const c10::IValue& value) const;

  bool onDevice() const { return on_device_; }

private:
  c10d::OpType op_;
  int64_t count_ = 0;
  bool on_device_ = false;
  c10::Device first_device_ = c10::Device(c10::kCPU);
  std::unordered_map<const c10::TensorImpl*, at::Tensor> caller_of_;
};

} // namespace torchneuron

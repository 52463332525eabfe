#include "distributed/collective_operands.h"

#include <c10/util/Exception.h>

#include "device/device.h"
#include "device/host_view.h"
#include "distributed/collective_fingerprint.h"

namespace torchneuron {

at::Tensor CollectiveOperands::toTransport(const at::Tensor& tensor) {
  const char* op = collectiveName(op_);
  TORCH_CHECK(tensor.defined(), "[distributed] ", op, ": tensor ", count_, " is undefined");
  TORCH_CHECK(tensor.layout() == c10::kStrided, "[distributed] ", op,
              ": the neuron backend takes dense tensors, tensor ", count_, " is ", tensor.layout());
  const c10::Device device = tensor.device();
  TORCH_CHECK(device.type() == kNeuronDeviceType || device.is_cpu(), "[distributed] ", op,
              ": the neuron backend takes neuron device or CPU tensors, tensor ", count_, " is on ",
              device);
  if (count_ == 0) {
    first_device_ = device;
    on_device_ = device.type() == kNeuronDeviceType;
  }
  TORCH_CHECK(device.type() == first_device_.type(), "[distributed] ", op, " mixes devices (",
              first_device_, " and ", device,
              "): one collective's tensors must all be on the neuron device or all on the CPU");
  ++count_;
  if (!on_device_) {
    caller_of_.emplace(tensor.unsafeGetTensorImpl(), tensor);
    return tensor;
  }
  at::Tensor host = hostView(tensor);
  caller_of_.emplace(host.unsafeGetTensorImpl(), tensor);
  return host;
}

std::vector<at::Tensor> CollectiveOperands::toTransport(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor& t : tensors)
    host.push_back(toTransport(t));
  return host;
}

std::vector<std::vector<at::Tensor>>
CollectiveOperands::toTransport(const std::vector<std::vector<at::Tensor>>& tensors) {
  std::vector<std::vector<at::Tensor>> host;
  host.reserve(tensors.size());
  for (const std::vector<at::Tensor>& list : tensors)
    host.push_back(toTransport(list));
  return host;
}

c10::IValue CollectiveOperands::toCaller(const c10::IValue& value) const {
  if (value.isTensor()) {
    auto found = caller_of_.find(value.toTensor().unsafeGetTensorImpl());
    TORCH_INTERNAL_ASSERT(found != caller_of_.end(),
                          "[distributed] a transport result is none of the call's tensors");
    return found->second;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> result;
    for (const at::Tensor& t : value.toTensorList())
      result.push_back(toCaller(t).toTensor());
    return result;
  }
  if (value.isList()) {
    c10::impl::GenericList result(value.toList().elementType());
    for (const c10::IValue& element : value.toList())
      result.push_back(toCaller(element));
    return result;
  }
  return value;
}

} // namespace torchneuron

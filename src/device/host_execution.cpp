#include "device/host_execution.h"

#include <ATen/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <unordered_map>
#include <vector>

#include "device/device.h"
#include "device/host_view.h"

namespace torchneuron {
namespace {

// Tensor arguments may be on the CPU only as 0-dim scalars, as on CUDA; index lists
// (List[Optional[Tensor]]) may also live on the CPU, as on CUDA.
void checkSameDevice(const at::Tensor& tensor, bool cpu_allowed, const c10::OperatorHandle& op,
                     const c10::Argument& argument, std::optional<c10::Device>& device) {
  if (!tensor.defined()) return;
  const c10::Device where = tensor.device();
  if (where.type() == kNeuronDeviceType) {
    checkNeuronDeviceIndex(where.index());
    if (!device) device = where;
    return;
  }
  if (where.is_cpu() && (cpu_allowed || tensor.dim() == 0)) return;
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              device ? device->str() : std::string("privateuseone:0"), " and ", where.str(),
              "! (when checking argument '", argument.name(), "' of ", op.schema().name(),
              "; move it with .to(torchneuron.device()))");
}

// List[Optional[Tensor]] (the indices of index/index_put_), told by the list's element type so
// that an empty int list is never mistaken for it.
bool isOptionalTensorList(const c10::IValue& value) {
  if (!value.isList() || value.isTensorList()) return false;
  const c10::TypePtr element = value.toList().elementType();
  return element->kind() == c10::OptionalType::Kind &&
         element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TensorType::Kind;
}

// The per-call state: host aliases, the device tensors behind host arguments, written args.
class HostCall {
 public:
  explicit HostCall(const c10::OperatorHandle& op) : op_(op) {}

  void checkArguments(torch::jit::Stack* stack, size_t begin) {
    const auto& arguments = op_.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::IValue& value = (*stack)[begin + i];
      if (value.isTensor()) {
        checkSameDevice(value.toTensor(), false, op_, arguments[i], device_);
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorList().vec())
          checkSameDevice(t, false, op_, arguments[i], device_);
      } else if (isOptionalTensorList(value)) {
        for (const c10::IValue& element : value.toListRef())
          if (element.isTensor()) checkSameDevice(element.toTensor(), true, op_, arguments[i], device_);
      } else if (value.isDevice() && value.toDevice().type() == kNeuronDeviceType) {
        checkNeuronDeviceIndex(value.toDevice().index());
        if (!device_) device_ = c10::Device(kNeuronDeviceType, 0);
      }
    }
  }

  void moveArgumentsToHost(torch::jit::Stack* stack, size_t begin) {
    const auto& arguments = op_.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = (*stack)[begin + i];
      const c10::AliasInfo* alias = arguments[i].alias_info();
      const bool written = alias != nullptr && alias->isWrite();
      if (value.isTensor()) {
        value = toHost(value.toTensor(), written);
      } else if (value.isTensorList()) {
        c10::List<at::Tensor> host_list;
        for (const at::Tensor& t : value.toTensorList().vec()) host_list.push_back(toHost(t, written));
        value = host_list;
      } else if (isOptionalTensorList(value)) {
        c10::List<c10::optional<at::Tensor>> host_list;
        for (const c10::IValue& element : value.toListRef())
          host_list.push_back(element.isTensor() ? c10::optional<at::Tensor>(toHost(element.toTensor(), written))
                                                 : c10::nullopt);
        value = host_list;
      } else if (value.isDevice() && value.toDevice().type() == kNeuronDeviceType) {
        value = c10::Device(c10::kCPU);
      }
    }
  }

  void writeBackWrittenArguments() const {
    for (const auto& [host, device] : written_) aliases_.writeBack(host, device);
  }

  void moveResultsToDevice(torch::jit::Stack* stack, size_t begin) const {
    for (size_t i = begin; i < stack->size(); ++i) {
      c10::IValue& value = (*stack)[i];
      if (value.isTensor()) {
        value = toDevice(value.toTensor());
      } else if (value.isTensorList()) {
        c10::List<at::Tensor> device_list;
        for (const at::Tensor& t : value.toTensorList().vec()) device_list.push_back(toDevice(t));
        value = device_list;
      }
    }
  }

 private:
  at::Tensor toHost(const at::Tensor& tensor, bool written) {
    if (!tensor.defined() || tensor.device().type() != kNeuronDeviceType) return tensor;
    at::Tensor host = aliases_.toHost(tensor);
    device_of_host_.emplace(host.unsafeGetTensorImpl(), tensor);
    if (written) written_.emplace_back(host, tensor);
    return host;
  }

  at::Tensor toDevice(const at::Tensor& host) const {
    if (!host.defined()) return host;
    // In-place and out= ops return their argument: hand back the caller's own tensor.
    auto argument = device_of_host_.find(host.unsafeGetTensorImpl());
    if (argument != device_of_host_.end()) return argument->second;
    TORCH_CHECK(device_.has_value(), "[device] ", op_.schema().name(),
                " returned a tensor but none of its arguments is on the neuron device");
    if (host.device().type() == kNeuronDeviceType) return host;
    return aliases_.toDevice(host, *device_);
  }

  const c10::OperatorHandle& op_;
  std::optional<c10::Device> device_;
  HostAliasSet aliases_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> device_of_host_;
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;
};

}  // namespace

void runBoxedOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  const size_t arguments_begin = stack->size() - num_arguments;
  HostCall call(op);
  call.checkArguments(stack, arguments_begin);
  call.moveArgumentsToHost(stack, arguments_begin);
  op.callBoxed(stack);
  call.writeBackWrittenArguments();
  const size_t num_returns = op.schema().returns().size();
  call.moveResultsToDevice(stack, stack->size() - num_returns);
}

}  // namespace torchneuron

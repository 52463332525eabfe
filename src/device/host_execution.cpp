#include "device/host_execution.h"

#include <ATen/Functions.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/SparseTensorUtils.h>
#include <ATen/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <unordered_map>
#include <vector>

#include "device/device.h"
#include "device/host_kernel_allocator.h"
#include "device/host_view.h"
#include "device/integer_division_guard.h"
#include "device/small_pointer_map.h"

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
  explicit HostCall(const c10::OperatorHandle& op)
      : op_(op), is_copy_(op.schema().name() == "aten::_copy_from" ||
                          op.schema().name() == "aten::_copy_from_and_resize") {}

  // _copy_from(self, dst) of sparse tensors reaches the fallback: it mixes devices by
  // definition, writes `dst` without saying so in its schema, and has no CPU kernel (the CPU
  // copies in copy_), so it runs as dst.copy_(self) on the host.
  bool isCopy() const { return is_copy_; }

  void checkArguments(torch::jit::Stack* stack, size_t begin) {
    const auto& arguments = op_.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::IValue& value = (*stack)[begin + i];
      if (value.isTensor()) {
        checkSameDevice(value.toTensor(), is_copy_, op_, arguments[i], device_);
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorList().vec())
          checkSameDevice(t, false, op_, arguments[i], device_);
      } else if (isOptionalTensorList(value)) {
        for (const c10::IValue& element : value.toListRef())
          if (element.isTensor())
            checkSameDevice(element.toTensor(), true, op_, arguments[i], device_);
      } else if (value.isDevice() && value.toDevice().type() == kNeuronDeviceType) {
        checkNeuronDeviceIndex(value.toDevice().index());
        if (!device_) device_ = c10::Device(kNeuronDeviceType, 0);
      }
    }
  }

  void moveArgumentsToHost(torch::jit::Stack* stack, size_t begin) {
    const auto& arguments = op_.schema().arguments();
    // Written tensors a kernel ignoring their strides would write past their storage with get
    // host memory with room first (HostAliasSet::giveWriteRoom), before any view of the storage.
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::AliasInfo* alias = arguments[i].alias_info();
      const c10::IValue& value = (*stack)[begin + i];
      if (alias != nullptr && alias->isWrite() && value.isTensor() &&
          value.toTensor().device().type() == kNeuronDeviceType &&
          value.toTensor().layout() == at::kStrided && mayWritePastStorage(value.toTensor()))
        aliases_.giveWriteRoom(value.toTensor());
    }
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = (*stack)[begin + i];
      const c10::AliasInfo* alias = arguments[i].alias_info();
      const bool written = (alias != nullptr && alias->isWrite()) || (is_copy_ && i == 1);
      if (value.isTensor()) {
        value = toHost(value.toTensor(), written);
      } else if (value.isTensorList()) {
        c10::List<at::Tensor> host_list;
        for (const at::Tensor& t : value.toTensorList().vec())
          host_list.push_back(toHost(t, written));
        value = host_list;
      } else if (isOptionalTensorList(value)) {
        c10::List<c10::optional<at::Tensor>> host_list;
        for (const c10::IValue& element : value.toListRef())
          host_list.push_back(element.isTensor()
                                  ? c10::optional<at::Tensor>(toHost(element.toTensor(), written))
                                  : c10::nullopt);
        value = host_list;
      } else if (value.isDevice() && value.toDevice().type() == kNeuronDeviceType) {
        value = c10::Device(c10::kCPU);
      }
    }
  }

  void writeBackWrittenArguments() const {
    for (const auto& [host, device] : written_) {
      if (host.layout() == at::kSparse) {
        copySparseContents(host, device);
      } else {
        aliases_.writeBack(host, device);
      }
    }
  }

  void moveResultsToDevice(torch::jit::Stack* stack, size_t begin) const {
    for (size_t i = begin; i < stack->size(); ++i) {
      c10::IValue& value = (*stack)[i];
      if (value.isTensor()) {
        value = toDevice(value.toTensor());
      } else if (value.isTensorList()) {
        // Each result is moved out of the list, so that it is its storage's only holder and a
        // fresh one is adopted without a copy (_foreach_sqrt's 144 results of a GPT's parameters
        // were 340 MB of copies a step).
        c10::List<at::Tensor> host_list = std::move(value).toTensorList();
        value = c10::IValue();
        c10::List<at::Tensor> device_list;
        device_list.reserve(host_list.size());
        for (size_t k = 0; k < host_list.size(); ++k)
          device_list.push_back(toDevice(host_list.extract(k)));
        value = device_list;
      }
    }
  }

private:
  at::Tensor toHost(const at::Tensor& tensor, bool written) {
    if (!tensor.defined() || tensor.device().type() != kNeuronDeviceType) return tensor;
    // One tensor given twice (an out= argument that is also an input) is one host tensor, so
    // that ATen's checks that compare tensors by identity see it: an output that is also an input
    // must already have the broadcast shape, where a mere out= argument would be resized.
    if (at::Tensor* seen = host_of_device_.find(tensor.unsafeGetTensorImpl())) {
      if (written) written_.emplace_back(*seen, tensor);
      return *seen;
    }
    at::Tensor host =
        tensor.layout() == at::kSparse ? sparseToHost(tensor) : aliases_.toHost(tensor);
    device_of_host_.emplace(host.unsafeGetTensorImpl(), tensor);
    host_of_device_.emplace(tensor.unsafeGetTensorImpl(), host);
    if (written) written_.emplace_back(host, tensor);
    return host;
  }

  at::Tensor toDevice(const at::Tensor& host) const {
    if (!host.defined()) return host;
    // In-place and out= ops return their argument: hand back the caller's own tensor.
    if (const at::Tensor* argument = device_of_host_.find(host.unsafeGetTensorImpl()))
      return *argument;
    TORCH_CHECK(device_.has_value(), "[device] ", op_.schema().name(),
                " returned a tensor but none of its arguments is on the neuron device");
    if (host.device().type() == kNeuronDeviceType) return host;
    if (host.layout() == at::kSparse) return sparseToDevice(host);
    // A fresh result allocated in the call's HostKernelAllocationScope: its block, not a copy.
    if (at::Tensor adopted = adoptHostResult(host, *device_); adopted.defined()) return adopted;
    TORCH_CHECK(host.layout() == at::kStrided, "[device] ", op_.schema().name(),
                " produced a tensor with layout ", host.layout(),
                ", which cannot live on the neuron device: PyTorch 1.13 has no sparse-compressed "
                "(CSR/CSC/BSR/BSC) dispatch key for PrivateUse1 devices; keep it on the CPU");
    return aliases_.toDevice(host, *device_);
  }

  // Sparse COO tensors are an indices and a values tensor: both live in device memory and
  // travel as host views like any dense argument.
  at::Tensor sparseToHost(const at::Tensor& sparse) {
    at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(sparse);
    at::Tensor host = at::_sparse_coo_tensor_unsafe(
        aliases_.toHost(impl->indices()), aliases_.toHost(impl->values()), sparse.sizes());
    at::sparse::get_sparse_impl(host)->set_coalesced(impl->coalesced());
    return host;
  }

  at::Tensor sparseToDevice(const at::Tensor& host) const {
    at::Tensor result = at::detail::make_tensor<at::SparseTensorImpl>(
        c10::DispatchKeySet(c10::DispatchKey::SparsePrivateUse1), host.dtype());
    copySparseContents(host, result);
    return result;
  }

  void copySparseContents(const at::Tensor& host, const at::Tensor& device) const {
    at::SparseTensorImpl* source = at::sparse::get_sparse_impl(host);
    at::SparseTensorImpl* target = at::sparse::get_sparse_impl(device);
    target->resize_(source->sparse_dim(), source->dense_dim(), host.sizes());
    target->set_indices_and_values_unsafe(aliases_.toDevice(source->indices(), *device_),
                                          aliases_.toDevice(source->values(), *device_));
    target->set_coalesced(source->coalesced());
  }

  const c10::OperatorHandle& op_;
  const bool is_copy_; // the schema name is compared once per call, not once per argument
  std::optional<c10::Device> device_;
  HostAliasSet aliases_;
  SmallPointerMap<c10::TensorImpl, at::Tensor> device_of_host_;
  SmallPointerMap<c10::TensorImpl, at::Tensor> host_of_device_;
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;
};

} // namespace

void runBoxedOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  const size_t arguments_begin = stack->size() - num_arguments;
  HostCall call(op);
  call.checkArguments(stack, arguments_begin);
  call.moveArgumentsToHost(stack, arguments_begin);
  if (call.isCopy()) {
    at::Tensor destination = (*stack)[arguments_begin + 1].toTensor();
    destination.copy_((*stack)[arguments_begin].toTensor());
    torch::jit::drop(*stack, num_arguments);
    torch::jit::push(*stack, destination);
  } else {
    checkIntegerDivisionOverflow(op, *stack, arguments_begin);
    HostKernelAllocationScope allocations_from_the_device;
    op.callBoxed(stack);
  }
  call.writeBackWrittenArguments();
  const size_t num_returns = op.schema().returns().size();
  call.moveResultsToDevice(stack, stack->size() - num_returns);
}

} // namespace torchneuron

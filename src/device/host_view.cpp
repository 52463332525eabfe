#include "device/host_view.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/intrusive_ptr.h>
#include <c10/util/strides.h>

#include <cstring>

#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/runtime_ops.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

void dropStorageReference(void* context) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(context));
}

// What the host's access to a device storage's bytes waits for: the window may write them, or
// read what the host is about to write; and the storage's memory exists.
void prepareHostAccess(const c10::Storage& device_storage) {
  tracer::beforeHostAccess(device_storage);
  materializeStorage(device_storage);
}

// A CPU storage over the bytes of a device storage that holds a reference to it. It is
// resizable through the CPU allocator: a CPU kernel that grows an out= tensor gets fresh host
// memory, and writeBack() moves the result to the device.
c10::Storage makeHostStorage(const c10::Storage& device_storage) {
  prepareHostAccess(device_storage);
  c10::StorageImpl* impl = device_storage.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(impl);
  c10::DataPtr ptr(device_storage.data_ptr().get(), impl, &dropStorageReference,
                   c10::Device(c10::kCPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), device_storage.nbytes(), std::move(ptr),
                      c10::GetCPUAllocator(), /*resizable=*/true);
}

at::Tensor viewOver(const c10::Storage& storage, const at::Tensor& like, c10::DispatchKeySet keys) {
  at::Tensor view =
      at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage), keys, like.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                    like.storage_offset());
  if (like.is_conj()) view._set_conj(true);
  if (like.is_neg()) view._set_neg(true);
  return view;
}

const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
const c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

} // namespace

at::Tensor hostView(const at::Tensor& device_tensor) {
  TORCH_INTERNAL_ASSERT(device_tensor.device().type() == kNeuronDeviceType);
  return viewOver(makeHostStorage(device_tensor.storage()), device_tensor, kCpuKeys);
}

char* hostAddressOf(const at::Tensor& device_tensor) {
  TORCH_INTERNAL_ASSERT(device_tensor.device().type() == kNeuronDeviceType);
  const c10::Storage& storage = device_tensor.storage();
  prepareHostAccess(storage);
  return static_cast<char*>(storage.data_ptr().get()) +
         device_tensor.storage_offset() * static_cast<int64_t>(device_tensor.itemsize());
}

at::Tensor HostAliasSet::toHost(const at::Tensor& device_tensor) {
  const c10::Storage& device_storage = device_tensor.storage();
  const c10::Storage* host = host_storage_of_.find(device_storage.unsafeGetStorageImpl());
  if (host == nullptr) {
    c10::Storage made = makeHostStorage(device_storage);
    device_storage_of_.emplace(made.unsafeGetStorageImpl(), device_storage);
    host = &host_storage_of_.emplace(device_storage.unsafeGetStorageImpl(), std::move(made));
  }
  return viewOver(*host, device_tensor, kCpuKeys);
}

at::Tensor HostAliasSet::toDevice(const at::Tensor& host, c10::Device device) const {
  const c10::Storage* alias = device_storage_of_.find(host.storage().unsafeGetStorageImpl());
  const bool still_aliases = alias != nullptr && host.storage().data() == alias->data();
  if (still_aliases) return viewOver(*alias, host, kDeviceKeys);
  return copyHostToNewDeviceTensor(host, device);
}

void HostAliasSet::writeBack(const at::Tensor& host, const at::Tensor& device_tensor) const {
  c10::TensorImpl* device_impl = device_tensor.unsafeGetTensorImpl();
  const bool same_bytes = host.storage().data() == device_tensor.storage().data() &&
                          host.storage().nbytes() <= device_tensor.storage().nbytes();
  if (same_bytes) {
    if (host.sizes() != device_tensor.sizes() || host.strides() != device_tensor.strides() ||
        host.storage_offset() != device_tensor.storage_offset()) {
      device_impl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
    }
    return;
  }
  // The CPU kernel re-allocated the tensor (an out= argument of the wrong size): move the new
  // bytes into a fresh device storage with the same layout.
  const size_t nbytes = host.storage().nbytes();
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, neuronAllocator()->allocate(nbytes),
                       neuronAllocator(), /*resizable=*/true);
  if (nbytes > 0) std::memcpy(storage.data(), host.storage().data(), nbytes);
  device_impl->set_storage_keep_dtype(std::move(storage));
  device_impl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
}

at::Tensor copyHostToNewDeviceTensor(const at::Tensor& host, c10::Device device) {
  TORCH_INTERNAL_ASSERT(device.type() == kNeuronDeviceType);
  if (host._is_zerotensor()) {
    return at::_efficientzerotensor(host.sizes(), host.options().device(device));
  }
  if (host.is_non_overlapping_and_dense() && !host.is_conj() && !host.is_neg()) {
    at::Tensor result = newDeviceTensor(host.sizes(), host.strides(), host.scalar_type());
    // Dense with non-negative strides: the bytes are one span starting at data_ptr().
    const size_t nbytes = static_cast<size_t>(host.numel()) * host.element_size();
    if (nbytes > 0) std::memcpy(result.data_ptr(), host.data_ptr(), nbytes);
    return result;
  }
  at::Tensor result =
      newDeviceTensor(host.sizes(), c10::contiguous_strides(host.sizes()), host.scalar_type());
  hostView(result).copy_(host);
  return result;
}

} // namespace torchneuron

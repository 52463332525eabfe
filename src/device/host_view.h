#pragma once
// Host views: CPU tensors that alias device memory, so ATen's CPU kernels can read and write
// device tensors in place (device memory is host memory on this target).

#include <ATen/Tensor.h>

#include "device/small_pointer_map.h"

namespace torchneuron {

// A CPU tensor with the sizes, strides, offset, conj/neg bits of `device_tensor`, over the
// same bytes. The device storage is materialized first and kept alive by the view.
at::Tensor hostView(const at::Tensor& device_tensor);

// The address of `device_tensor`'s first element for the host to read or write directly, after
// what hostView() does first (the adaptive tracer's window runs before the host touches the
// bytes, and the storage is materialized). Valid while the caller holds the tensor.
char* hostAddressOf(const at::Tensor& device_tensor);

// Maps the device storages of one op call to host storages, one per device storage, so views
// that overlap on the device also overlap on the host (ATen's overlap checks stay correct),
// and maps host results back to device tensors.
class HostAliasSet {
public:
  at::Tensor toHost(const at::Tensor& device_tensor);

  // The device tensor for a host result: an alias of a device storage when `host` lives in
  // one of this set's host storages, otherwise a new device tensor holding a copy.
  at::Tensor toDevice(const at::Tensor& host, c10::Device device) const;

  // After a CPU kernel wrote `host` (the view of `device_tensor`): if it resized or re-pointed
  // the tensor, apply the same to the device tensor.
  void writeBack(const at::Tensor& host, const at::Tensor& device_tensor) const;

private:
  // Host storage impl -> device storage it aliases.
  SmallPointerMap<c10::StorageImpl, c10::Storage> device_storage_of_;
  // Device storage impl -> its host alias.
  SmallPointerMap<c10::StorageImpl, c10::Storage> host_storage_of_;
};

// A new device tensor with the same values, sizes and (when dense) strides as a CPU tensor.
at::Tensor copyHostToNewDeviceTensor(const at::Tensor& host, c10::Device device);

} // namespace torchneuron

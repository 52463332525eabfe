#pragma once
// Host views: CPU tensors that alias device memory, so ATen's CPU kernels can read and write
// device tensors in place (device memory is host memory on this target).

#include <ATen/Tensor.h>

#include "device/small_pointer_map.h"

namespace torchneuron {

// A CPU tensor with the sizes, strides, offset, conj/neg bits of `device_tensor`, over the
// same bytes. The device storage is materialized first and kept alive by the view.
at::Tensor hostView(const at::Tensor& device_tensor);

// hostView() for the length of one kernel call that keeps no reference to its arguments (an out=
// kernel called directly): the same view, but its TensorImpl and StorageImpl come from a small
// per-thread pool instead of two heap allocations, which is most of a tiny library op's cost
// above stock's. Leaving the scope drops the view's reference to the device storage; a view that
// something still holds then (the kernel kept it after all) stays valid and leaves the pool.
class ScopedHostView {
public:
  explicit ScopedHostView(const at::Tensor& device_tensor);
  ~ScopedHostView();
  ScopedHostView(const ScopedHostView&) = delete;
  ScopedHostView& operator=(const ScopedHostView&) = delete;

  at::Tensor& tensor() { return view_; }

private:
  at::Tensor view_;
  c10::StorageImpl* device_storage_ = nullptr; // the viewed storage, not referenced while in scope
};

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

  // Gives `device_tensor`'s storage, for this call, host memory that is a copy of its bytes with
  // room after them for the tensor's elements as one contiguous run from its offset, instead of
  // an alias: every view of the storage in the call shares it, and writeBack() returns its first
  // bytes to the device storage. For a written tensor whose run would pass its storage's end
  // (mayWritePastStorage): some of ATen's CPU kernels write an out= argument as if it were
  // contiguous whatever its strides (1.13's _softmax.out into an expanded tensor), which on the
  // CPU corrupts the heap and here would overwrite other device tensors. Call it before toHost()
  // of any view of the same storage.
  void giveWriteRoom(const at::Tensor& device_tensor);

  // The device tensor for a host result: an alias of a device storage when `host` lives in
  // one of this set's host storages, otherwise a new device tensor holding a copy.
  at::Tensor toDevice(const at::Tensor& host, c10::Device device) const;

  // After a CPU kernel wrote `host` (the view of `device_tensor`): if it resized or re-pointed
  // the tensor, apply the same to the device tensor.
  void writeBack(const at::Tensor& host, const at::Tensor& device_tensor) const;

private:
  // Host storage impl -> device storage it aliases (or, for write room, stands in for).
  SmallPointerMap<c10::StorageImpl, c10::Storage> device_storage_of_;
  // Host storages that are copies with write room (giveWriteRoom), by host storage impl.
  SmallPointerMap<c10::StorageImpl, bool> with_write_room_;
  // Device storage impl -> its host alias.
  SmallPointerMap<c10::StorageImpl, c10::Storage> host_storage_of_;
};

// Whether writing `t`'s elements as one contiguous run from its storage offset would pass the end
// of its storage (an expanded or otherwise overlapping tensor has fewer bytes than elements).
bool mayWritePastStorage(const at::Tensor& t);

// A new device tensor with the same values, sizes and (when dense) strides as a CPU tensor.
at::Tensor copyHostToNewDeviceTensor(const at::Tensor& host, c10::Device device);

} // namespace torchneuron

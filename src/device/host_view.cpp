#include "device/host_view.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/intrusive_ptr.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/list_launch.h"
#include "device/runtime_ops.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

void dropStorageReference(void* context) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(context));
}

// What the host's access to a device storage's bytes waits for: pending list launches and the
// window may write them, or read what the host is about to write; and the storage's memory exists.
void prepareHostAccess(const c10::Storage& device_storage) {
  runPendingListLaunches();
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

// Gives `view` the sizes, strides, offset and conj/neg bits of `like`.
void copyLayout(c10::TensorImpl* view, const at::Tensor& like) {
  view->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  view->_set_conj(like.is_conj());
  view->_set_neg(like.is_neg());
}

at::Tensor viewOver(const c10::Storage& storage, const at::Tensor& like, c10::DispatchKeySet keys) {
  at::Tensor view =
      at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage), keys, like.dtype());
  copyLayout(view.unsafeGetTensorImpl(), like);
  return view;
}

const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
const c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

// Free ScopedHostView shells of this thread: CPU tensors whose own storage holds no memory.
// Each is referenced by this list alone (checked when it returns).
constexpr size_t kPooledShells = 16;
thread_local std::vector<at::Tensor> free_shells;

at::Tensor newShell(caffe2::TypeMeta dtype) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, c10::kCPU),
                       c10::GetCPUAllocator(), /*resizable=*/true);
  return at::detail::make_tensor<c10::TensorImpl>(std::move(storage), kCpuKeys, dtype);
}

// Whether nothing but `shell` itself references its TensorImpl and StorageImpl.
bool onlyHeldHere(const at::Tensor& shell) {
  const c10::TensorImpl* impl = shell.unsafeGetTensorImpl();
  return shell.use_count() == 1 && shell.weak_use_count() == 1 && impl->storage().use_count() == 1;
}

} // namespace

ScopedHostView::ScopedHostView(const at::Tensor& device_tensor) {
  TORCH_INTERNAL_ASSERT(device_tensor.device().type() == kNeuronDeviceType);
  const c10::Storage& device_storage = device_tensor.storage();
  prepareHostAccess(device_storage);
  // A shell is an inference tensor or not by the mode it was made in (its keys, its version
  // counter): one made under torch.inference_mode() serves only calls in that mode, where an
  // in-place write to it (addmm copying self into its result) is allowed.
  const bool inference = c10::InferenceMode::is_enabled();
  if (!free_shells.empty() &&
      free_shells.back().unsafeGetTensorImpl()->is_inference() == inference) {
    view_ = std::move(free_shells.back());
    free_shells.pop_back();
  } else {
    view_ = newShell(device_tensor.dtype());
  }
  c10::TensorImpl* impl = view_.unsafeGetTensorImpl();
  if (impl->dtype() != device_tensor.dtype())
    impl->set_storage_and_dtype(impl->storage(), device_tensor.dtype());
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  // No reference to the device storage while in scope: the caller holds the device tensor.
  device_storage_ = device_storage.unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(device_storage.data_ptr().get(), c10::kCPU));
  storage->set_nbytes(device_storage.nbytes());
  copyLayout(impl, device_tensor);
}

ScopedHostView::~ScopedHostView() {
  c10::StorageImpl* storage = view_.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
  if (!onlyHeldHere(view_)) {
    // Kept: it lives on as a normal view, holding the device storage as hostView()'s do (unless
    // the kernel re-pointed it at memory of its own).
    if (storage->data() == device_storage_->data()) {
      c10::raw::intrusive_ptr::incref(device_storage_);
      storage->set_data_ptr_noswap(c10::DataPtr(storage->data(), device_storage_,
                                                &dropStorageReference, c10::Device(c10::kCPU)));
    }
    return;
  }
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::kCPU));
  storage->set_nbytes(0);
  if (free_shells.size() < kPooledShells) free_shells.push_back(std::move(view_));
}

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

bool mayWritePastStorage(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return false;
  const auto end = (static_cast<uint64_t>(t.storage_offset()) + static_cast<uint64_t>(t.numel())) *
                   static_cast<uint64_t>(t.itemsize());
  return end > t.storage().nbytes();
}

void HostAliasSet::giveWriteRoom(const at::Tensor& device_tensor) {
  const c10::Storage& device_storage = device_tensor.storage();
  if (host_storage_of_.find(device_storage.unsafeGetStorageImpl()) != nullptr) return;
  prepareHostAccess(device_storage);
  const size_t nbytes = device_storage.nbytes();
  const size_t room = (device_tensor.storage_offset() + device_tensor.numel()) *
                      static_cast<size_t>(device_tensor.itemsize());
  c10::Storage scratch(c10::Storage::use_byte_size_t(), std::max(nbytes, room),
                       c10::GetCPUAllocator(), /*resizable=*/true);
  if (nbytes > 0) std::memcpy(scratch.data(), device_storage.data(), nbytes);
  with_write_room_.emplace(scratch.unsafeGetStorageImpl(), true);
  device_storage_of_.emplace(scratch.unsafeGetStorageImpl(), device_storage);
  host_storage_of_.emplace(device_storage.unsafeGetStorageImpl(), std::move(scratch));
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
  const c10::Storage* stood_in = device_storage_of_.find(host.storage().unsafeGetStorageImpl());
  if (with_write_room_.find(host.storage().unsafeGetStorageImpl()) != nullptr &&
      stood_in != nullptr &&
      stood_in->unsafeGetStorageImpl() == device_tensor.storage().unsafeGetStorageImpl()) {
    // Write room (giveWriteRoom): the storage's own bytes go back; what a kernel wrote past them
    // is dropped. Written once per storage, however many arguments view it.
    const c10::Storage& device_storage = *stood_in;
    const size_t nbytes = device_storage.nbytes();
    if (nbytes > 0 && host.storage().nbytes() >= nbytes)
      std::memcpy(device_storage.data(), host.storage().data(), nbytes);
    if (host.sizes() != device_tensor.sizes() || host.strides() != device_tensor.strides() ||
        host.storage_offset() != device_tensor.storage_offset())
      device_impl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
    return;
  }
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
  // bytes to device memory with the same layout.
  const size_t nbytes = host.storage().nbytes();
  c10::DataPtr bytes = neuronAllocator()->allocate(nbytes);
  if (nbytes > 0) std::memcpy(bytes.get(), host.storage().data(), nbytes);
  const c10::Storage* aliased = device_storage_of_.find(host.storage().unsafeGetStorageImpl());
  c10::StorageImpl* device_storage = device_tensor.storage().unsafeGetStorageImpl();
  if (aliased != nullptr && aliased->unsafeGetStorageImpl() == device_storage) {
    // It grew the storage it was given (ATen's resize_ of an out= argument grows the storage in
    // place): grow the device storage in place too, so that the tensor's other views (a larger
    // tensor it is a slice of, its own slices) see the result, as they do on the CPU.
    device_storage->set_data_ptr_noswap(std::move(bytes));
    device_storage->set_nbytes(nbytes);
  } else {
    device_impl->set_storage_keep_dtype(c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                                     std::move(bytes), neuronAllocator(),
                                                     /*resizable=*/true));
  }
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

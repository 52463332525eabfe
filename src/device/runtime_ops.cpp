// Ops every device implements itself and that must never fall back: allocation, copies,
// resizing, storage swaps and scalar reads (op_routing.cpp registers them, with ATen's
// device-generic views). Thin wrappers; the work is in the allocator, the host views and ATen's
// device-generic implementations.

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>

#include "device/runtime_ops.h"

#include <cstring>

#include "device/caching_allocator.h"
#include "device/compiled_ops.h"
#include "device/copy_plan.h"
#include "device/device.h"
#include "device/host_view.h"
#include "device/interim_launch.h"
#include "device/list_launch.h"
#include "device/metrics.h"
#include "tracer/tracer.h"
#include "tracer/unbacked_results.h"

namespace torchneuron {
namespace {

const c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

void checkFactoryOptions(c10::optional<at::Layout> layout, c10::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "[device] the neuron device holds strided tensors only, got layout ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false),
              "[device] pin_memory applies to CPU tensors only, not to neuron tensors");
}

} // namespace

at::Tensor newDeviceTensor(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::detail::empty_generic(sizes, neuronAllocator(), kDeviceKeys, dtype, c10::nullopt);
}

at::Tensor newDeviceTensor(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype) {
  return at::detail::empty_strided_generic(sizes, strides, neuronAllocator(), kDeviceKeys, dtype);
}

at::Tensor newUnbackedDeviceTensor(at::IntArrayRef sizes, c10::optional<at::IntArrayRef> strides,
                                   at::ScalarType dtype) {
  return tracer::newUnbackedTensor(sizes, strides, dtype, kDeviceKeys,
                                   c10::Device(kNeuronDeviceType, 0), neuronAllocator());
}

at::Tensor emptyMemoryFormat(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                             c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                             c10::optional<bool> pin_memory,
                             c10::optional<at::MemoryFormat> memory_format) {
  resolveNeuronDevice(device);
  checkFactoryOptions(layout, pin_memory);
  return at::detail::empty_generic(size, neuronAllocator(), kDeviceKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        c10::optional<at::ScalarType> dtype, c10::optional<at::Layout> layout,
                        c10::optional<at::Device> device, c10::optional<bool> pin_memory) {
  resolveNeuronDevice(device);
  checkFactoryOptions(layout, pin_memory);
  return newDeviceTensor(size, stride, c10::dtype_or_default(dtype));
}

// A tensor of zeros that owns no memory (autograd uses them for zero gradients). As on the
// CPU, the ZeroTensor key materializes it for ops that do not special-case it.
at::Tensor efficientZeroTensor(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                               c10::optional<bool> pin_memory) {
  const c10::Device target = resolveNeuronDevice(device);
  checkFactoryOptions(layout, pin_memory);
  at::native::ZeroTensorAllocator allocator(target);
  const c10::DispatchKeySet keys = kDeviceKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype),
                                   c10::nullopt);
}

namespace {

// A host-addressable CPU tensor for either side of a copy.
at::Tensor hostSide(const at::Tensor& tensor, const char* role) {
  if (tensor.device().type() == kNeuronDeviceType) return hostView(tensor);
  TORCH_CHECK(tensor.is_cpu(), "[device] cannot copy between the neuron device and ",
              tensor.device().str(), " (", role, "); go through the CPU");
  return tensor;
}

} // namespace

// Copies between CPU and device, or within the device: both sides are host memory, so ATen's
// CPU copy does it (dtype conversion, strides, broadcasting, overlap) with no staging buffer.
// Device-to-device copies run as compiled kernels; transfers to and from the CPU (and copies
// the kernels do not cover) copy between host views. Copies between views of one device
// storage run ATen's CPU copy on host views that share one host storage too: the same overlap
// checks (ATen's "some elements of the input tensor and the written-to tensor refer to a single
// memory location" where views partially overlap), the same early exit for a view copied onto
// itself, and the same results otherwise.
namespace {

// A plain tensor whose elements fill one span of memory from its first element (dense, no
// overlaps, no math bits): its bytes are numel * itemsize from its first element's address.
bool isOneSpan(const at::Tensor& t) {
  return t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() && !t._is_zerotensor() &&
         t.is_non_overlapping_and_dense();
}

// A copy between the CPU and the device of tensors with one dtype and one layout: the bytes,
// moved as they lie. False (nothing done) for anything else.
bool copyBytesAcrossHost(const at::Tensor& src, const at::Tensor& dst) {
  const bool src_on_device = src.device().type() == kNeuronDeviceType;
  const bool dst_on_device = dst.device().type() == kNeuronDeviceType;
  const bool cpu_and_device = src_on_device ? dst.device().is_cpu() : src.device().is_cpu();
  if (!cpu_and_device || src.scalar_type() != dst.scalar_type() || src.sizes() != dst.sizes() ||
      src.strides() != dst.strides() || !isOneSpan(src) || !isOneSpan(dst))
    return false;
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.itemsize();
  if (nbytes == 0) return true;
  char* to = dst_on_device ? hostAddressOf(dst) : static_cast<char*>(dst.data_ptr());
  const char* from = src_on_device ? hostAddressOf(src) : static_cast<const char*>(src.data_ptr());
  std::memmove(to, from, nbytes); // a host view of a device tensor may overlap it
  return true;
}

} // namespace

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.device().type() != kNeuronDeviceType || dst.device().type() != kNeuronDeviceType) {
    tracer::sync(tracer::SyncCause::kCopy);
    if (copyBytesAcrossHost(self, dst)) return dst;
  }
  if (isAtenBlockedTranspose(self, dst)) { // ATen's tiled transpose, on host views
    hostSide(dst, "destination").copy_(hostSide(self, "source"));
    recordLaunch(LaunchKind::kLibrary, "aten::copy_");
    return dst;
  }
  {
    InterimLaunchScope scope; // a copy kernel still compiling: the host copy below meanwhile
    if (copyWithCompiledKernel(self, dst)) return dst;
    if (scope.requested()) recordLaunch(LaunchKind::kInterim, "aten::copy_");
  }
  if (self.device().type() == kNeuronDeviceType && dst.device().type() == kNeuronDeviceType &&
      self.is_alias_of(dst)) {
    HostAliasSet aliases;
    aliases.toHost(dst).copy_(aliases.toHost(self));
    return dst;
  }
  hostSide(dst, "destination").copy_(hostSide(self, "source"));
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copyFrom(self, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, at::IntArrayRef size,
                         c10::optional<at::MemoryFormat> memory_format) {
  // Growing moves the bytes to a new block: recorded launches hold the old block's address.
  tracer::sync(tracer::SyncCause::kResize);
  runPendingListLaunches();
  materializeStorage(self.storage());
  return at::native::resize_(self, size, memory_format);
}

namespace {

void checkStorageOnDevice(const at::Storage& source) {
  TORCH_CHECK(source.device().type() == kNeuronDeviceType,
              "[device] set_ expects a neuron storage, got a storage on ", source.device().str());
}

} // namespace

at::Tensor& setStorage(at::Tensor& self, at::Storage source, int64_t storage_offset,
                       at::IntArrayRef size, at::IntArrayRef stride) {
  checkStorageOnDevice(source);
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& setWholeStorage(at::Tensor& self, at::Storage source) {
  checkStorageOnDevice(source);
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return at::native::set_storage_cpu_(self, std::move(source), 0, {numel}, {});
}

at::Tensor& setEmpty(at::Tensor& self) {
  at::Storage empty(at::Storage::use_byte_size_t(), 0, neuronAllocator(), /*resizable=*/true);
  return at::native::set_storage_cpu_(self, std::move(empty), 0, {0}, {});
}

at::Scalar localScalarDense(const at::Tensor& self) {
  tracer::sync(tracer::SyncCause::kItem);
  return at::native::_local_scalar_dense_cpu(hostView(self));
}

at::Tensor& zeroSparse(at::Tensor& self) {
  // zero_sparse_ itself goes through zeros.out, whose kernel for sparse tensors is the CPU's.
  at::native::sparse_resize_and_clear_(self, self.sizes(), self.dim(), 0);
  return at::native::_coalesced_sparse_(self, true);
}

} // namespace torchneuron

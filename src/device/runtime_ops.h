#pragma once
// Runtime ops: what every device implements itself and never sends to the fallback (allocation,
// copies, resizing, storage swaps, scalar reads). op_routing.cpp registers them by schema name.

#include <ATen/core/Tensor.h>

namespace torchneuron {

// A new device tensor from the caching allocator, contiguous or with `strides`: what empty() and
// empty_strided() do on the device, without the dispatcher's round trip (most of a tiny op's
// cost). Device 0, the only one.
at::Tensor newDeviceTensor(at::IntArrayRef sizes, at::ScalarType dtype);
at::Tensor newDeviceTensor(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype);
// The same with an address but no memory yet (tracer/unbacked_results.h): a result of a call
// recorded into a window that runs fused. Contiguous when `strides` is not given.
at::Tensor newUnbackedDeviceTensor(at::IntArrayRef sizes, c10::optional<at::IntArrayRef> strides,
                                   at::ScalarType dtype);

// empty.memory_format, empty_strided and _efficientzerotensor on the device.
at::Tensor emptyMemoryFormat(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                             c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                             c10::optional<bool> pin_memory,
                             c10::optional<at::MemoryFormat> memory_format);
at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        c10::optional<at::ScalarType> dtype, c10::optional<at::Layout> layout,
                        c10::optional<at::Device> device, c10::optional<bool> pin_memory);
at::Tensor efficientZeroTensor(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                               c10::optional<bool> pin_memory);

// _copy_from and _copy_from_and_resize: CPU <-> device and device <-> device.
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst);

// resize_, the three set_ overloads that take a storage or nothing, and _local_scalar_dense.
const at::Tensor& resize(const at::Tensor& self, at::IntArrayRef size,
                         c10::optional<at::MemoryFormat> memory_format);
at::Tensor& setStorage(at::Tensor& self, at::Storage source, int64_t storage_offset,
                       at::IntArrayRef size, at::IntArrayRef stride);
at::Tensor& setWholeStorage(at::Tensor& self, at::Storage source);
at::Tensor& setEmpty(at::Tensor& self);
at::Scalar localScalarDense(const at::Tensor& self);

// zero_ of a sparse COO tensor, as ATen's zero_sparse_ does it on the CPU: no entries, every
// dimension sparse, marked coalesced (new indices and values allocated on the tensor's device).
at::Tensor& zeroSparse(at::Tensor& self);

} // namespace torchneuron

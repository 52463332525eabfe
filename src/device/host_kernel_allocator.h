#pragma once
// CPU memory for ATen's CPU kernels while they run for the device (library and fallback ops on
// host views): their results and scratch buffers come from the device's caching allocator
// instead of the C library. A fresh large block from the C library is fresh pages, each faulted
// in on first touch (about 12 us a 4 KiB page here): a resnet18 training step's library kernels
// (convolution backward, batch norm, pooling) faulted 10,000 pages a step, a quarter of the step.
// Cached blocks are faulted in once. A result allocated so is already device memory: the host
// call hands its block to the device tensor instead of copying it (adoptHostResult).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace torchneuron {

// While one is alive on a thread, the CPU allocations of that thread come from the device's
// caching allocator (as CPU DataPtrs over device blocks). Scopes nest. Other threads, and this
// one outside every scope, allocate as before.
class HostKernelAllocationScope {
public:
  HostKernelAllocationScope();
  ~HostKernelAllocationScope();
  HostKernelAllocationScope(const HostKernelAllocationScope&) = delete;
  HostKernelAllocationScope& operator=(const HostKernelAllocationScope&) = delete;
};

// A device tensor over `host`'s memory when that memory is a device block that nothing but
// `host` holds (a fresh result of a CPU kernel run in a scope): the block moves to a new device
// storage and `host` is left without storage. Otherwise an undefined tensor (copy instead).
at::Tensor adoptHostResult(const at::Tensor& host, c10::Device device);

} // namespace torchneuron

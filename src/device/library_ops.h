#pragma once
// Library kernels: ops the device runs by calling ATen's optimized CPU implementations (OpenBLAS,
// oneDNN, ATen's random engines) directly on device memory, counted as "library" in metrics().
// op_routing.cpp registers them; each runs every call it gets (ATen's errors included).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "device/host_execution.h" // runLibraryKernelOnHost: the generic library kernel

namespace torchneuron {

// A dense (strided) tensor on the device: an operand the direct library kernels below take
// (mm's family, nll_loss); any other operand sends the call to runLibraryKernelOnHost.
bool isDenseDeviceTensor(const at::Tensor& t);

// mm, addmm, bmm and baddbmm: the result allocated on the device and written by ATen's out=
// kernel through a host view (library_matmul.cpp); other calls take runLibraryKernelOnHost.
void runLibraryMm(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void runLibraryAddmm(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void runLibraryBmm(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void runLibraryBaddbmm(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// nll_loss_forward and nll_loss_backward (1-D and 2-D input): the results allocated on the device
// and written by ATen's out= kernels through host views (library_nll_loss.cpp); other calls take
// runLibraryKernelOnHost.
void runLibraryNllLossForward(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void runLibraryNllLossBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// bernoulli_.float (dropout's mask) on contiguous float32/float64 tensors: the CPU generator's
// numbers drawn in bulk, the mask equal to the CPU kernel's bit for bit (library_random.cpp);
// other calls take runLibraryKernelOnHost.
void runLibraryBernoulliScalar(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// uniform_ (torch.rand, nn.init's uniform initializers) likewise.
void runLibraryUniform(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A _foreach_* op: runLibraryKernelOnHost, except inside a deferred window of adaptive mode,
// where ATen's loop over the lists runs on the device tensors, so that each element op is
// recorded and each parameter's chain of updates fuses (library_foreach.cpp).
void runLibraryForeach(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A call of convolution_overrideable (convolution_backward_overrideable) as a call of
// convolution (convolution_backward): the stack rewritten in place, and that op.
const c10::OperatorHandle& convolutionCallOfOverrideable(torch::jit::Stack* stack);
const c10::OperatorHandle& convolutionBackwardCallOfOverrideable(torch::jit::Stack* stack);

} // namespace torchneuron

// nll_loss_forward and nll_loss_backward (cross-entropy's last step, in 12 of 22 training
// scripts tried) as library kernels that write straight into device memory: the results are
// allocated on the device and filled by ATen's loops run on device memory (nll_loss_loops.h) or,
// for the calls those do not take, by ATen's out= CPU kernels through pooled host views. The
// generic library path maps every argument and result between the device and the host (new
// tensors and storages both ways), which made a 32-element loss 1.4x stock's time. Calls this
// path does not describe (other ranks, operands off the device) take the generic path, where
// ATen raises its own errors.

#include <ATen/ATen.h>
#include <ATen/ops/nll_loss_backward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_forward_cpu_dispatch.h>

#include "device/host_kernel_allocator.h"
#include "device/host_view.h"
#include "device/library_ops.h"
#include "device/metrics.h"
#include "device/nll_loss_loops.h"
#include "device/runtime_ops.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

// The operands ATen's 1-D and 2-D kernel takes: input and target on the device, an optional
// weight on the device too. Anything else (nll_loss2d's ranks, mixed devices) is the generic
// path's, which raises ATen's errors as the CPU does.
bool plainOperands(const at::Tensor& self, const at::Tensor& target,
                   const c10::optional<at::Tensor>& weight) {
  return isDenseDeviceTensor(self) && isDenseDeviceTensor(target) &&
         self.device() == target.device() && (self.dim() == 1 || self.dim() == 2) &&
         (!weight || !weight->defined() ||
          (isDenseDeviceTensor(*weight) && weight->device() == self.device()));
}

// A host view of the optional weight, alive while it is.
class OptionalHostView {
public:
  explicit OptionalHostView(const c10::optional<at::Tensor>& weight) {
    if (weight && weight->defined()) view_.emplace(*weight);
  }
  c10::optional<at::Tensor> tensor() {
    if (!view_) return c10::nullopt;
    return view_->tensor();
  }

private:
  c10::optional<ScopedHostView> view_;
};

// The backward's other operands as ATen's meta function accepts them, for the loops
// (nll_loss_loops.h): of self's dtype, a gradient per row without reduction or one element with
// it, one total weight.
bool gradientOperandsFit(const at::Tensor& grad_output, const at::Tensor& total_weight,
                         const at::Tensor& self, int64_t reduction) {
  if (grad_output.scalar_type() != self.scalar_type() ||
      total_weight.scalar_type() != self.scalar_type() || total_weight.numel() != 1)
    return false;
  if (reduction == at::Reduction::None)
    return grad_output.dim() == 1 && grad_output.size(0) == self.size(0);
  return grad_output.dim() <= 1 && grad_output.numel() == 1;
}

} // namespace

void runLibraryNllLossForward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 5; // self, target, weight, reduction, ignore_index
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, kArguments);
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& target = args[1].toTensor();
  const c10::optional<at::Tensor> weight = args[2].toOptional<at::Tensor>();
  if (!plainOperands(self, target, weight)) return runLibraryKernelOnHost(op, stack);
  const int64_t reduction = args[3].toInt();
  const int64_t ignore_index = args[4].toInt();
  // In a window it runs at its place, after the recorded launches it reads (as the generic path).
  tracer::EagerLibraryStep step;
  // The sizes ATen's meta function gives them: a loss per row without reduction, else one.
  at::Tensor output = reduction == at::Reduction::None && self.dim() == 2
                          ? newDeviceTensor({self.size(0)}, self.scalar_type())
                          : newDeviceTensor({}, self.scalar_type());
  at::Tensor total_weight = newDeviceTensor({}, self.scalar_type());
  if (nllLossLoopsTake(self, target, weight)) {
    nllLossForwardLoops(output, total_weight, self, target, weight, reduction, ignore_index);
  } else {
    HostKernelAllocationScope allocations_from_the_device;
    OptionalHostView host_weight(weight);
    at::cpu::nll_loss_forward_out(ScopedHostView(output).tensor(),
                                  ScopedHostView(total_weight).tensor(),
                                  ScopedHostView(self).tensor(), ScopedHostView(target).tensor(),
                                  host_weight.tensor(), reduction, ignore_index);
  }
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kLibrary, "aten::nll_loss_forward");
  recordLaunch(launches);
  torch::jit::drop(*stack, kArguments);
  torch::jit::push(*stack, std::move(output), std::move(total_weight));
}

void runLibraryNllLossBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // grad_output, self, target, weight, reduction, ignore_index, total_weight
  constexpr size_t kArguments = 7;
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, kArguments);
  const at::Tensor& grad_output = args[0].toTensor();
  const at::Tensor& self = args[1].toTensor();
  const at::Tensor& target = args[2].toTensor();
  const c10::optional<at::Tensor> weight = args[3].toOptional<at::Tensor>();
  const at::Tensor& total_weight = args[6].toTensor();
  if (!plainOperands(self, target, weight) || !isDenseDeviceTensor(grad_output) ||
      !isDenseDeviceTensor(total_weight) || grad_output.device() != self.device() ||
      total_weight.device() != self.device())
    return runLibraryKernelOnHost(op, stack);
  const int64_t reduction = args[4].toInt();
  const int64_t ignore_index = args[5].toInt();
  tracer::EagerLibraryStep step;
  // ATen's meta function: contiguous, the input's sizes; its kernel zeroes it first.
  at::Tensor grad_input = newDeviceTensor(self.sizes(), self.scalar_type());
  if (nllLossLoopsTake(self, target, weight) &&
      gradientOperandsFit(grad_output, total_weight, self, reduction)) {
    nllLossBackwardLoops(grad_input, grad_output, self, target, weight, reduction, ignore_index,
                         total_weight);
  } else {
    HostKernelAllocationScope allocations_from_the_device;
    OptionalHostView host_weight(weight);
    at::cpu::nll_loss_backward_out(
        ScopedHostView(grad_input).tensor(), ScopedHostView(grad_output).tensor(),
        ScopedHostView(self).tensor(), ScopedHostView(target).tensor(), host_weight.tensor(),
        reduction, ignore_index, ScopedHostView(total_weight).tensor());
  }
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kLibrary, "aten::nll_loss_backward");
  recordLaunch(launches);
  torch::jit::drop(*stack, kArguments);
  torch::jit::push(*stack, std::move(grad_input));
}

} // namespace torchneuron

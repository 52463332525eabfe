#pragma once
// nll_loss's forward and backward for the common case (a [batch, classes] float or double input,
// int64 targets, an optional weight per class) as the loops of ATen 1.13's CPU kernels
// (LossNLL.cpp), run on device memory directly: the same arithmetic in the same order, so the
// same bits, without the structured kernel's meta function, output checks and host views around
// them (most of a 32-element loss's cost above stock's; issue 15). A target out of range raises
// ATen's IndexError, "Target 9 is out of bounds.".

#include <ATen/Tensor.h>
#include <c10/util/Optional.h>

namespace torchneuron {

// Whether the loops below take this call: `self` 2-D, float or double, with at least one row;
// `target` 1-D int64 with one element per row; `weight` undefined or 1-D of self's dtype with one
// element per class. Other calls (1-D inputs, byte targets, any shape ATen refuses) run ATen's
// kernel, which raises its own errors.
bool nllLossLoopsTake(const at::Tensor& self, const at::Tensor& target,
                      const c10::optional<at::Tensor>& weight);

// Writes the loss (a [batch] tensor without reduction, else a 0-d one) and the total weight
// (0-d) into `output` and `total_weight`, new contiguous device tensors.
void nllLossForwardLoops(const at::Tensor& output, const at::Tensor& total_weight,
                         const at::Tensor& self, const at::Tensor& target,
                         const c10::optional<at::Tensor>& weight, int64_t reduction,
                         int64_t ignore_index);

// Writes the input's gradient into `grad_input`, a new contiguous device tensor of self's sizes.
// `grad_output` and `total_weight` are device tensors of self's dtype, [batch] and 0-d or 0-d.
void nllLossBackwardLoops(const at::Tensor& grad_input, const at::Tensor& grad_output,
                          const at::Tensor& self, const at::Tensor& target,
                          const c10::optional<at::Tensor>& weight, int64_t reduction,
                          int64_t ignore_index, const at::Tensor& total_weight);

} // namespace torchneuron

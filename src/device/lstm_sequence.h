#pragma once
// One direction of an LSTM layer over a whole sequence as one autograd node, its cells fused
// (recurrent_layers.h runs the layers and calls this for each direction it covers).
//
// Op by op, every time step of an LSTM cell is about ten elementwise launches forward and twenty
// backward, each with its autograd node, and the hidden weights' gradient is a product and an
// accumulation per step. Here a direction is one node: forward, per step, the hidden projection
// (ATen's linear: one BLAS call, direct_gemm.h) and one compiled kernel for the rest of the cell;
// backward, per step, one compiled kernel for the cell's gradients and one product for the
// previous hidden state's, then the hidden weights' and bias's gradients over the whole sequence
// at once (one product, one sum), as cuDNN's LSTM does. The cell kernels are fused elementwise
// kernels (fusion/fused_kernel.h) of the registry's ops in ATen's CPU cell's order (gates =
// (h W_hh^T + b_hh) + x W_ih^T + b_ih; c = f * c_prev + i * g; h = o * tanh(c)), so results
// round as the op-by-op cell's do; the gradients differ from it only in the order the hidden
// weights' per-step products are summed. Backward recomputes the gate activations from the saved
// pre-activations instead of saving them.
//
// Not covered (the caller runs the cell op by op): projections, dtypes other than float and
// double, parameters of another dtype or device, a cell kernel that failed to compile, one still
// compiling in the background while interim launches are on (it is queued; a later call takes
// it), dual tensors (forward-mode AD: 1.13's C++ functions have no jvp), and NEURON_FUSED_LSTM=0.
// The node has no double backward: a backward pass with create_graph=True through it raises an
// error that names NEURON_FUSED_LSTM=0, under which the op-by-op cell gives one. Gradients
// without storage (batched: is_grads_batched, vectorized jacobians) take the same backward
// written with ATen ops.

#include <ATen/core/Tensor.h>

#include <tuple>

#include "c10/util/Optional.h"

namespace torchneuron {

// The direction's outputs: every step's hidden state in time order [T, B, H], and the final
// hidden and cell states [B, H]. `projected`: the input projection of every step with b_ih,
// [T, B, 4H]; `h0`, `c0`: [B, H]; `w_hh`: [4H, H]; `b_hh`: [4H] or undefined. `reversed`: the
// last step first. Nullopt when the call is not covered (above), with nothing computed.
c10::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>>
fusedLstmDirection(const at::Tensor& projected, const at::Tensor& h0, const at::Tensor& c0,
                   const at::Tensor& w_hh, const at::Tensor& b_hh, bool reversed);

// NEURON_FUSED_LSTM (default on), unless setFusedLstm() overrode it for the process.
bool fusedLstmEnabled();
void setFusedLstm(bool enabled);

} // namespace torchneuron

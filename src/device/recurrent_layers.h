#pragma once
// Recurrent layers on the device: lstm, gru, rnn_tanh and rnn_relu over a padded sequence (the
// ops nn.LSTM, nn.GRU and nn.RNN call), run the way ATen runs them on the CPU. ATen computes a
// layer's input projection for the whole sequence in one linear, leaving only the hidden
// projection to each time step, but only for CPU tensors (its FullLayer tests is_cpu()); on any
// other device every step ran both projections: 2T addmm launches a layer instead of T + 1.
//
// These are autograd-key kernels (op_routing.cpp registers them at AutogradPrivateUse1): like the
// composite kernels they replace, they decompose into differentiable ATen ops, whose autograd
// records the graph, and the ops, cells and numerics are ATen's CPU ones. A call they do not
// cover (tensors on several devices, a parameter list or hidden state of the wrong shape, an
// empty sequence) runs ATen's own composite, which raises ATen's errors. Packed sequences (the
// .data overloads) stay composite.

#include <ATen/core/Tensor.h>

#include <tuple>

namespace torchneuron {

std::tuple<at::Tensor, at::Tensor, at::Tensor>
deviceLstm(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
           int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first);

std::tuple<at::Tensor, at::Tensor> deviceGru(const at::Tensor& input, const at::Tensor& hx,
                                             at::TensorList params, bool has_biases,
                                             int64_t num_layers, double dropout, bool train,
                                             bool bidirectional, bool batch_first);

std::tuple<at::Tensor, at::Tensor> deviceRnnTanh(const at::Tensor& input, const at::Tensor& hx,
                                                 at::TensorList params, bool has_biases,
                                                 int64_t num_layers, double dropout, bool train,
                                                 bool bidirectional, bool batch_first);

std::tuple<at::Tensor, at::Tensor> deviceRnnRelu(const at::Tensor& input, const at::Tensor& hx,
                                                 at::TensorList params, bool has_biases,
                                                 int64_t num_layers, double dropout, bool train,
                                                 bool bidirectional, bool batch_first);

} // namespace torchneuron

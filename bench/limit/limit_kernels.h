#pragma once
// The physical limit of the bench workloads (docs/benchmarks.md, "The limit"): each workload's
// step computed as one hand-fused C++ loop, compiled with -O3 -march=native -ffast-math and
// glibc's vector math (libmvec), its intermediates never leaving registers, its output buffers
// reused. What this machine can do for the computation at best; the workload cells are measured
// against it. A C interface: the micro benchmarks call it, and tests/bench/test_limit_kernels.py
// checks it through ctypes against the workloads' own steps run by PyTorch.
//
// Every function splits its outer range across `threads` threads (worker_team.h), in parts of
// at least 32768 elements (ATen's grain size), so small inputs run on the caller alone.

#include <cstdint>

extern "C" {

// sum[i] += gelu(x[i]) for i < n: bench/workloads.py's tanh_gelu (0.5 x (1 + tanh(0.7978845608
// (x + 0.044715 x^3)))) folded into the accumulator (gelu-tanh-*).
void neuron_limit_gelu_tanh_accumulate(const float* x, float* sum, int64_t n, int threads);

// out = layer_norm(x + r) * weight + bias over rows of `cols` elements, biased variance, `eps`
// under the square root (layernorm-residual). `out` may not overlap x or r.
void neuron_limit_layer_norm_residual(const float* x, const float* r, const float* weight,
                                      const float* bias, float* out, int64_t rows, int64_t cols,
                                      float eps, int threads);

// out = softmax(x) over rows of `cols` elements (softmax). `out` may not overlap x.
void neuron_limit_softmax(const float* x, float* out, int64_t rows, int64_t cols, int threads);

// out[p, i, j] = the largest of the 2x2 window at (2 i, 2 j) of plane p (height x width, the
// planes contiguous; windows past an odd edge dropped, as max_pool2d's floor mode), and
// indices[p, i, j] its place in the plane (row * width + column): the first of equal maxima, as
// max_pool2d_with_indices (under -ffast-math a NaN's place is not ATen's; the bench's inputs have
// none).
void neuron_limit_max_pool2x2(const float* x, float* out, int64_t* indices, int64_t planes,
                              int64_t height, int64_t width, int threads);

// Batch norm in training over x of shape [n, channels, plane] (contiguous): per channel the mean
// and biased variance (sums in double, as ATen's), invstd = 1 / sqrt(var + eps), and
// out = (x - mean) * invstd * weight + bias; `mean` and `invstd` receive the channel's statistics.
void neuron_limit_batch_norm(const float* x, const float* weight, const float* bias, float* out,
                             float* mean, float* invstd, int64_t n, int64_t channels,
                             int64_t plane, float eps, int threads);

// Its backward: per channel sum(dy) and sum(dy * xhat) (xhat = (x - mean) * invstd, sums in
// double) into grad_bias and grad_weight, and dx = invstd * weight * (dy - sum(dy) / N - xhat *
// sum(dy * xhat) / N), N = n * plane.
void neuron_limit_batch_norm_backward(const float* dy, const float* x, const float* mean,
                                      const float* invstd, const float* weight, float* dx,
                                      float* grad_weight, float* grad_bias, int64_t n,
                                      int64_t channels, int64_t plane, int threads);

// sum += the MLP of inference-gelu-mlp on x (batch x width): `layers` Linear layers of width x
// width (weights[l] row-major out x in, as nn.Linear keeps them; biases[l]), tanh_gelu after
// each but the last. The matmuls are OpenBLAS's sgemm (what PyTorch's mm calls here), the bias
// and GELU one fused pass over each hidden result. `hidden` holds 2 * batch * width floats.
void neuron_limit_gelu_mlp(const float* x, const float* const* weights, const float* const* biases,
                           int64_t layers, int64_t batch, int64_t width, float* hidden, float* sum,
                           int threads);

// varlen-loop's step for one length: h = x @ w (x rows x width, w width x width row-major, as
// the workload's `x @ w`; OpenBLAS's sgemm into `hidden`, rows * width floats), then one pass
// over h: y[r] = sum_j (tanh_gelu(h[r, j]) + b[j]), and *sum += the sum of y.
void neuron_limit_varlen_step(const float* x, const float* w, const float* b, float* hidden,
                              float* y, float* sum, int64_t rows, int64_t width, int threads);
}

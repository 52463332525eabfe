// Compiled with -O3 -march=native -ffast-math (bench/CMakeLists.txt, this file alone): the loops
// below vectorize, tanhf and expf become glibc's vector variants (_ZGVdN8v_tanhf on AVX2; the
// simd declarations of <math.h>'s bits/math-vector.h apply under __FAST_MATH__), and sums are
// reassociated into vector lanes. The library is linked without -ffast-math, so loading it does
// not set flush-to-zero for the process (crtfastmath.o).

#include "limit_kernels.h"

#include <math.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker_team.h"

// OpenBLAS's CBLAS entry and thread control. Debian's libopenblas0-pthread (the BLAS PyTorch's mm
// calls here) ships no header; the CBLAS ABI is the reference one (101 row major, 111 no
// transpose, 112 transpose; 32-bit integers in the LP64 build).
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void openblas_set_num_threads(int threads);
int openblas_get_num_threads();
}

namespace {

using torchneuron::bench::parallelFor;

// Elements per part at least (ATen's GRAIN_SIZE): below it a second thread costs more than it
// saves.
constexpr int64_t kGrain = 32768;

int64_t rowGrain(int64_t cols) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)); }

// bench/workloads.py's tanh_gelu, the same nine operations in the same order.
inline float tanhGelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

void geluAccumulate(const float* __restrict x, float* __restrict sum, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    sum[i] += tanhGelu(x[i]);
}

// One row: the residual sum is written to `out` (the row stays in L1 for the next two passes),
// then normalized there.
void layerNormRow(const float* __restrict x, const float* __restrict r,
                  const float* __restrict weight, const float* __restrict bias,
                  float* __restrict out, int64_t cols, float eps) {
  float total = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float v = x[j] + r[j];
    out[j] = v;
    total += v;
  }
  const float mean = total / static_cast<float>(cols);
  float squares = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float d = out[j] - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(squares / static_cast<float>(cols) + eps);
  for (int64_t j = 0; j < cols; ++j)
    out[j] = (out[j] - mean) * rstd * weight[j] + bias[j];
}

void softmaxRow(const float* __restrict x, float* __restrict out, int64_t cols) {
  float top = x[0];
  for (int64_t j = 1; j < cols; ++j)
    top = std::max(top, x[j]);
  float total = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float e = expf(x[j] - top);
    out[j] = e;
    total += e;
  }
  const float scale = 1.0f / total;
  for (int64_t j = 0; j < cols; ++j)
    out[j] *= scale;
}

// h = tanh_gelu(h + bias) over `rows` rows of `cols`, in place.
void biasGelu(float* __restrict h, const float* __restrict bias, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict row = h + i * cols;
    for (int64_t j = 0; j < cols; ++j)
      row[j] = tanhGelu(row[j] + bias[j]);
  }
}

// sum += h + bias over `rows` rows of `cols`.
void biasAccumulate(const float* __restrict h, const float* __restrict bias, float* __restrict sum,
                    int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      sum[i * cols + j] += h[i * cols + j] + bias[j];
}

// y = x @ w^T (`transposed`, w out x in as nn.Linear keeps it) or x @ w (w in x out), for x
// (rows x width), w (width x width), y (rows x width).
void product(const float* x, const float* w, float* y, int64_t rows, int64_t width,
             bool transposed) {
  const int m = static_cast<int>(rows), n = static_cast<int>(width);
  cblas_sgemm(101, 111, transposed ? 112 : 111, m, n, n, 1.0f, x, n, w, n, 0.0f, y, n);
}

// y[i] = sum_j (gelu(h[i, j]) + bias[j]) over `rows` rows of `cols`.
void geluBiasRowSums(const float* __restrict h, const float* __restrict bias, float* __restrict y,
                     int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict row = h + i * cols;
    float total = 0.0f;
    for (int64_t j = 0; j < cols; ++j)
      total += tanhGelu(row[j]) + bias[j];
    y[i] = total;
  }
}

// One row of 2x2 windows: `top` is the window row's first input row, `first` its place in the
// plane. Conditional expressions, not branches: they vectorize (stride-2 loads split by
// shuffles), where random data would mispredict branches half the time.
void maxPoolRow(const float* __restrict top, int64_t width, int64_t first, int64_t out_w,
                float* __restrict out, int64_t* __restrict indices) {
  const float* __restrict bottom = top + width;
  for (int64_t j = 0; j < out_w; ++j) {
    const int64_t at = first + 2 * j;
    float best = top[2 * j];
    int64_t best_at = at;
    const float b = top[2 * j + 1], c = bottom[2 * j], d = bottom[2 * j + 1];
    best_at = b > best ? at + 1 : best_at;
    best = b > best ? b : best;
    best_at = c > best ? at + width : best_at;
    best = c > best ? c : best;
    best_at = d > best ? at + width + 1 : best_at;
    best = d > best ? d : best;
    out[j] = best;
    indices[j] = best_at;
  }
}

} // namespace

extern "C" {

void neuron_limit_gelu_tanh_accumulate(const float* x, float* sum, int64_t n, int threads) {
  parallelFor(n, kGrain, threads,
              [&](int64_t begin, int64_t end) { geluAccumulate(x, sum, begin, end); });
}

void neuron_limit_layer_norm_residual(const float* x, const float* r, const float* weight,
                                      const float* bias, float* out, int64_t rows, int64_t cols,
                                      float eps, int threads) {
  parallelFor(rows, rowGrain(cols), threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      layerNormRow(x + i * cols, r + i * cols, weight, bias, out + i * cols, cols, eps);
  });
}

void neuron_limit_softmax(const float* x, float* out, int64_t rows, int64_t cols, int threads) {
  parallelFor(rows, rowGrain(cols), threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      softmaxRow(x + i * cols, out + i * cols, cols);
  });
}

void neuron_limit_max_pool2x2(const float* x, float* out, int64_t* indices, int64_t planes,
                              int64_t height, int64_t width, int threads) {
  const int64_t out_h = height / 2, out_w = width / 2, rows = planes * out_h;
  parallelFor(rows, rowGrain(out_w * 4), threads, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t plane = row / out_h, first = 2 * (row % out_h) * width;
      maxPoolRow(x + plane * height * width + first, width, first, out_w, out + row * out_w,
                 indices + row * out_w);
    }
  });
}

void neuron_limit_batch_norm(const float* x, const float* weight, const float* bias, float* out,
                             float* mean, float* invstd, int64_t n, int64_t channels, int64_t plane,
                             float eps, int threads) {
  const int64_t stride = channels * plane, count = n * plane;
  parallelFor(channels, rowGrain(count), threads, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float* row = x + i * stride + c * plane;
        for (int64_t j = 0; j < plane; ++j)
          total += row[j];
      }
      const double mu = total / static_cast<double>(count);
      double squares = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float* row = x + i * stride + c * plane;
        for (int64_t j = 0; j < plane; ++j) {
          const double d = row[j] - mu;
          squares += d * d;
        }
      }
      const float m = static_cast<float>(mu);
      const float r = static_cast<float>(1.0 / sqrt(squares / static_cast<double>(count) + eps));
      mean[c] = m;
      invstd[c] = r;
      const float scale = r * weight[c], shift = bias[c];
      for (int64_t i = 0; i < n; ++i) {
        const float* row = x + i * stride + c * plane;
        float* y = out + i * stride + c * plane;
        for (int64_t j = 0; j < plane; ++j)
          y[j] = (row[j] - m) * scale + shift;
      }
    }
  });
}

void neuron_limit_batch_norm_backward(const float* dy, const float* x, const float* mean,
                                      const float* invstd, const float* weight, float* dx,
                                      float* grad_weight, float* grad_bias, int64_t n,
                                      int64_t channels, int64_t plane, int threads) {
  const int64_t stride = channels * plane, count = n * plane;
  parallelFor(channels, rowGrain(count), threads, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const float m = mean[c], r = invstd[c];
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float *g = dy + i * stride + c * plane, *row = x + i * stride + c * plane;
        for (int64_t j = 0; j < plane; ++j) {
          sum_dy += g[j];
          sum_dy_xhat += static_cast<double>(g[j]) * ((row[j] - m) * r);
        }
      }
      grad_bias[c] = static_cast<float>(sum_dy);
      grad_weight[c] = static_cast<float>(sum_dy_xhat);
      const float mean_dy = static_cast<float>(sum_dy / static_cast<double>(count));
      const float mean_dy_xhat = static_cast<float>(sum_dy_xhat / static_cast<double>(count));
      const float scale = r * weight[c];
      for (int64_t i = 0; i < n; ++i) {
        const float *g = dy + i * stride + c * plane, *row = x + i * stride + c * plane;
        float* out = dx + i * stride + c * plane;
        for (int64_t j = 0; j < plane; ++j)
          out[j] = scale * (g[j] - mean_dy - (row[j] - m) * r * mean_dy_xhat);
      }
    }
  });
}

void neuron_limit_gelu_mlp(const float* x, const float* const* weights, const float* const* biases,
                           int64_t layers, int64_t batch, int64_t width, float* hidden, float* sum,
                           int threads) {
  // The rows of a batch are independent through every layer: each thread takes its own rows
  // through the whole MLP, with OpenBLAS on the calling thread (no barrier between layers).
  if (layers < 1)
    throw std::invalid_argument("[bench] the MLP needs at least 1 layer, got " +
                                std::to_string(layers));
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  parallelFor(batch, rowGrain(width), threads, [&](int64_t begin, int64_t end) {
    const int64_t rows = end - begin, offset = begin * width;
    const float* in = x + offset;
    float* buffers[2] = {hidden + offset, hidden + batch * width + offset};
    for (int64_t l = 0; l + 1 < layers; ++l) {
      float* h = buffers[l % 2];
      product(in, weights[l], h, rows, width, /*transposed=*/true);
      biasGelu(h, biases[l], rows, width);
      in = h;
    }
    float* last = buffers[(layers - 1) % 2];
    product(in, weights[layers - 1], last, rows, width, /*transposed=*/true);
    biasAccumulate(last, biases[layers - 1], sum + offset, rows, width);
  });
}

void neuron_limit_varlen_step(const float* x, const float* w, const float* b, float* hidden,
                              float* y, float* sum, int64_t rows, int64_t width, int threads) {
  // As the MLP: each thread takes its own rows through the product and the pass, with OpenBLAS
  // on the calling thread.
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  parallelFor(rows, rowGrain(width), threads, [&](int64_t begin, int64_t end) {
    const int64_t offset = begin * width;
    product(x + offset, w, hidden + offset, end - begin, width, /*transposed=*/false);
    geluBiasRowSums(hidden + offset, b, y + begin, end - begin, width);
  });
  float total = 0.0f;
  for (int64_t i = 0; i < rows; ++i)
    total += y[i];
  *sum += total;
}
}

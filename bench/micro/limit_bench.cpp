// The limit column of make bench (docs/benchmarks.md, "The limit"): each workload's step as one
// hand-fused loop (bench/limit/limit_kernels.h) at 1 and 2 threads, interleaved with the other
// micro benchmarks (the triad among them). Named BM_Limit/<workload>/threads:<t>; the shapes are
// those of bench/workloads.py (tests/bench/test_limit_kernels.py checks the names).

#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "limit/limit_kernels.h"
#include "micro/huge_page_buffer.h"

namespace {

HugePageVector<float> normal(int64_t n, float scale, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> draw(0.0f, scale);
  HugePageVector<float> v(n);
  for (float& x : v)
    x = draw(generator);
  return v;
}

// One limit benchmark: `step(threads)` runs one step of the workload; `bytes` is the workload's
// bytes_per_step (0: none).
struct LimitCase {
  std::string workload;
  int64_t bytes;
  std::function<std::function<void(int)>()> prepare; // allocates the state, returns the step
  // Timed steps per repetition, a multiple of a cycle of steps that differ (0: the benchmark
  // library's choice).
  int64_t iterations = 0;
};

// gelu-tanh-*: sum += tanh_gelu(x); the accumulator is read and written every step.
LimitCase geluCase(const std::string& label, int64_t n) {
  return {"gelu-tanh-" + label, 12 * n, [n] {
            auto x = std::make_shared<HugePageVector<float>>(normal(n, 1.0f, 1));
            auto sum = std::make_shared<HugePageVector<float>>(n, 0.0f);
            return std::function<void(int)>([=](int threads) {
              neuron_limit_gelu_tanh_accumulate(x->data(), sum->data(), n, threads);
              benchmark::DoNotOptimize(sum->data());
            });
          }};
}

// layernorm-residual: x = layer_norm(x + r) * w + b, 32 x 128 rows of 768, fed forward (two
// buffers take turns as input and output).
LimitCase layerNormCase() {
  const int64_t rows = 32 * 128, cols = 768;
  return {"layernorm-residual", 12 * rows * cols, [=] {
            auto x = std::make_shared<HugePageVector<float>>(normal(rows * cols, 1.0f, 1));
            auto r = std::make_shared<HugePageVector<float>>(normal(rows * cols, 1.0f, 2));
            auto w = std::make_shared<HugePageVector<float>>(normal(cols, 1.0f, 3));
            auto b = std::make_shared<HugePageVector<float>>(normal(cols, 1.0f, 4));
            auto out = std::make_shared<HugePageVector<float>>(rows * cols);
            return std::function<void(int)>([=](int threads) {
              neuron_limit_layer_norm_residual(x->data(), r->data(), w->data(), b->data(),
                                               out->data(), rows, cols, 1e-5f, threads);
              std::swap(*x, *out);
              benchmark::DoNotOptimize(x->data());
            });
          }};
}

// softmax: x = softmax(x, -1) over 8 x 12 x 128 rows of 128, fed forward like layer norm.
LimitCase softmaxCase() {
  const int64_t rows = 8 * 12 * 128, cols = 128;
  return {"softmax", 8 * rows * cols, [=] {
            auto x = std::make_shared<HugePageVector<float>>(normal(rows * cols, 1.0f, 1));
            auto out = std::make_shared<HugePageVector<float>>(rows * cols);
            return std::function<void(int)>([=](int threads) {
              neuron_limit_softmax(x->data(), out->data(), rows, cols, threads);
              std::swap(*x, *out);
              benchmark::DoNotOptimize(x->data());
            });
          }};
}

// inference-gelu-mlp: sum += mlp(x), 3 layers of 1024 x 1024, batch 64.
LimitCase mlpCase() {
  const int64_t layers = 3, batch = 64, width = 1024;
  return {"inference-gelu-mlp", 0, [=] {
            struct State {
              std::vector<HugePageVector<float>> weights, biases;
              std::vector<const float*> weight_pointers, bias_pointers;
              HugePageVector<float> x, hidden, sum;
            };
            auto s = std::make_shared<State>();
            for (int64_t l = 0; l < layers; ++l) {
              s->weights.push_back(normal(width * width, 0.03f, 10 + l));
              s->biases.push_back(normal(width, 0.03f, 20 + l));
              s->weight_pointers.push_back(s->weights.back().data());
              s->bias_pointers.push_back(s->biases.back().data());
            }
            s->x = normal(batch * width, 1.0f, 1);
            s->hidden.resize(2 * batch * width);
            s->sum.assign(batch * width, 0.0f);
            return std::function<void(int)>([=](int threads) {
              neuron_limit_gelu_mlp(s->x.data(), s->weight_pointers.data(), s->bias_pointers.data(),
                                    layers, batch, width, s->hidden.data(), s->sum.data(), threads);
              benchmark::DoNotOptimize(s->sum.data());
            });
          }};
}

// varlen-loop: 4 x length x 256 @ 256 x 256, then sum(tanh_gelu(h) + b, -1) added into a sum, the
// lengths 16, 32, ..., 320 in turn (a step per length, as the workload's).
LimitCase varlenCase() {
  const int64_t batch = 4, width = 256;
  std::vector<int64_t> lengths;
  for (int64_t t = 16; t < 336; t += 16)
    lengths.push_back(t);
  const int64_t cycle = static_cast<int64_t>(lengths.size());
  return {"varlen-loop", 0,
          [=] {
            struct State {
              std::vector<HugePageVector<float>> xs;
              HugePageVector<float> w, b, hidden, y, sum;
              size_t next = 0;
            };
            auto s = std::make_shared<State>();
            for (size_t i = 0; i < lengths.size(); ++i)
              s->xs.push_back(normal(batch * lengths[i] * width, 1.0f, 30 + i));
            s->w = normal(width * width, 0.05f, 2);
            s->b = normal(width, 1.0f, 3);
            s->hidden.resize(batch * lengths.back() * width);
            s->y.resize(batch * lengths.back());
            s->sum.assign(1, 0.0f);
            return std::function<void(int)>([=](int threads) {
              const size_t i = s->next;
              s->next = (i + 1) % lengths.size();
              neuron_limit_varlen_step(s->xs[i].data(), s->w.data(), s->b.data(), s->hidden.data(),
                                       s->y.data(), s->sum.data(), batch * lengths[i], width,
                                       threads);
              benchmark::DoNotOptimize(s->sum.data());
            });
          },
          10 * cycle};
}

void runLimit(benchmark::State& state, const LimitCase& c) {
  const std::function<void(int)> step = c.prepare();
  const int threads = static_cast<int>(state.range(0));
  step(threads); // first touch of the output buffers, outside the timing
  for (auto _ : state)
    step(threads);
  if (c.bytes) state.SetBytesProcessed(state.iterations() * c.bytes);
}

const bool registered = [] {
  for (const LimitCase& c :
       {geluCase("1K", 1 << 10), geluCase("64K", 1 << 16), geluCase("1M", 1 << 20),
        geluCase("16M", 1 << 24), layerNormCase(), softmaxCase(), mlpCase(), varlenCase()}) {
    benchmark::internal::Benchmark* b =
        benchmark::RegisterBenchmark(("BM_Limit/" + c.workload).c_str(),
                                     [c](benchmark::State& state) { runLimit(state, c); })
            ->ArgName("threads")
            ->Arg(1)
            ->Arg(2)
            ->UseRealTime();
    if (c.iterations > 0) b->Iterations(c.iterations);
  }
  return true;
}();

} // namespace

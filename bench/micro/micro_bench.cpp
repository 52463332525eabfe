// Micro benchmarks (Google Benchmark): per-op dispatch on the device against stock CPU, kernel
// launch overhead without the dispatcher, 64 MB alloc/free (reused and fresh), and a STREAM-style
// triad that gives this machine's memory bandwidth. bench/run_bench.py runs it with
// --benchmark_format=json.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cstring>
#include <thread>
#include <vector>

#include "cache/executable_container.h"
#include "cache/kernel_cache.h"
#include "device/caching_allocator.h"
#include "device/device.h"
#include "fusion/compiler.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"
#include "launcher/kernel_abi.h"
#include "launcher/object_loader.h"
#include "launcher/parallel_launch.h"
#include "micro/huge_page_buffer.h"
#include "target/target.h"

namespace {

at::Device deviceFor(int64_t on_neuron) {
  return on_neuron ? at::Device(torchneuron::kNeuronDeviceType, 0) : at::Device(at::kCPU);
}

// at::add(a, b) of `n` floats through the dispatcher into a reused output; args: 0 = CPU or
// 1 = neuron, the size, the intra-op threads.
void BM_DispatchAdd(benchmark::State& state) {
  at::set_num_threads(static_cast<int>(state.range(2)));
  const int64_t n = state.range(1);
  const auto options = at::TensorOptions().device(deviceFor(state.range(0)));
  const at::Tensor a = at::ones({n}, options), b = at::ones({n}, options);
  at::Tensor out = at::empty({n}, options);
  for (auto _ : state) {
    at::add_out(out, a, b);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_DispatchAdd)
    ->ArgNames({"neuron", "n", "threads"})
    ->Args({0, 8, 1})
    ->Args({1, 8, 1})
    ->Args({0, 16 << 20, 1})
    ->Args({1, 16 << 20, 1})
    ->Args({0, 16 << 20, 2})
    ->Args({1, 16 << 20, 2})
    ->UseRealTime();

// The compiled add kernel called through the launcher alone (no dispatcher, no allocation).
void BM_KernelLaunch(benchmark::State& state) {
  using namespace torchneuron;
  const int64_t n = state.range(0);
  fusion::ElementwiseSignature s;
  s.op = fusion::findElementwiseOp("add");
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.inner.assign(3, fusion::InnerStride::kContiguous);
  const KernelHandle kernel = kernelFor(s.key(), [&] { return fusion::buildElementwiseKernel(s); });
  HugePageVector<float> a(n, 1.0f), b(n, 2.0f), out(n); // as device blocks of this size are
  KernelArguments arguments;
  const int64_t unit = 1;
  for (float* data : {out.data(), a.data(), b.data()})
    arguments.memref(data, &n, &unit, 1);
  arguments.word(floatSlot(1.0)); // alpha
  const LaunchShape shape{n, 1, static_cast<int>(state.range(1))};
  for (auto _ : state) {
    launchKernel(kernel->function, arguments.slots(), shape);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_KernelLaunch)
    ->ArgNames({"n", "threads"})
    ->Args({8, 1})
    ->Args({16 << 20, 1})
    ->Args({16 << 20, 2})
    ->UseRealTime();

// Allocate 64 MB, touch it (a fill), free it; the caching allocator keeps the block.
void BM_Alloc64MB(benchmark::State& state) {
  at::set_num_threads(1);
  const auto options = at::TensorOptions().device(deviceFor(state.range(0)));
  for (auto _ : state) {
    at::Tensor t = at::empty({16 << 20}, options);
    t.fill_(1);
    benchmark::DoNotOptimize(t.data_ptr());
  }
}
BENCHMARK(BM_Alloc64MB)
    ->ArgNames({"neuron"})
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The same on a device block the allocator must get from the OS: its cache is emptied before
// each iteration (outside the timing), so the fill faults the fresh block in: in huge pages
// unless NEURON_HUGE_PAGES=0 (device/huge_page_memory.h). Stock's BM_Alloc64MB above is fresh
// memory every iteration too (the C library maps a block this large anew each time).
void BM_FreshAlloc64MB(benchmark::State& state) {
  at::set_num_threads(1);
  const auto options = at::TensorOptions().device(deviceFor(1));
  for (auto _ : state) {
    state.PauseTiming();
    torchneuron::emptyAllocatorCache();
    state.ResumeTiming();
    at::Tensor t = at::empty({16 << 20}, options);
    t.fill_(1);
    benchmark::DoNotOptimize(t.data_ptr());
  }
}
BENCHMARK(BM_FreshAlloc64MB)->UseRealTime()->Unit(benchmark::kMillisecond);

// a[i] = b[i] + s * c[i] over three 16M-float arrays, split across `threads` std::threads;
// 12 bytes per element (STREAM's triad counting).
void BM_StreamTriad(benchmark::State& state) {
  const int64_t n = 16 << 20;
  const int threads = static_cast<int>(state.range(0));
  HugePageVector<float> a(n), b(n, 1.0f), c(n, 2.0f); // on the pages device memory has
  const float s = 3.0f;
  auto run = [&](int64_t begin, int64_t end) {
    float* __restrict out = a.data();
    const float* __restrict x = b.data();
    const float* __restrict y = c.data();
    for (int64_t i = begin; i < end; ++i)
      out[i] = x[i] + s * y[i];
  };
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t)
      workers.emplace_back(run, n * t / threads, n * (t + 1) / threads);
    run(0, n / threads);
    for (std::thread& w : workers)
      w.join();
    benchmark::DoNotOptimize(a.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_StreamTriad)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime();

// Loading one cached executable the way the persistent tier does once it has the bytes: parse
// the container (checksum), verify it against this process, link its object with ORC. Each
// iteration loads a distinct object (the same kernel under another symbol), prepared up front.
void BM_CacheLoad(benchmark::State& state) {
  using namespace torchneuron;
  fusion::ElementwiseSignature s;
  s.op = fusion::findElementwiseOp("mul");
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.inner.assign(3, fusion::InnerStride::kContiguous);
  const std::string mlir = fusion::buildElementwiseKernel(s);
  const TargetDescription& target = deviceTarget().description();
  std::vector<std::vector<char>> containers;
  static int generation = 0; // Google Benchmark may run this function more than once
  ++generation;
  for (int64_t i = 0; i < state.max_iterations; ++i) {
    const std::string symbol = "bench_load_" + std::to_string(generation) + "_" + std::to_string(i);
    const fusion::ObjectCode object = fusion::compileKernel(mlir, symbol);
    ExecutableContainer c{kEngineVersion,
                          target.llvm_version,
                          target.triple,
                          target.cpu,
                          target.features,
                          "bench",
                          mlir,
                          {{symbol, "slots-v1"}},
                          object.bytes,
                          Program{},
                          {},
                          {}};
    containers.push_back(c.serialize());
  }
  const LoadRequirements wanted{
      kEngineVersion, target.llvm_version, target.triple, target.features, "bench", mlir};
  size_t next = 0;
  std::vector<std::shared_ptr<LoadedCode>> loaded; // unlinked after the timing, not inside it
  for (auto _ : state) {
    std::optional<ExecutableContainer> c = parseContainer(containers[next++], nullptr);
    if (!c || !verifyContainer(*c, wanted).empty()) state.SkipWithError("container rejected");
    loaded.push_back(loadKernelObject(c->object, c->kernels[0].symbol));
  }
}
BENCHMARK(BM_CacheLoad)->Iterations(40)->UseRealTime()->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();

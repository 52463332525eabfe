// The kernel cache's memory tier under a small cap (ctest sets NEURON_CACHE_MEMORY_MAX_BYTES to
// a few kernels' worth and NEURON_CACHE=0): least recently used kernels are evicted and
// unlinked, a kernel a caller still holds stays callable after its eviction, and threads
// launching kernels while others evict them always compute the right numbers.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"

namespace torchneuron {
namespace {

struct BinaryCase {
  const char* op;
  std::function<float(float, float)> reference;
};

const std::vector<BinaryCase>& cases() {
  static const std::vector<BinaryCase> all = {
      {"add", [](float a, float b) { return a + b; }},
      {"sub", [](float a, float b) { return a - b; }},
      {"mul", [](float a, float b) { return a * b; }},
      {"maximum", [](float a, float b) { return std::max(a, b); }},
      {"minimum", [](float a, float b) { return std::min(a, b); }},
      {"hypot", [](float a, float b) { return std::hypot(a, b); }},
  };
  return all;
}

fusion::ElementwiseSignature signatureOf(const char* op) {
  fusion::ElementwiseSignature s;
  s.op = fusion::findElementwiseOp(op);
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.inner.assign(3, fusion::InnerStride::kContiguous);
  return s;
}

KernelHandle kernelOf(const fusion::ElementwiseSignature& s) {
  return kernelFor(s.key(), [&] { return fusion::buildElementwiseKernel(s); });
}

// Runs `kernel` (case `c`) over 64 elements; true when every element matches the reference.
bool computesCorrectly(const KernelHandle& kernel, const BinaryCase& c,
                       const fusion::ElementwiseSignature& s) {
  const int64_t n = 64;
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) a[i] = 0.25f * i - 3.0f, b[i] = 2.0f - 0.5f * i;
  std::vector<int64_t> slots;
  for (float* data : {out.data(), a.data(), b.data()}) {
    const auto address = reinterpret_cast<int64_t>(data);
    slots.insert(slots.end(), {address, address, 0, n, 1});
  }
  while (static_cast<int>(slots.size()) < fusion::kernelArgumentSlots(s)) {  // alpha = 1
    const double one = 1.0;
    int64_t bits;
    std::memcpy(&bits, &one, sizeof bits);
    slots.push_back(bits);
  }
  kernel->function(slots.data(), 0, n);
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(out[i] - c.reference(a[i], b[i])) > 1e-5f * (1 + std::fabs(out[i]))) return false;
  return true;
}

class MemoryTier : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* cap = std::getenv("NEURON_CACHE_MEMORY_MAX_BYTES");
    if (cap == nullptr) GTEST_SKIP() << "run through ctest, which sets a small memory cap";
    ASSERT_EQ(memoryTierCapacity(), std::atoll(cap));
  }
};

TEST_F(MemoryTier, AnEvictedKernelStaysCallableWhileHeld) {
  const fusion::ElementwiseSignature held_signature = signatureOf("add");
  const KernelHandle held = kernelOf(held_signature);
  ASSERT_NE(held->function, nullptr);
  const int64_t evictions_before = kernelCacheStats().memory_evictions;
  for (size_t i = 1; i < cases().size(); ++i) {  // more than the cap holds: "add" goes first
    const fusion::ElementwiseSignature s = signatureOf(cases()[i].op);
    ASSERT_TRUE(computesCorrectly(kernelOf(s), cases()[i], s)) << cases()[i].op;
  }
  const KernelCacheStats after = kernelCacheStats();
  EXPECT_GT(after.memory_evictions, evictions_before);
  EXPECT_TRUE(after.memory_bytes <= memoryTierCapacity() || after.entries == 1)
      << after.memory_bytes << " bytes in " << after.entries << " kernels";
  EXPECT_TRUE(computesCorrectly(held, cases()[0], held_signature));  // evicted, still mapped
  const int64_t misses_before = kernelCacheStats().misses;
  const KernelHandle again = kernelOf(held_signature);  // back through a compile
  EXPECT_EQ(kernelCacheStats().misses, misses_before + 1);
  EXPECT_TRUE(computesCorrectly(again, cases()[0], held_signature));
}

TEST_F(MemoryTier, ThreadsLaunchingWhileOthersEvictAlwaysComputeRightly) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 60; ++i) {
        const BinaryCase& c = cases()[(t * 7 + i) % cases().size()];
        const fusion::ElementwiseSignature s = signatureOf(c.op);
        if (!computesCorrectly(kernelOf(s), c, s)) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_GT(stats.memory_evictions, 0);
  EXPECT_TRUE(stats.memory_bytes <= memoryTierCapacity() || stats.entries == 1);
  EXPECT_EQ(stats.compile_failures, 0);
}

}  // namespace
}  // namespace torchneuron

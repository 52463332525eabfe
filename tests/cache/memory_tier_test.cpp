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
#include "common/binary_kernel_cases.h"

namespace torchneuron {
namespace {

using test::BinaryCase;
using test::cases;
using test::computesCorrectly;
using test::kernelOf;
using test::signatureOf;

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
  for (size_t i = 1; i < cases().size(); ++i) { // more than the cap holds: "add" goes first
    const fusion::ElementwiseSignature s = signatureOf(cases()[i].op);
    ASSERT_TRUE(computesCorrectly(kernelOf(s), cases()[i], s)) << cases()[i].op;
  }
  const KernelCacheStats after = kernelCacheStats();
  EXPECT_GT(after.memory_evictions, evictions_before);
  EXPECT_TRUE(after.memory_bytes <= memoryTierCapacity() || after.entries == 1)
      << after.memory_bytes << " bytes in " << after.entries << " kernels";
  EXPECT_TRUE(computesCorrectly(held, cases()[0], held_signature)); // evicted, still mapped
  const int64_t misses_before = kernelCacheStats().misses;
  const KernelHandle again = kernelOf(held_signature); // back through a compile
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
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(wrong.load(), 0);
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_GT(stats.memory_evictions, 0);
  EXPECT_TRUE(stats.memory_bytes <= memoryTierCapacity() || stats.entries == 1);
  EXPECT_EQ(stats.compile_failures, 0);
}

} // namespace
} // namespace torchneuron

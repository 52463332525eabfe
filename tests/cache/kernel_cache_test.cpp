// The in-memory kernel cache without a persistent tier: one compile per key, failures
// remembered with their reason.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cache/kernel_cache.h"
#include "common/binary_kernel_cases.h"

namespace torchneuron {
namespace {

// No persistent tier in this process: set before any test reads the environment, so the test
// counts compiles exactly and writes nothing to disk, under ctest or run by hand.
class NoPersistentTier : public ::testing::Environment {
public:
  void SetUp() override { setenv("NEURON_CACHE", "0", 1); }
};
const ::testing::Environment* const kNoPersistentTier =
    ::testing::AddGlobalTestEnvironment(new NoPersistentTier);

TEST(KernelCache, OneCompilePerKeyAndFailuresAreRemembered) {
  resetKernelCacheCounters();
  const fusion::ElementwiseSignature s = test::signatureOf("mul");
  int builds = 0;
  auto build = [&] {
    ++builds;
    return fusion::buildElementwiseKernel(s);
  };
  const KernelHandle first = kernelFor(s.key(), build);
  const KernelHandle second = kernelFor(s.key(), build);
  EXPECT_NE(first->function, nullptr);
  EXPECT_EQ(first->function, second->function);
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(test::computesCorrectly(first, test::cases()[2], s));

  int broken_builds = 0;
  auto broken = [&] {
    ++broken_builds;
    return std::string("not mlir");
  };
  const KernelHandle failed = kernelFor(12345, broken);
  EXPECT_EQ(failed->function, nullptr);
  EXPECT_NE(failed->failure.find("[fusion]"), std::string::npos);
  kernelFor(12345, broken);
  EXPECT_EQ(broken_builds, 1);
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.compile_failures, 1);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.hits, 2);
}

} // namespace
} // namespace torchneuron

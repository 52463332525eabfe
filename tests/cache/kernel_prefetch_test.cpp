// Prefetching stored kernels (the warm start's kernel half): a prefetched kernel is taken by the
// kernelFor() it belongs to without another store read or a compile; a damaged or misfiled entry
// is rejected once, never mapped, and the kernel compiles. Each test runs in its own process
// (gtest_discover_tests), so each configures the process's store through the environment.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"
#include "cache/persistent_store.h"
#include "common/binary_kernel_cases.h"
#include "common/test_directory.h"

namespace torchneuron {
namespace {

std::vector<std::string>& warnings() {
  static std::vector<std::string> seen;
  return seen;
}

using test::cases;
using test::computesCorrectly;
using test::kernelOf;
using test::signatureOf;

std::string storeKeyOf(const fusion::ElementwiseSignature& s) {
  return persistentKeyFor(s.key(), fusion::buildElementwiseKernel(s));
}

class KernelPrefetchTest : public ::testing::Test {
protected:
  void SetUp() override {
    directory_ = testing::makeTestDirectory("neuron-prefetch-test-");
    setenv("NEURON_CACHE_DIR", directory_.c_str(), 1);
    unsetenv("NEURON_CACHE");
    setCacheWarningHandler([](const std::string& text) { warnings().push_back(text); });
  }

  // Compiles `s` in a child process, which writes it to the store: this process's memory tier
  // stays empty. Forked before this process starts any store or LLVM threads.
  void compileInAnotherProcess(const fusion::ElementwiseSignature& s) {
    const pid_t pid = fork();
    if (pid == 0) {
      const bool compiled = kernelOf(s)->function != nullptr;
      flushPersistentWrites(); // _exit() skips the exit handler that would write it
      _exit(compiled ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }

  std::string directory_;
};

TEST_F(KernelPrefetchTest, PrefetchedKernelIsTakenWithoutAStoreReadOrACompile) {
  const fusion::ElementwiseSignature s = signatureOf("hypot");
  compileInAnotherProcess(s);
  ASSERT_TRUE(prefetchStoredKernel(storeKeyOf(s)));
  EXPECT_FALSE(prefetchStoredKernel(storeKeyOf(s))); // already prefetched
  PersistentStore* store = PersistentStore::fromEnvironment();
  const int64_t reads = store->stats().hits + store->stats().misses;
  const KernelHandle kernel = kernelOf(s);
  ASSERT_NE(kernel->function, nullptr);
  const test::BinaryCase& hypot =
      *std::find_if(cases().begin(), cases().end(),
                    [](const test::BinaryCase& c) { return std::string(c.op) == "hypot"; });
  EXPECT_TRUE(computesCorrectly(kernel, hypot, s));
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.prefetched, 1);
  EXPECT_EQ(stats.persistent_hits, 1);
  EXPECT_EQ(stats.compiles, 0);
  EXPECT_EQ(store->stats().hits + store->stats().misses, reads);
  EXPECT_EQ(storedKernelsInFirstUseOrder(), std::vector<std::string>{storeKeyOf(s)});
  EXPECT_FALSE(prefetchStoredKernel(storeKeyOf(s))); // in use: nothing to do
  EXPECT_TRUE(warnings().empty());
}

TEST_F(KernelPrefetchTest, AbsentEntryIsNotPrefetchedAndNotWarnedAbout) {
  const fusion::ElementwiseSignature s = signatureOf("hypot");
  EXPECT_FALSE(prefetchStoredKernel(storeKeyOf(s)));
  EXPECT_NE(kernelOf(s)->function, nullptr);
  EXPECT_EQ(kernelCacheStats().compiles, 1);
  EXPECT_EQ(kernelCacheStats().persistent_rejected, 0);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(KernelPrefetchTest, EntryFiledUnderAnotherKernelsKeyIsRejectedOnceAndNeverMapped) {
  const fusion::ElementwiseSignature stored = signatureOf("hypot");
  const fusion::ElementwiseSignature wanted = signatureOf("atan2");
  compileInAnotherProcess(stored);
  PersistentStore* store = PersistentStore::fromEnvironment();
  const std::optional<std::vector<char>> bytes = store->get(storeKeyOf(stored));
  ASSERT_TRUE(bytes);
  ASSERT_TRUE(store->put(storeKeyOf(wanted), *bytes)); // a valid container, filed wrongly
  EXPECT_FALSE(prefetchStoredKernel(storeKeyOf(wanted)));
  EXPECT_EQ(kernelCacheStats().persistent_rejected, 1);
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find("filed under another key"), std::string::npos) << warnings()[0];
  EXPECT_NE(kernelOf(wanted)->function, nullptr); // compiled, not the misfiled code
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.persistent_rejected, 1); // the prefetch's verdict stands: not read again
  EXPECT_EQ(stats.persistent_hits, 0);
}

TEST_F(KernelPrefetchTest, DamagedEntryIsRejectedAndTheKernelCompiles) {
  const fusion::ElementwiseSignature s = signatureOf("hypot");
  compileInAnotherProcess(s);
  PersistentStore* store = PersistentStore::fromEnvironment();
  std::vector<char> bytes = *store->get(storeKeyOf(s));
  bytes[bytes.size() / 2] ^= 0x04;
  ASSERT_TRUE(store->putVerbatim(storeKeyOf(s), bytes));
  EXPECT_FALSE(prefetchStoredKernel(storeKeyOf(s)));
  EXPECT_NE(kernelOf(s)->function, nullptr);
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.persistent_rejected, 1);
  EXPECT_EQ(warnings().size(), 1u);
}

} // namespace
} // namespace torchneuron

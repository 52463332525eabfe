// Which failures the kernel cache remembers (issue 11 item 7; support/errors.h): a compile
// failure (MLIR rejected the module) in memory and in the store; an environment failure (the
// ORC link cannot resolve a symbol) in this process only; an internal error (an assertion in
// our own code) nowhere: it propagates to every caller. Each test runs in a process of its
// own (gtest_discover_tests), so each gets the store of its own directory.

#include <gtest/gtest.h>

#include <c10/util/Exception.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "cache/kernel_cache.h"
#include "cache/persistent_store.h"

namespace torchneuron {
namespace {

class KernelFailureTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/neuron-failure-test-XXXXXX";
    directory_ = mkdtemp(pattern);
    setenv("NEURON_CACHE_DIR", directory_.c_str(), 1);
    unsetenv("NEURON_CACHE");
    setCacheWarningHandler([](const std::string&) {});
    store_ = PersistentStore::fromEnvironment();
    ASSERT_NE(store_, nullptr);
    ASSERT_EQ(store_->directory(), directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string directory_;
  PersistentStore* store_ = nullptr;
};

TEST_F(KernelFailureTest, CompileFailureIsRememberedInMemoryAndInTheStore) {
  const std::string mlir = "module { func.func @kernel(%a: i64) { bogus.op } }";
  int builds = 0;
  auto build = [&] {
    ++builds;
    return mlir;
  };
  const KernelHandle failed = kernelFor(101, build);
  EXPECT_EQ(failed->function, nullptr);
  EXPECT_FALSE(failed->environmental);
  EXPECT_NE(failed->failure.find("[fusion] kernel MLIR does not parse"), std::string::npos)
      << failed->failure;
  EXPECT_EQ(kernelFor(101, build)->failure, failed->failure);
  EXPECT_EQ(builds, 1);
  const std::optional<std::string> remembered = store_->failure(persistentKeyFor(101, mlir));
  ASSERT_TRUE(remembered);
  EXPECT_NE(remembered->find("does not parse"), std::string::npos) << *remembered;
}

TEST_F(KernelFailureTest, LinkFailureFallsBackInThisProcessAndIsNotPersisted) {
  // Valid MLIR whose object calls a function no process has: compiles, then ORC cannot link it.
  const std::string mlir =
      "module {\n"
      "  func.func private @neuron_test_symbol_nobody_defines(i64)\n"
      "  func.func @kernel(%begin: i64, %end: i64) {\n"
      "    func.call @neuron_test_symbol_nobody_defines(%begin) : (i64) -> ()\n"
      "    return\n"
      "  }\n"
      "}\n";
  int builds = 0;
  auto build = [&] {
    ++builds;
    return mlir;
  };
  const KernelHandle failed = kernelFor(202, build);
  EXPECT_EQ(failed->function, nullptr);
  EXPECT_TRUE(failed->environmental);
  EXPECT_NE(failed->failure.find("[launcher]"), std::string::npos) << failed->failure;
  EXPECT_NE(failed->failure.find("the next process retries"), std::string::npos) << failed->failure;
  EXPECT_EQ(kernelFor(202, build)->function, nullptr); // this process falls back
  EXPECT_EQ(builds, 1);
  EXPECT_FALSE(store_->failure(persistentKeyFor(202, mlir))); // the next one tries again
  EXPECT_FALSE(store_->get(persistentKeyFor(202, mlir)));
}

TEST_F(KernelFailureTest, InternalErrorPropagatesToEveryCallAndIsNotRemembered) {
  int builds = 0;
  auto build = [&]() -> std::string {
    ++builds;
    TORCH_INTERNAL_ASSERT(false, "[fusion] a kernel builder bug");
  };
  for (int call = 0; call < 2; ++call) {
    try {
      kernelFor(303, build);
      FAIL() << "expected the internal error";
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what()).find("a kernel builder bug"), std::string::npos);
    }
  }
  EXPECT_EQ(builds, 2); // not remembered: each call tries again
  EXPECT_EQ(kernelCacheStats().compile_failures, 0);
  EXPECT_EQ(kernelCacheStats().entries, 0);
}

} // namespace
} // namespace torchneuron

// The executable container: round trip, and every kind of damage is rejected before loading.

#include <gtest/gtest.h>

#include "cache/executable_container.h"

namespace torchneuron {
namespace {

ExecutableContainer sample() {
  ExecutableContainer c;
  c.engine_version = kEngineVersion;
  c.llvm_version = "19.1.0";
  c.target_triple = "x86_64-pc-linux-gnu";
  c.cpu = "znver4";
  c.cpu_features = "+avx2,+fma";
  c.compile_options = "pipeline; O3";
  c.key_material = "module { func.func @kernel() { return } }";
  c.kernels = {{"neuron_kernel_0123", "slots-v1"}};
  c.object.assign(4096, '\x7f');
  for (size_t i = 0; i < c.object.size(); ++i)
    c.object[i] = static_cast<char>(i * 31);
  return c;
}

LoadRequirements requirementsOf(const ExecutableContainer& c) {
  return {c.engine_version, c.llvm_version,    c.target_triple,
          c.cpu_features,   c.compile_options, c.key_material};
}

TEST(ExecutableContainer, RoundTrips) {
  const ExecutableContainer c = sample();
  std::string why;
  const auto parsed = parseContainer(c.serialize(), &why);
  ASSERT_TRUE(parsed) << why;
  EXPECT_EQ(parsed->object, c.object);
  EXPECT_EQ(parsed->kernels[0].symbol, "neuron_kernel_0123");
  EXPECT_EQ(verifyContainer(*parsed, requirementsOf(c)), "");
}

TEST(ExecutableContainer, TruncationAtAnyOffsetIsRejected) {
  const std::vector<char> bytes = sample().serialize();
  for (size_t keep : {size_t{0}, size_t{3}, size_t{8}, size_t{40}, bytes.size() / 2,
                      bytes.size() - 17, bytes.size() - 1}) {
    std::vector<char> truncated(bytes.begin(), bytes.begin() + keep);
    std::string why;
    EXPECT_FALSE(parseContainer(truncated, &why)) << "kept " << keep;
    EXPECT_FALSE(why.empty());
  }
}

TEST(ExecutableContainer, SingleBitFlipsInHeaderPayloadAndChecksumAreRejected) {
  const std::vector<char> bytes = sample().serialize();
  for (size_t at : {size_t{1}, size_t{6}, size_t{30}, bytes.size() / 2, bytes.size() - 20,
                    bytes.size() - 8, bytes.size() - 1}) {
    for (int bit : {0, 5}) {
      std::vector<char> flipped = bytes;
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
      std::string why;
      EXPECT_FALSE(parseContainer(flipped, &why)) << "byte " << at << " bit " << bit;
    }
  }
}

TEST(ExecutableContainer, ForgedKeyMaterialAndVersionSkewAreNotLoadable) {
  ExecutableContainer forged = sample();
  forged.key_material = "module { something else }"; // a valid entry stored under another key
  const auto parsed = parseContainer(forged.serialize(), nullptr);
  ASSERT_TRUE(parsed); // well-formed, checksum fine...
  EXPECT_NE(verifyContainer(*parsed, requirementsOf(sample())).find("key material"),
            std::string::npos);

  ExecutableContainer old = sample();
  old.engine_version = "torchneuron-engine-0";
  EXPECT_NE(verifyContainer(*parseContainer(old.serialize(), nullptr), requirementsOf(sample()))
                .find("engine version"),
            std::string::npos);
  ExecutableContainer other_cpu = sample();
  other_cpu.cpu_features = "+sse2";
  EXPECT_EQ(
      verifyContainer(*parseContainer(other_cpu.serialize(), nullptr), requirementsOf(sample())),
      "CPU features differ");
}

} // namespace
} // namespace torchneuron

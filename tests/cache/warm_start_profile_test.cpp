#include "cache/warm_start_profile.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/test_directory.h"

namespace torchneuron {
namespace {

WarmStartProfile sampleProfile() {
  WarmStartProfile profile;
  profile.kernel_keys = {"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"};
  profile.block_bytes = {512, 1u << 20, (3u << 20) + (64u << 10)};
  return profile;
}

std::string temporaryDirectory() { return testing::makeTestDirectory("neuron-profile-test-"); }

TEST(WarmStartProfileTest, RoundTripsKernelsAndBlocksInOrder) {
  std::string why;
  const std::optional<WarmStartProfile> parsed =
      parseProfile(serializeProfile(sampleProfile()), &why);
  ASSERT_TRUE(parsed) << why;
  EXPECT_EQ(parsed->kernel_keys, sampleProfile().kernel_keys);
  EXPECT_EQ(parsed->block_bytes, sampleProfile().block_bytes);
}

TEST(WarmStartProfileTest, EveryTruncationIsRejected) {
  const std::string text = serializeProfile(sampleProfile());
  for (size_t length = 0; length < text.size(); ++length) {
    std::string why;
    EXPECT_FALSE(parseProfile(text.substr(0, length), &why)) << "accepted at length " << length;
    EXPECT_FALSE(why.empty());
  }
}

TEST(WarmStartProfileTest, EverySingleBitFlipIsRejected) {
  const std::string text = serializeProfile(sampleProfile());
  for (size_t byte = 0; byte < text.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = text;
      damaged[byte] = static_cast<char>(damaged[byte] ^ (1 << bit));
      std::string why;
      EXPECT_FALSE(parseProfile(damaged, &why))
          << "accepted a flip at byte " << byte << " bit " << bit;
    }
  }
}

TEST(WarmStartProfileTest, NamesTheProblemOfAMalformedBody) {
  const std::string good = serializeProfile(sampleProfile());
  struct Case {
    std::string from, to, problem;
  };
  const Case cases[] = {
      {"torchneuron warm-start profile 1", "torchneuron warm-start profile 2",
       "not a warm-start profile"},
      {"engine ", "engine x", "another engine version"},
      {"kernels 2", "kernels 3", "bad kernel key"},
      {"kernels 2", "kernels 99999999", "bad kernel count"},
      {"0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdeg", "bad kernel key"},
      {"blocks 3", "blocks 2", "unexpected line"},
      {"\n512\n", "\n0\n", "bad block size"},
      {"\n512\n", "\n-512\n", "bad block size"},
  };
  for (const Case& c : cases) {
    std::string body = good.substr(0, good.rfind("checksum "));
    const size_t at = body.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    body.replace(at, c.from.size(), c.to);
    std::string why; // resealed, so the parser gets past the checksum to the body's checks
    EXPECT_FALSE(parseProfile(sealedProfile(body), &why)) << c.to;
    EXPECT_NE(why.find(c.problem), std::string::npos) << "for '" << c.to << "': " << why;
  }
}

TEST(WarmStartProfileTest, TellsAnotherEnginesProfileFromDamage) {
  const std::string good = serializeProfile(sampleProfile());
  std::string body = good.substr(0, good.rfind("checksum "));
  body.replace(body.find("engine "), 7, "engine old-");
  std::string why;
  bool other_engine = false;
  EXPECT_FALSE(parseProfile(sealedProfile(body), &why, &other_engine));
  EXPECT_TRUE(other_engine) << why;
  EXPECT_FALSE(parseProfile(good.substr(0, good.size() / 2), &why, &other_engine));
  EXPECT_FALSE(other_engine) << why;
}

TEST(WarmStartProfileTest, SerializingCapsTheLists) {
  WarmStartProfile huge;
  huge.kernel_keys.assign(kMaxProfileKernels + 5, "0123456789abcdef0123456789abcdef");
  huge.block_bytes.assign(kMaxProfileBlocks + 5, 512);
  std::string why;
  const std::optional<WarmStartProfile> parsed = parseProfile(serializeProfile(huge), &why);
  ASSERT_TRUE(parsed) << why;
  EXPECT_EQ(parsed->kernel_keys.size(), kMaxProfileKernels);
  EXPECT_EQ(parsed->block_bytes.size(), kMaxProfileBlocks);
}

TEST(WarmStartProfileTest, FilesAreWrittenWholeReadBackAndRemoved) {
  const std::string cache_dir = temporaryDirectory();
  const std::string path = profilePath(cache_dir, currentProgramIdentity());
  EXPECT_FALSE(readProfileFile(path));
  ASSERT_TRUE(writeProfileFile(path, "first"));
  ASSERT_TRUE(writeProfileFile(path, serializeProfile(sampleProfile()))); // replaces it
  const std::optional<std::string> read = readProfileFile(path);
  ASSERT_TRUE(read);
  EXPECT_EQ(*read, serializeProfile(sampleProfile()));
  EXPECT_EQ(removeProfiles(cache_dir), 1); // and no temporary file left behind
  EXPECT_FALSE(readProfileFile(path));
  EXPECT_FALSE(writeProfileFile(cache_dir + "/no/such/dir/x.profile", "text"));
}

TEST(WarmStartProfileTest, ProgramIdentityIsStableHex) {
  const std::string identity = currentProgramIdentity();
  EXPECT_EQ(identity, currentProgramIdentity());
  EXPECT_EQ(identity.size(), 32u);
  EXPECT_EQ(identity.find_first_not_of("0123456789abcdef"), std::string::npos);
}

} // namespace
} // namespace torchneuron

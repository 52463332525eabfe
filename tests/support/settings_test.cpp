// The NEURON_* settings parser: every variable's type, default and range, and what a value
// outside them gives (a warning naming variable and value, then the default; or an error).

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

#include "support/settings.h"

namespace torchneuron {
namespace {

Settings parse(const std::map<std::string, std::string>& env) {
  return parseSettings([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Settings, DefaultsWhenNothingIsSet) {
  const Settings s = parse({});
  EXPECT_TRUE(s.cache_enabled);
  EXPECT_EQ(s.cache_max_bytes, 0);
  EXPECT_EQ(s.cache_memory_max_bytes, int64_t{256} << 20);
  EXPECT_FALSE(s.cache_retry_failed);
  EXPECT_TRUE(s.warm_start);
  EXPECT_EQ(s.warm_start_max_bytes, int64_t{1} << 30);
  EXPECT_EQ(s.cache_remote_timeout_ms, 50);
  EXPECT_EQ(s.cache_remote_lease_ms, 10000);
  EXPECT_TRUE(s.warnings.empty());
}

TEST(Settings, BooleansAcceptEveryDocumentedSpelling) {
  for (const char* off : {"0", "false", "FALSE", "no", "No", "off", "OFF"}) {
    const Settings s = parse({{"NEURON_CACHE", off}, {"NEURON_WARM_START", off}});
    EXPECT_FALSE(s.cache_enabled) << off;
    EXPECT_FALSE(s.warm_start) << off;
    EXPECT_TRUE(s.warnings.empty()) << off;
  }
  for (const char* on : {"1", "true", "True", "yes", "YES", "on", "On"})
    EXPECT_TRUE(parse({{"NEURON_CACHE_RETRY_FAILED", on}}).cache_retry_failed) << on;
  EXPECT_TRUE(parse({}).list_launches);
  EXPECT_FALSE(parse({{"NEURON_LIST_LAUNCHES", "0"}}).list_launches);
  EXPECT_TRUE(parse({}).huge_pages);
  EXPECT_FALSE(parse({{"NEURON_HUGE_PAGES", "off"}}).huge_pages);
  EXPECT_FALSE(parse({}).perf_map);
  EXPECT_TRUE(parse({{"NEURON_PERF_MAP", "yes"}}).perf_map);
}

TEST(Settings, OpenMpWorkersWaitShortlyUnlessUnchangedIsNamed) {
  EXPECT_EQ(parse({}).openmp_wait, OpenMpWait::kShort);
  EXPECT_EQ(parse({{"NEURON_OPENMP_WAIT", "unchanged"}}).openmp_wait, OpenMpWait::kUnchanged);
  EXPECT_EQ(parse({{"NEURON_OPENMP_WAIT", "short"}}).openmp_wait, OpenMpWait::kShort);
  const Settings s = parse({{"NEURON_OPENMP_WAIT", "passive"}});
  EXPECT_EQ(s.openmp_wait, OpenMpWait::kShort);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(
      s.warnings[0].find(
          "NEURON_OPENMP_WAIT=passive is not a wait rule for OpenMP's idle workers ('short' or "
          "'unchanged'); the default (short) is used"),
      std::string::npos)
      << s.warnings[0];
}

TEST(Settings, TheLaunchPoolIsOpenMpUnlessTbbIsNamed) {
  EXPECT_EQ(parse({}).launch_pool, LaunchPool::kOpenMp);
  EXPECT_EQ(parse({{"NEURON_LAUNCH_POOL", "tbb"}}).launch_pool, LaunchPool::kTbb);
  EXPECT_EQ(parse({{"NEURON_LAUNCH_POOL", "openmp"}}).launch_pool, LaunchPool::kOpenMp);
  const Settings s = parse({{"NEURON_LAUNCH_POOL", "TBB"}});
  EXPECT_EQ(s.launch_pool, LaunchPool::kOpenMp);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("NEURON_LAUNCH_POOL=TBB is not a launch pool"), std::string::npos)
      << s.warnings[0];
}

TEST(Settings, AnUnknownBooleanWarnsNamingVariableAndValueAndKeepsTheDefault) {
  const Settings s = parse({{"NEURON_CACHE", "nope"},
                            {"NEURON_WARM_START", "bogus"},
                            {"NEURON_CACHE_RETRY_FAILED", "2"}});
  EXPECT_TRUE(s.cache_enabled);
  EXPECT_TRUE(s.warm_start);
  EXPECT_FALSE(s.cache_retry_failed);
  ASSERT_EQ(s.warnings.size(), 3u);
  EXPECT_NE(s.warnings[0].find("NEURON_CACHE=nope is not a boolean"), std::string::npos)
      << s.warnings[0];
  EXPECT_NE(s.warnings[1].find("NEURON_CACHE_RETRY_FAILED=2"), std::string::npos) << s.warnings[1];
  EXPECT_NE(s.warnings[2].find("NEURON_WARM_START=bogus"), std::string::npos) << s.warnings[2];
}

TEST(Settings, ByteCountsTakeBinarySuffixes) {
  EXPECT_EQ(parseByteCount("0"), 0);
  EXPECT_EQ(parseByteCount("4096"), 4096);
  EXPECT_EQ(parseByteCount("4K"), 4096);
  EXPECT_EQ(parseByteCount("3m"), 3 << 20);
  EXPECT_EQ(parseByteCount("2G"), int64_t{2} << 30);
  EXPECT_EQ(parseByteCount("1T"), int64_t{1} << 40);
  const Settings s = parse({{"NEURON_CACHE_MAX_BYTES", "10G"},
                            {"NEURON_CACHE_MEMORY_MAX_BYTES", "64M"},
                            {"NEURON_WARM_START_MAX_BYTES", "0"}});
  EXPECT_EQ(s.cache_max_bytes, int64_t{10} << 30);
  EXPECT_EQ(s.cache_memory_max_bytes, int64_t{64} << 20);
  EXPECT_EQ(s.warm_start_max_bytes, 0);
  EXPECT_TRUE(s.warnings.empty());
}

TEST(Settings, ByteCountsBeyondInt64OrNegativeOrMalformedAreRejectedNotSaturated) {
  EXPECT_EQ(parseByteCount("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"9223372036854775808", "99999999999999999999999", "8388608T", "-1",
                          "1e23", "12KB", "K", "", " 5", "5 ", "0x10", "1.5G"})
    EXPECT_EQ(parseByteCount(bad), std::nullopt) << bad;
  EXPECT_EQ(parseByteCount("8388607T"), int64_t{8388607} << 40);
  const Settings s = parse({{"NEURON_CACHE_MEMORY_MAX_BYTES", "99999999999999999999999"},
                            {"NEURON_CACHE_MAX_BYTES", "-5"}});
  EXPECT_EQ(s.cache_memory_max_bytes, int64_t{256} << 20);
  EXPECT_EQ(s.cache_max_bytes, 0);
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("NEURON_CACHE_MAX_BYTES=-5 is not a byte count"), std::string::npos)
      << s.warnings[0];
  EXPECT_NE(s.warnings[1].find("NEURON_CACHE_MEMORY_MAX_BYTES=99999999999999999999999"),
            std::string::npos)
      << s.warnings[1];
  EXPECT_NE(s.warnings[1].find("the default (256M) is used"), std::string::npos) << s.warnings[1];
}

TEST(Settings, DurationsAreWholeMillisecondsUpToAnHour) {
  EXPECT_EQ(parseMilliseconds("1"), 1);
  EXPECT_EQ(parseMilliseconds("3600000"), 3600000);
  for (const char* bad : {"0", "3600001", "-5", "1.5", "10ms", "", " 5", "99999999999"})
    EXPECT_EQ(parseMilliseconds(bad), std::nullopt) << bad;
  const Settings s =
      parse({{"NEURON_CACHE_REMOTE_TIMEOUT_MS", "20"}, {"NEURON_CACHE_REMOTE_LEASE_MS", "2s"}});
  EXPECT_EQ(s.cache_remote_timeout_ms, 20);
  EXPECT_EQ(s.cache_remote_lease_ms, 10000);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("NEURON_CACHE_REMOTE_LEASE_MS=2s is not a duration"),
            std::string::npos)
      << s.warnings[0];
  EXPECT_NE(s.warnings[0].find("the default (10000) is used"), std::string::npos) << s.warnings[0];
}

TEST(Settings, EmptyValuesMeanUnset) {
  const Settings s = parse({{"NEURON_CACHE", ""}, {"NEURON_CACHE_MAX_BYTES", ""}});
  EXPECT_TRUE(s.cache_enabled);
  EXPECT_EQ(s.cache_max_bytes, 0);
  EXPECT_TRUE(s.warnings.empty());
}

TEST(Settings, FallbackModeIsStrict) {
  EXPECT_EQ(parseFallbackMode(nullptr), FallbackMode::kWarn);
  EXPECT_EQ(parseFallbackMode(""), FallbackMode::kWarn);
  EXPECT_EQ(parseFallbackMode("warn"), FallbackMode::kWarn);
  EXPECT_EQ(parseFallbackMode("silent"), FallbackMode::kSilent);
  EXPECT_EQ(parseFallbackMode("error"), FallbackMode::kError);
  try {
    parseFallbackMode("loud");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what())
                  .find("NEURON_FALLBACK must be 'warn', 'silent' or "
                        "'error', got 'loud'"),
              std::string::npos)
        << error.what();
  }
}

} // namespace
} // namespace torchneuron

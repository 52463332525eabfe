// NEURON_ADAPTIVE_* parsing (tracer/adaptive_settings.h).

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

#include "tracer/adaptive_settings.h"

namespace torchneuron::tracer {
namespace {

AdaptiveSettings parse(const std::map<std::string, std::string>& environment) {
  return parseAdaptiveSettings([&](const char* name) -> const char* {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  });
}

std::string errorOf(const std::map<std::string, std::string>& environment) {
  try {
    parse(environment);
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(AdaptiveSettings, DefaultsWhenUnset) {
  const AdaptiveSettings settings = parse({});
  EXPECT_FALSE(settings.enabled);
  EXPECT_EQ(settings.threshold, 2);
  EXPECT_EQ(settings.window_ops, 512);
  EXPECT_EQ(settings.window_bytes, int64_t{256} << 10);
  EXPECT_EQ(settings.min_bytes, int64_t{32} << 10);
  EXPECT_TRUE(settings.unbacked);
}

TEST(AdaptiveSettings, ReadsEveryVariable) {
  const AdaptiveSettings settings = parse({{"NEURON_ADAPTIVE_EAGER", "on"},
                                           {"NEURON_ADAPTIVE_THRESHOLD", "5"},
                                           {"NEURON_ADAPTIVE_WINDOW", "64"},
                                           {"NEURON_ADAPTIVE_WINDOW_BYTES", "16M"},
                                           {"NEURON_ADAPTIVE_MIN_BYTES", "0"},
                                           {"NEURON_ADAPTIVE_EXPLAIN", "1"},
                                           {"NEURON_ADAPTIVE_UNBACKED", "off"},
                                           {"NEURON_ADAPTIVE_ACCUMULATE", "0"}});
  EXPECT_TRUE(settings.enabled);
  EXPECT_EQ(settings.threshold, 5);
  EXPECT_EQ(settings.window_ops, 64);
  EXPECT_EQ(settings.window_bytes, int64_t{16} << 20);
  EXPECT_EQ(settings.min_bytes, 0);
  EXPECT_TRUE(settings.explain);
  EXPECT_FALSE(settings.unbacked);
  EXPECT_FALSE(settings.accumulate);
  EXPECT_TRUE(parse({}).accumulate);
}

TEST(AdaptiveSettings, AMalformedOrOutOfRangeValueNamesTheVariableAndTheValue) {
  EXPECT_EQ(errorOf({{"NEURON_ADAPTIVE_EAGER", "maybe"}}).find("NEURON_ADAPTIVE_EAGER='maybe'"),
            0u + std::string("[adaptive] ").size());
  EXPECT_NE(errorOf({{"NEURON_ADAPTIVE_THRESHOLD", "0"}}).find("NEURON_ADAPTIVE_THRESHOLD='0'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"NEURON_ADAPTIVE_WINDOW", "-3"}}).find("'-3'"), std::string::npos);
  EXPECT_NE(errorOf({{"NEURON_ADAPTIVE_WINDOW", "lots"}}).find("an integer from 1"),
            std::string::npos);
  EXPECT_NE(errorOf({{"NEURON_ADAPTIVE_MIN_BYTES", "-1"}}).find("NEURON_ADAPTIVE_MIN_BYTES='-1'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"NEURON_ADAPTIVE_UNBACKED", "2"}}).find("NEURON_ADAPTIVE_UNBACKED='2'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"NEURON_ADAPTIVE_ACCUMULATE", "x"}}).find("NEURON_ADAPTIVE_ACCUMULATE='x'"),
            std::string::npos);
}

} // namespace
} // namespace torchneuron::tracer

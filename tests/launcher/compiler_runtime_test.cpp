// The compiler-runtime routines the JIT provides round exactly as c10 does.

#include <c10/util/BFloat16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "launcher/compiler_runtime.h"

namespace torchneuron {
namespace {

using TruncFn = float (*)(float);

TruncFn truncsfbf2() {
  for (const auto& [name, address] : compilerRuntimeSymbols())
    if (std::string(name) == "__truncsfbf2") return reinterpret_cast<TruncFn>(address);
  return nullptr;
}

uint16_t lowBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>(bits);
}

TEST(CompilerRuntime, TruncFloatToBFloat16RoundsAsC10) {
  TruncFn fn = truncsfbf2();
  ASSERT_NE(fn, nullptr);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  const float specials[] = {
      0.0f, -0.0f, 1.0f, -1.5f, 3.0e38f, -3.4e38f, std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
      // exactly halfway between two bfloat16 values: ties go to even
      1.00390625f, 1.01171875f};
  for (float value : specials)
    EXPECT_EQ(lowBits(fn(value)), c10::BFloat16(value).x) << value;
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = any_bits(rng);
    float value;
    std::memcpy(&value, &bits, sizeof value);
    if (std::isnan(value)) {
      EXPECT_EQ(lowBits(fn(value)), 0x7FC0);
    } else {
      EXPECT_EQ(lowBits(fn(value)), c10::BFloat16(value).x) << bits;
    }
  }
}

} // namespace
} // namespace torchneuron

#include "device/huge_page_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace torchneuron {
namespace {

TEST(HugePageMemoryTest, RegionStartsOnAHugePageBoundaryReadsZeroAndIsWritable) {
  for (const size_t bytes : {kHugePageBytes, size_t{5} << 20, (size_t{3} << 20) + 4097}) {
    auto* region = static_cast<unsigned char*>(mapHugePageRegion(bytes));
    ASSERT_NE(region, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(region) % kHugePageBytes, 0u) << bytes;
    EXPECT_EQ(region[0], 0);
    EXPECT_EQ(region[bytes - 1], 0);
    std::memset(region, 7, bytes);
    EXPECT_EQ(region[bytes / 2], 7);
    unmapHugePageRegion(region, bytes);
  }
}

TEST(HugePageMemoryTest, ImpossibleSizeIsRefusedNotAnAbort) {
  EXPECT_EQ(mapHugePageRegion(size_t{1} << 62), nullptr);
}

TEST(HugePageMemoryTest, ModeIsOneTheKernelNames) {
  const std::string mode = transparentHugePageMode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unsupported")
      << mode;
}

} // namespace
} // namespace torchneuron

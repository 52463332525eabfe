#include "device/huge_page_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>

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

TEST(HugePageMemoryTest, ImpossibleSizesAreRefusedNotWrappedAround) {
  EXPECT_EQ(mapHugePageRegion(size_t{1} << 62), nullptr);
  // Rounded up to whole pages and over-mapped, these would wrap to a few bytes.
  EXPECT_EQ(mapHugePageRegion(std::numeric_limits<size_t>::max()), nullptr);
  EXPECT_EQ(mapHugePageRegion(std::numeric_limits<size_t>::max() - 4096), nullptr);
}

} // namespace
} // namespace torchneuron

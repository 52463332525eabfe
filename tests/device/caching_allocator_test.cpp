#include "device/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstring>

namespace torchneuron {
namespace {

TEST(CachingAllocatorTest, RoundsSmallRequestsTo512AndLargeTo64KiB) {
  EXPECT_EQ(roundedBlockSize(1), 512u);
  EXPECT_EQ(roundedBlockSize(512), 512u);
  EXPECT_EQ(roundedBlockSize(513), 1024u);
  EXPECT_EQ(roundedBlockSize((1 << 20) + 1), (1u << 20) + (64u << 10));
}

TEST(CachingAllocatorTest, FreedBlockIsReusedWithoutSystemAllocation) {
  emptyAllocatorCache();
  const size_t bytes = 64u << 20;
  void* first = nullptr;
  {
    c10::DataPtr ptr = neuronAllocator()->allocate(bytes);
    first = ptr.get();
    std::memset(first, 1, bytes);
  }
  const AllocatorStats before = allocatorStats();
  for (int i = 0; i < 10; ++i) {
    c10::DataPtr ptr = neuronAllocator()->allocate(bytes);
    EXPECT_EQ(ptr.get(), first);
  }
  const AllocatorStats after = allocatorStats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 10);
}

TEST(CachingAllocatorTest, StatsCountBlockCapacitiesExactly) {
  emptyAllocatorCache();
  const AllocatorStats start = allocatorStats();
  c10::DataPtr a = neuronAllocator()->allocate(1000);
  c10::DataPtr b = neuronAllocator()->allocate(3u << 20);
  const AllocatorStats live = allocatorStats();
  const int64_t expected = static_cast<int64_t>(roundedBlockSize(1000) + roundedBlockSize(3u << 20));
  EXPECT_EQ(live.allocated_bytes - start.allocated_bytes, expected);
  EXPECT_EQ(live.reserved_bytes - start.reserved_bytes, expected);
  a.clear();
  b.clear();
  const AllocatorStats freed = allocatorStats();
  EXPECT_EQ(freed.allocated_bytes, start.allocated_bytes);
  EXPECT_EQ(freed.reserved_bytes - start.reserved_bytes, expected);  // cached, not returned
  emptyAllocatorCache();
  EXPECT_EQ(allocatorStats().reserved_bytes, start.reserved_bytes);
}

TEST(CachingAllocatorTest, DoesNotReuseBlocksFarLargerThanTheRequest) {
  emptyAllocatorCache();
  { c10::DataPtr big = neuronAllocator()->allocate(8u << 20); }
  const AllocatorStats before = allocatorStats();
  c10::DataPtr small = neuronAllocator()->allocate(1u << 20);
  EXPECT_EQ(allocatorStats().system_allocations, before.system_allocations + 1);
}

TEST(CachingAllocatorTest, ZeroBytesAllocatesNothing) {
  const AllocatorStats before = allocatorStats();
  c10::DataPtr ptr = neuronAllocator()->allocate(0);
  EXPECT_EQ(ptr.get(), nullptr);
  EXPECT_EQ(allocatorStats().allocations, before.allocations);
}

}  // namespace
}  // namespace torchneuron

#include "device/caching_allocator.h"
#include "device/huge_page_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

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

TEST(CachingAllocatorTest, OfEqualFreeBlocksTheLastFreedIsReusedFirst) {
  emptyAllocatorCache();
  for (const size_t bytes : {size_t{4} << 10, size_t{2} << 20}) { // a small and a large class
    std::vector<void*> freed_order;
    {
      c10::DataPtr a = neuronAllocator()->allocate(bytes);
      c10::DataPtr b = neuronAllocator()->allocate(bytes);
      c10::DataPtr c = neuronAllocator()->allocate(bytes);
      freed_order = {a.get(), c.get(), b.get()};
      a.clear();
      c.clear();
      b.clear();
    }
    // Most recently freed first: its lines are the likeliest to be in cache.
    c10::DataPtr first = neuronAllocator()->allocate(bytes);
    c10::DataPtr second = neuronAllocator()->allocate(bytes);
    c10::DataPtr third = neuronAllocator()->allocate(bytes);
    EXPECT_EQ(first.get(), freed_order[2]) << bytes;
    EXPECT_EQ(second.get(), freed_order[1]) << bytes;
    EXPECT_EQ(third.get(), freed_order[0]) << bytes;
  }
}

TEST(CachingAllocatorTest, ASmallerRequestTakesTheLastFreedUsedBlockNotANewerPrefaultedOne) {
  emptyAllocatorCache();
  const size_t capacity = 2u << 20;
  const size_t request = capacity - (64u << 10); // fits a block of `capacity` (within 1/8)
  void* freed_last = nullptr;
  {
    c10::DataPtr first = neuronAllocator()->allocate(capacity);
    c10::DataPtr second = neuronAllocator()->allocate(capacity);
    freed_last = second.get();
    first.clear();
    second.clear();
  }
  expectPrefaultedBlocks({capacity});
  ASSERT_TRUE(prefaultBlock(capacity)); // the newest free block of that capacity, never used
  // The prefaulted block serves only its own capacity: of the used ones, the last freed.
  c10::DataPtr got = neuronAllocator()->allocate(request);
  EXPECT_EQ(got.get(), freed_last);
  emptyAllocatorCache();
}

TEST(CachingAllocatorTest, StatsCountBlockCapacitiesExactly) {
  emptyAllocatorCache();
  const AllocatorStats start = allocatorStats();
  c10::DataPtr a = neuronAllocator()->allocate(1000);
  c10::DataPtr b = neuronAllocator()->allocate(3u << 20);
  const AllocatorStats live = allocatorStats();
  const int64_t expected =
      static_cast<int64_t>(roundedBlockSize(1000) + roundedBlockSize(3u << 20));
  EXPECT_EQ(live.allocated_bytes - start.allocated_bytes, expected);
  EXPECT_EQ(live.reserved_bytes - start.reserved_bytes, expected);
  a.clear();
  b.clear();
  const AllocatorStats freed = allocatorStats();
  EXPECT_EQ(freed.allocated_bytes, start.allocated_bytes);
  EXPECT_EQ(freed.reserved_bytes - start.reserved_bytes, expected); // cached, not returned
  emptyAllocatorCache();
  EXPECT_EQ(allocatorStats().reserved_bytes, start.reserved_bytes);
}

TEST(CachingAllocatorTest, DoesNotReuseBlocksFarLargerThanTheRequest) {
  emptyAllocatorCache();
  {
    c10::DataPtr big = neuronAllocator()->allocate(8u << 20);
  }
  const AllocatorStats before = allocatorStats();
  c10::DataPtr small = neuronAllocator()->allocate(1u << 20);
  EXPECT_EQ(allocatorStats().system_allocations, before.system_allocations + 1);
}

// From 2 MiB up a block is its own mapping on a huge-page boundary (its data at a staggered
// cache-line offset within the first 4 KiB page); below, it comes from the C library.
TEST(CachingAllocatorTest, BlocksFromTwoMiBUpAreHugePageMappings) {
  emptyAllocatorCache();
  const AllocatorStats start = allocatorStats();
  c10::DataPtr small = neuronAllocator()->allocate(1u << 20);
  EXPECT_EQ(allocatorStats().huge_page_blocks, start.huge_page_blocks);
  for (const size_t bytes : {size_t{2} << 20, size_t{9} << 20}) {
    c10::DataPtr large = neuronAllocator()->allocate(bytes);
    EXPECT_LT(reinterpret_cast<uintptr_t>(large.get()) % kHugePageBytes, 4096u) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.get()) % 64, 0u) << bytes;
    std::memset(large.get(), 5, bytes);
  }
  const AllocatorStats made = allocatorStats();
  EXPECT_EQ(made.huge_page_blocks - start.huge_page_blocks, 2);
  EXPECT_EQ(made.huge_page_bytes - start.huge_page_bytes,
            static_cast<int64_t>(roundedBlockSize(2u << 20) + roundedBlockSize(9u << 20)));
  small.clear();
  emptyAllocatorCache(); // unmaps them
  EXPECT_EQ(allocatorStats().reserved_bytes, start.reserved_bytes);
}

TEST(CachingAllocatorTest, ASizeThatWouldWrapAroundIsAnErrorNotASmallBlock) {
  const AllocatorStats before = allocatorStats();
  for (const size_t bytes : {std::numeric_limits<size_t>::max(), size_t{1} << 63}) {
    try {
      neuronAllocator()->allocate(bytes);
      ADD_FAILURE() << "allocated " << bytes << " bytes";
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what())
                    .find("out of memory: tried to allocate " + std::to_string(bytes) + " bytes"),
                std::string::npos)
          << error.what();
    }
  }
  EXPECT_EQ(allocatorStats().system_allocations, before.system_allocations);
}

TEST(CachingAllocatorTest, ZeroBytesAllocatesNothing) {
  const AllocatorStats before = allocatorStats();
  c10::DataPtr ptr = neuronAllocator()->allocate(0);
  EXPECT_EQ(ptr.get(), nullptr);
  EXPECT_EQ(allocatorStats().allocations, before.allocations);
}

// Warm start: only announced blocks are prefaulted, a request that finds none made yet makes
// its own and takes its size off the announced ones, and a prefaulted block serves a request.
TEST(CachingAllocatorTest, PrefaultsOnlyAnnouncedBlocksAndServesRequestsFromThem) {
  emptyAllocatorCache();
  const size_t a = roundedBlockSize(5u << 20), b = roundedBlockSize(7u << 20);
  EXPECT_FALSE(prefaultBlock(a)); // nothing announced
  expectPrefaultedBlocks({a, a, b});
  const AllocatorStats start = allocatorStats();
  EXPECT_TRUE(prefaultBlock(a));
  // The program asks for b before the prefaulting thread got to it: made on demand, and b is
  // no longer announced.
  c10::DataPtr on_demand = neuronAllocator()->allocate(7u << 20);
  EXPECT_FALSE(prefaultBlock(b));
  EXPECT_TRUE(prefaultBlock(a));
  EXPECT_FALSE(prefaultBlock(a)); // both announced a-blocks made
  const AllocatorStats made = allocatorStats();
  EXPECT_EQ(made.prefaulted_blocks - start.prefaulted_blocks, 2);
  EXPECT_EQ(made.prefaulted_bytes - start.prefaulted_bytes, static_cast<int64_t>(2 * a));
  EXPECT_EQ(made.system_allocations - start.system_allocations, 3);
  c10::DataPtr warm = neuronAllocator()->allocate(5u << 20);
  std::memset(warm.get(), 3, 5u << 20); // the memory is the program's, writable
  const AllocatorStats used = allocatorStats();
  EXPECT_EQ(used.system_allocations, made.system_allocations);
  EXPECT_EQ(used.cache_hits - made.cache_hits, 1);
  on_demand.clear();
  warm.clear();
  emptyAllocatorCache();
  EXPECT_EQ(allocatorStats().reserved_bytes, 0);
}

TEST(CachingAllocatorTest, RecordsEachBlockOnceInFirstUseOrder) {
  emptyAllocatorCache();
  const size_t before = blocksInFirstUseOrder().size();
  {
    c10::DataPtr x = neuronAllocator()->allocate(3u << 20);
    c10::DataPtr y = neuronAllocator()->allocate(1000);
  }
  c10::DataPtr again = neuronAllocator()->allocate(3u << 20); // the same block, reused
  expectPrefaultedBlocks({roundedBlockSize(9u << 20)});
  ASSERT_TRUE(prefaultBlock(roundedBlockSize(9u << 20))); // made, not used: not recorded yet
  const std::vector<size_t> recorded = blocksInFirstUseOrder();
  ASSERT_EQ(recorded.size(), before + 2);
  EXPECT_EQ(recorded[before], roundedBlockSize(3u << 20));
  EXPECT_EQ(recorded[before + 1], roundedBlockSize(1000));
  c10::DataPtr warm = neuronAllocator()->allocate(9u << 20);
  EXPECT_EQ(blocksInFirstUseOrder().back(), roundedBlockSize(9u << 20));
  again.clear();
  warm.clear();
  emptyAllocatorCache();
}

// Large blocks from the OS start at staggered cache-line offsets within a page, so tensors
// streamed together do not all map to the same cache sets; each block is still 64-byte aligned
// and fully usable.
TEST(CachingAllocatorTest, LargeBlocksStartAtStaggeredPageOffsets) {
  emptyAllocatorCache();
  std::vector<c10::DataPtr> live;
  std::set<uintptr_t> offsets;
  for (int i = 0; i < 8; ++i) {
    live.push_back(neuronAllocator()->allocate(1u << 20));
    const auto address = reinterpret_cast<uintptr_t>(live.back().get());
    EXPECT_EQ(address % 64, 0u);
    offsets.insert(address % 4096);
    std::memset(live.back().get(), i, 1u << 20);
  }
  EXPECT_EQ(offsets.size(), 8u);
  live.clear();
  emptyAllocatorCache();
}

} // namespace
} // namespace torchneuron

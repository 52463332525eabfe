// launchKernelTable (launcher/table_launch.h): every index of every entry runs exactly once, with
// its own entry's arguments, however the table is cut into parts and whichever thread runs them.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "launcher/table_launch.h"

namespace torchneuron {
namespace {

// A stand-in kernel: slots[0] is the address of the entry's counters, one per index; each call
// adds one to the counters of [begin, end) and notes the calling thread.
std::mutex threads_mutex;
std::set<std::thread::id> threads_seen;

void countIndices(const int64_t* slots, int64_t begin, int64_t end) {
  auto* counters = reinterpret_cast<std::atomic<int>*>(slots[0]);
  for (int64_t i = begin; i < end; ++i)
    counters[i].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(threads_mutex);
  threads_seen.insert(std::this_thread::get_id());
}

struct Table {
  std::vector<std::vector<std::atomic<int>>> counters;
  std::vector<int64_t> slots;
  std::vector<TableEntry> entries;

  Table(const std::vector<int64_t>& ranges, int64_t work_per_index) : counters(ranges.size()) {
    for (size_t e = 0; e < ranges.size(); ++e) {
      counters[e] = std::vector<std::atomic<int>>(static_cast<size_t>(ranges[e]));
      slots.push_back(reinterpret_cast<int64_t>(counters[e].data()));
    }
    for (size_t e = 0; e < ranges.size(); ++e)
      entries.push_back({&countIndices, &slots[e], ranges[e], work_per_index});
  }

  void expectEachIndexOnce() const {
    for (size_t e = 0; e < counters.size(); ++e)
      for (size_t i = 0; i < counters[e].size(); ++i)
        ASSERT_EQ(counters[e][i].load(), 1) << "entry " << e << " index " << i;
  }
};

TEST(TableLaunch, SmallAndLargeEntriesRunEveryIndexOnceOnTwoThreads) {
  // Small entries share parts, large ones are sliced, an empty one is skipped.
  Table table({3, 1, 200000, 0, 7, 65536, 32769, 5}, 1);
  threads_seen.clear();
  launchKernelTable(table.entries.data(), table.entries.size(), 2);
  table.expectEachIndexOnce();
}

TEST(TableLaunch, RowsWithWorkPerIndexAreSlicedByWork) {
  // Each index stands for 768 elements (a row): 300 rows are split into parts of whole rows.
  Table table({300, 2, 45}, 768);
  launchKernelTable(table.entries.data(), table.entries.size(), 2);
  table.expectEachIndexOnce();
}

TEST(TableLaunch, ASmallTableRunsInlineInOrder) {
  Table table({10, 20, 30}, 1);
  threads_seen.clear();
  launchKernelTable(table.entries.data(), table.entries.size(), 2);
  table.expectEachIndexOnce();
  EXPECT_EQ(threads_seen, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(TableLaunch, OneThreadRunsEverythingInline) {
  Table table({100000, 3, 70000}, 1);
  threads_seen.clear();
  launchKernelTable(table.entries.data(), table.entries.size(), 1);
  table.expectEachIndexOnce();
  EXPECT_EQ(threads_seen, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(TableLaunch, AnEmptyTableDoesNothing) { launchKernelTable(nullptr, 0, 2); }

} // namespace
} // namespace torchneuron

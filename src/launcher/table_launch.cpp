#include "launcher/table_launch.h"

#include <algorithm>
#include <vector>

#include "launcher/parallel_launch.h"

namespace torchneuron {
namespace {

// A slice [begin, end) of one entry's range.
struct Segment {
  size_t entry;
  int64_t begin;
  int64_t end;
};

int64_t workOf(const TableEntry& entry) {
  return entry.range * std::max<int64_t>(entry.work_per_index, 1);
}

// Cuts the table into parts of about `part_work` elements each: consecutive small entries share a
// part, a large entry is sliced over its outer dimension. `part_starts` holds each part's first
// segment, and one past the last.
void cutIntoParts(const TableEntry* entries, size_t count, int64_t part_work,
                  std::vector<Segment>& segments, std::vector<size_t>& part_starts) {
  int64_t filled = 0;
  part_starts.push_back(0);
  for (size_t e = 0; e < count; ++e) {
    const TableEntry& entry = entries[e];
    if (entry.range <= 0) continue;
    const int64_t per_index = std::max<int64_t>(entry.work_per_index, 1);
    int64_t begin = 0;
    while (begin < entry.range) {
      const int64_t room = std::max<int64_t>(1, (part_work - filled + per_index - 1) / per_index);
      const int64_t end = std::min(entry.range, begin + room);
      segments.push_back({e, begin, end});
      filled += (end - begin) * per_index;
      begin = end;
      if (filled >= part_work) {
        part_starts.push_back(segments.size());
        filled = 0;
      }
    }
  }
  if (part_starts.back() != segments.size()) part_starts.push_back(segments.size());
}

} // namespace

void launchKernelTable(const TableEntry* entries, size_t count, int threads) {
  int64_t total = 0;
  for (size_t e = 0; e < count; ++e)
    total += std::max<int64_t>(workOf(entries[e]), 0);
  if (threads <= 1 || total < kInlineWorkLimit || launchesRunInline()) {
    for (size_t e = 0; e < count; ++e)
      if (entries[e].range > 0) entries[e].kernel(entries[e].slots, 0, entries[e].range);
    return;
  }
  // About four parts per thread for balance, none below the inline limit.
  const int64_t part_work = std::max<int64_t>(kInlineWorkLimit, total / (4 * int64_t{threads}));
  std::vector<Segment> segments;
  std::vector<size_t> part_starts;
  cutIntoParts(entries, count, part_work, segments, part_starts);
  const size_t parts = part_starts.size() - 1;
  runParts(threads, static_cast<int64_t>(parts), [&](int64_t part) {
    for (size_t s = part_starts[part]; s < part_starts[part + 1]; ++s) {
      const Segment& segment = segments[s];
      const TableEntry& entry = entries[segment.entry];
      entry.kernel(entry.slots, segment.begin, segment.end);
    }
  });
}

} // namespace torchneuron

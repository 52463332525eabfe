#include "fusion/window_partition.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "fusion/kernel_text.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

// One memref argument of a launch: its descriptor in the launch's slots (allocated and aligned
// pointer, offset, sizes, strides) and the bytes it spans.
struct Memref {
  const int64_t* descriptor = nullptr;
  uint32_t launch = 0; // whose slots hold the descriptor
  int rank = 0;
  c10::ScalarType dtype = c10::kFloat;
  uintptr_t begin = 0, end = 0; // [begin, end); empty when a size is 0

  int64_t slots() const { return 3 + 2 * rank; }
  const int64_t* sizes() const { return descriptor + 3; }
  const int64_t* strides() const { return descriptor + 3 + rank; }
  bool overlaps(const Memref& other) const { return begin < other.end && other.begin < end; }
  // The same elements in the same order: a value written through one is read at the same
  // iteration through the other.
  bool identical(const Memref& other) const {
    return dtype == other.dtype && rank == other.rank && descriptor[1] == other.descriptor[1] &&
           descriptor[2] == other.descriptor[2] &&
           std::memcmp(sizes(), other.sizes(), 2 * rank * sizeof(int64_t)) == 0;
  }
};

Memref memrefAt(const int64_t* descriptor, uint32_t launch, int rank, c10::ScalarType dtype) {
  Memref m{descriptor, launch, rank, dtype};
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t last = 0;
  for (int d = 0; d < rank; ++d) {
    if (m.sizes()[d] == 0) return m;
    last += (m.sizes()[d] - 1) * std::abs(m.strides()[d]);
  }
  m.begin = static_cast<uintptr_t>(descriptor[1]) + descriptor[2] * item;
  m.end = m.begin + (last + 1) * item;
  return m;
}

// A fusible launch, parsed: its output memref, one memref per signature input (the aliased
// input is the output's), and where its params start in its slots.
struct ParsedLaunch {
  Memref output;
  c10::SmallVector<Memref, 4> inputs;
  SlotRange params;
};

ParsedLaunch parse(const PartitionLaunch& launch, uint32_t index) {
  const ElementwiseSignature& s = *launch.elementwise;
  ParsedLaunch parsed;
  const int64_t* cursor = launch.slots;
  parsed.output = memrefAt(cursor, index, operandRank(s.rank, s.inner[0]), s.output);
  cursor += parsed.output.slots();
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    if (static_cast<int>(i) == s.aliased_input) {
      parsed.inputs.push_back(parsed.output);
      continue;
    }
    parsed.inputs.push_back(
        memrefAt(cursor, index, operandRank(s.rank, s.inner[i + 1]), s.inputs[i]));
    cursor += parsed.inputs.back().slots();
  }
  parsed.params = {index, static_cast<uint32_t>(cursor - launch.slots),
                   static_cast<uint32_t>(s.op->params.size())};
  return parsed;
}

// The group being built.
class GroupBuilder {
public:
  bool empty() const { return members_.empty(); }

  // Adds launch `index`; false, changing nothing, when it cannot join the group.
  bool tryAdd(size_t index, const PartitionLaunch& launch, const ParsedLaunch& parsed) {
    const ElementwiseSignature& s = *launch.elementwise;
    if (members_.size() >= kMaxMembers) return false;
    if (!members_.empty()) {
      const Memref& first = parsed_.front().output;
      if (s.rank != rank_ || parsed.output.rank != first.rank ||
          std::memcmp(parsed.output.sizes(), first.sizes(), first.rank * sizeof(int64_t)) != 0)
        return false;
    }
    FusedMember member;
    member.signature = s;
    std::vector<Memref> new_externals;
    std::vector<InnerStride> new_inner;
    for (size_t i = 0; i < parsed.inputs.size(); ++i) {
      const Memref& input = parsed.inputs[i];
      const int writer = latestWriter(input);
      if (writer == kConflict) return false;
      if (writer >= 0) {
        member.sources.push_back({FusedSource::kMember, writer});
        continue;
      }
      int found = -1;
      for (size_t e = 0; e < externals_.size() && found < 0; ++e)
        if (externals_[e].identical(input)) found = static_cast<int>(e);
      for (size_t e = 0; e < new_externals.size() && found < 0; ++e)
        if (new_externals[e].identical(input)) found = static_cast<int>(externals_.size() + e);
      if (found < 0) {
        found = static_cast<int>(externals_.size() + new_externals.size());
        new_externals.push_back(input);
        // The stride class this member's kernel was compiled with for it.
        new_inner.push_back(static_cast<int>(i) == s.aliased_input ? s.inner[0] : s.inner[i + 1]);
      }
      member.sources.push_back({FusedSource::kExternal, found});
    }
    // Its write: memory the group read or wrote with another geometry would be read or written
    // at another iteration than the loop reaches it.
    for (const Memref& external : externals_)
      if (external.overlaps(parsed.output) && !external.identical(parsed.output)) return false;
    for (const Memref& external : new_externals)
      if (external.overlaps(parsed.output) && !external.identical(parsed.output)) return false;
    if (latestWriter(parsed.output) == kConflict) return false;

    if (members_.empty()) rank_ = s.rank;
    externals_.insert(externals_.end(), new_externals.begin(), new_externals.end());
    external_inner_.insert(external_inner_.end(), new_inner.begin(), new_inner.end());
    members_.push_back(std::move(member));
    parsed_.push_back(parsed);
    launches_.push_back(index);
    return true;
  }

  // The group as it stands, then empties the builder. `last_touch[storage]` is the last launch
  // of the batch that touches the storage.
  FusedGroup finish(c10::ArrayRef<PartitionLaunch> launches,
                    const std::unordered_map<const void*, size_t>& last_touch) {
    FusedGroup group;
    group.first = launches_.front();
    group.count = launches_.size();
    const size_t last = launches_.back();
    bool any_stored = false;
    for (size_t m = 0; m < members_.size(); ++m) {
      bool superseded = false;
      for (size_t later = m + 1; later < members_.size() && !superseded; ++later)
        superseded = parsed_[later].output.identical(parsed_[m].output);
      const PartitionLaunch& launch = launches[launches_[m]];
      auto touch = last_touch.find(launch.output_storage);
      const bool read_later = touch != last_touch.end() && touch->second > last;
      members_[m].stored = !superseded && (launch.output_escapes || read_later);
      any_stored |= members_[m].stored;
    }
    if (any_stored) {
      FusedElementwiseSignature& signature = group.signature;
      signature.rank = rank_;
      signature.members = members_;
      for (size_t e = 0; e < externals_.size(); ++e) {
        const Memref& external = externals_[e];
        FusedExternal fused;
        fused.dtype = external.dtype;
        fused.inner = external_inner_[e];
        for (size_t m = 0; m < members_.size(); ++m)
          if (members_[m].stored && parsed_[m].output.identical(external))
            fused.read_through_member = static_cast<int>(m);
        signature.externals.push_back(fused);
      }
      gatherSlotRanges(launches, group);
    }
    members_.clear();
    parsed_.clear();
    launches_.clear();
    externals_.clear();
    external_inner_.clear();
    return group;
  }

private:
  static constexpr int kConflict = -2;
  // A longer run of launches is cut into groups of this many: compile time grows with a kernel's
  // body, and a long window of one repeated op (a loop of tiny adds) then compiles one kernel
  // that serves every group, instead of one per window length.
  static constexpr size_t kMaxMembers = 64;

  // The last member whose output `memref` reads (it is identical), -1 when no member wrote that
  // memory, or kConflict when one wrote it with another geometry.
  int latestWriter(const Memref& memref) const {
    for (size_t m = members_.size(); m-- > 0;) {
      const Memref& written = parsed_[m].output;
      if (!written.overlaps(memref)) continue;
      return written.identical(memref) ? static_cast<int>(m) : kConflict;
    }
    return -1;
  }

  void gatherSlotRanges(c10::ArrayRef<PartitionLaunch> launches, FusedGroup& group) const {
    auto add = [&](const Memref& memref) {
      const int64_t* base = launches[memref.launch].slots;
      group.slot_ranges.push_back({memref.launch, static_cast<uint32_t>(memref.descriptor - base),
                                   static_cast<uint32_t>(memref.slots())});
    };
    for (size_t m = 0; m < members_.size(); ++m)
      if (members_[m].stored) add(parsed_[m].output);
    for (size_t e = 0; e < externals_.size(); ++e)
      if (group.signature.externals[e].read_through_member < 0) add(externals_[e]);
    for (const ParsedLaunch& parsed : parsed_)
      if (parsed.params.count > 0) group.slot_ranges.push_back(parsed.params);
  }

  int rank_ = 0;
  std::vector<FusedMember> members_;
  std::vector<ParsedLaunch> parsed_;
  std::vector<size_t> launches_;
  std::vector<Memref> externals_;
  std::vector<InnerStride> external_inner_;
};

} // namespace

PartitionResult partitionWindow(c10::ArrayRef<PartitionLaunch> launches) {
  PartitionResult result;
  std::unordered_map<const void*, size_t> last_touch;
  for (size_t i = 0; i < launches.size(); ++i)
    for (const void* storage : launches[i].storages)
      last_touch[storage] = i;

  GroupBuilder group;
  auto close = [&] {
    if (group.empty()) return;
    FusedGroup finished = group.finish(launches, last_touch);
    if (finished.count >= 2) {
      result.groups.push_back(std::move(finished));
      return;
    }
    // A lone launch runs as recorded unless its result is dead.
    if (finished.signature.members.empty()) result.dead_launches.push_back(finished.first);
  };
  for (size_t i = 0; i < launches.size(); ++i) {
    const PartitionLaunch& launch = launches[i];
    if (launch.elementwise == nullptr) {
      close();
      continue;
    }
    const ParsedLaunch parsed = parse(launch, static_cast<uint32_t>(i));
    if (group.tryAdd(i, launch, parsed)) continue;
    close();
    group.tryAdd(i, launch, parsed);
  }
  close();
  return result;
}

} // namespace torchneuron::fusion

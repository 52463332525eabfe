#include "tracer/result_backing.h"

#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>

#include "tracer/op_window.h"
#include "tracer/unbacked_results.h"
#include "tracer/window_fusion.h"

namespace torchneuron::tracer {
namespace {

struct UnbackedResult {
  intptr_t begin = 0; // its address range in the unbacked reservation
  intptr_t end = 0;
  c10::StorageImpl* storage = nullptr;
  size_t held = 0; // the window's references to it
  bool needed = false;
  int64_t displacement = 0; // once backed
};

// The unbacked storages among `held`, sorted by address, one entry each.
std::vector<UnbackedResult> unbackedAmong(const std::vector<c10::Storage>& held) {
  std::vector<UnbackedResult> found;
  for (const c10::Storage& s : held) {
    c10::StorageImpl* impl = s.unsafeGetStorageImpl();
    if (impl == nullptr || !isUnbacked(impl)) continue;
    const auto begin = reinterpret_cast<intptr_t>(impl->data());
    found.push_back({begin, begin + static_cast<intptr_t>(impl->nbytes()), impl, 1});
  }
  if (found.empty()) return found;
  std::sort(found.begin(), found.end(),
            [](const UnbackedResult& a, const UnbackedResult& b) { return a.begin < b.begin; });
  size_t kept = 0;
  for (size_t i = 0; i < found.size(); ++i) {
    if (kept > 0 && found[kept - 1].storage == found[i].storage) {
      ++found[kept - 1].held;
      continue;
    }
    found[kept++] = found[i];
  }
  found.resize(kept);
  for (UnbackedResult& result : found)
    result.needed = c10::raw::intrusive_ptr::use_count(result.storage) > result.held;
  return found;
}

// The result whose range holds `address`, or null.
UnbackedResult* resultAt(std::vector<UnbackedResult>& results, int64_t address) {
  if (!isUnbackedAddress(address)) return nullptr;
  const auto at = static_cast<intptr_t>(address);
  auto after = std::upper_bound(results.begin(), results.end(), at,
                                [](intptr_t a, const UnbackedResult& r) { return a < r.begin; });
  if (after == results.begin()) return nullptr;
  UnbackedResult& result = *(after - 1);
  return at < result.end ? &result : nullptr;
}

UnbackedResult* resultOf(std::vector<UnbackedResult>& results, const void* storage) {
  for (UnbackedResult& result : results)
    if (result.storage == storage) return &result;
  return nullptr;
}

// The slots of a fused launch that hold a memref's pointer: where each member's pointer slots
// landed among the slot ranges the fused arguments were gathered from.
c10::SmallVector<uint32_t, 16> fusedPointerSlots(const std::vector<DeferredLaunch>& launches,
                                                 const fusion::FusedGroup& group) {
  c10::SmallVector<uint32_t, 16> positions;
  uint32_t at = 0;
  for (const fusion::SlotRange& range : group.slot_ranges) {
    if (!range.group_words) {
      for (uint32_t first : launches[range.launch].pointer_slots)
        for (uint32_t slot : {first, first + 1})
          if (slot >= range.begin && slot < range.begin + range.count)
            positions.push_back(at + slot - range.begin);
    }
    at += range.count;
  }
  return positions;
}

void markPointees(std::vector<UnbackedResult>& results, const int64_t* slots,
                  c10::ArrayRef<uint32_t> pointer_slots, bool pairs) {
  for (uint32_t slot : pointer_slots)
    for (uint32_t k = 0; k < (pairs ? 2u : 1u); ++k)
      if (UnbackedResult* result = resultAt(results, slots[slot + k])) result->needed = true;
}

// Moves the pointer slots into backed results. A slot still pointing into an unbacked result
// here is a step about to run on memory that does not exist: a bug, reported rather than run.
void movePointers(std::vector<UnbackedResult>& results, int64_t* slots,
                  c10::ArrayRef<uint32_t> pointer_slots, bool pairs) {
  for (uint32_t slot : pointer_slots)
    for (uint32_t k = 0; k < (pairs ? 2u : 1u); ++k) {
      UnbackedResult* result = resultAt(results, slots[slot + k]);
      if (result == nullptr) continue;
      TORCH_INTERNAL_ASSERT(result->needed, "[adaptive] a step would run on an unbacked result");
      slots[slot + k] += result->displacement;
    }
}

} // namespace

int64_t backResultsTheBatchUses(std::vector<DeferredLaunch>& launches, BatchSchedule& schedule,
                                const std::vector<c10::Storage>& held) {
  std::vector<UnbackedResult> results = unbackedAmong(held);
  if (results.empty()) return 0;
  std::vector<std::pair<size_t, c10::SmallVector<uint32_t, 16>>> fused_pointers;
  for (size_t i = 0; i < launches.size(); ++i) {
    DeferredLaunch& launch = launches[i];
    switch (schedule.action(i)) {
    case BatchSchedule::kSkip:
      break;
    case BatchSchedule::kFused: {
      BatchSchedule::FusedLaunch& fused = schedule.fused(i);
      TORCH_INTERNAL_ASSERT(fused.group != nullptr);
      fused_pointers.emplace_back(i, fusedPointerSlots(launches, *fused.group));
      markPointees(results, fused.slots.data(), fused_pointers.back().second, false);
      break;
    }
    case BatchSchedule::kRun:
      if (launch.host_step) {
        for (const void* storage : launch.storages)
          if (UnbackedResult* result = resultOf(results, storage)) result->needed = true;
        break;
      }
      TORCH_INTERNAL_ASSERT(!launch.pointer_slots.empty() || launch.slots.empty(),
                            "[adaptive] a recorded launch without its pointer slots");
      markPointees(results, launch.slots.data(), launch.pointer_slots, true);
      break;
    }
  }
  int64_t backed = 0;
  for (UnbackedResult& result : results)
    if (result.needed) {
      result.displacement = backStorage(result.storage);
      ++backed;
    }
  // Also with nothing backed: the pass checks that no step runs on an unbacked result.
  for (size_t i = 0; i < launches.size(); ++i)
    if (schedule.action(i) == BatchSchedule::kRun && !launches[i].host_step)
      movePointers(results, launches[i].slots.data(), launches[i].pointer_slots, true);
  for (auto& [i, positions] : fused_pointers)
    movePointers(results, schedule.fused(i).slots.data(), positions, false);
  return backed;
}

void backEscapingResults(std::vector<c10::Storage>& held) {
  std::vector<c10::Storage> escaping;
  try {
    for (const UnbackedResult& result : unbackedAmong(held))
      if (result.needed)
        escaping.emplace_back(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(result.storage));
  } catch (const std::exception&) { // no memory even for the list: they stay unbacked
  }
  held.clear();
  for (const c10::Storage& storage : escaping) {
    try {
      backStorage(storage.unsafeGetStorageImpl());
    } catch (const std::exception&) { // the first error is the one the caller reports
    }
  }
}

} // namespace torchneuron::tracer

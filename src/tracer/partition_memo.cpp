#include "tracer/partition_memo.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <cstdlib>

#include "fusion/kernel_text.h"
#include "tracer/op_window.h"

namespace torchneuron::tracer {
namespace {

constexpr int64_t kOtherStep = -1;  // a library step or a launch the partitioner does not fuse
constexpr int64_t kRawAddress = -2; // a memref outside the launch's device storages

size_t bucketOf(const void* storage, size_t mask) {
  const auto bits = reinterpret_cast<uintptr_t>(storage);
  return static_cast<size_t>((bits >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

bool fusible(const DeferredLaunch& launch) {
  return launch.elementwise != nullptr && !launch.host_step;
}

// A reduction launch, which a group before it may feed (prologue fusion).
bool consumable(const DeferredLaunch& launch) {
  return launch.reduction != nullptr && !launch.host_step;
}

using MemrefShapes = c10::SmallVector<std::pair<int, c10::ScalarType>, 8>;

// The rank and dtype of each memref argument of a fusible or consumable launch, in slot order.
MemrefShapes memrefShapes(const DeferredLaunch& launch) {
  MemrefShapes shapes;
  if (const fusion::ElementwiseSignature* s = launch.elementwise) {
    shapes.push_back({fusion::operandRank(s->rank, s->inner[0]), s->output});
    for (size_t i = 0; i < s->inputs.size(); ++i)
      if (static_cast<int>(i) != s->aliased_input)
        shapes.push_back({fusion::operandRank(s->rank, s->inner[i + 1]), s->inputs[i]});
    return shapes;
  }
  const fusion::ReductionSignature& r = *launch.reduction;
  const int full = r.kept_rank + r.reduced_rank;
  for (size_t o = 0; o < r.outputs.size(); ++o)
    shapes.push_back({r.outputRank(o), r.outputs[o]});
  for (c10::ScalarType input : r.inputs)
    shapes.push_back({full, input});
  return shapes;
}

// The storage of a reduction launch's output `o` (its memref's place), or null: not placed.
const void* outputStorage(const DeferredLaunch& launch, size_t o) {
  if (launch.memref_places.size() <= o) return nullptr;
  const int64_t index = launch.memref_places[o] & 0xff;
  return index == 0 ? nullptr : launch.storages[index - 1];
}

} // namespace

void PartitionMemo::resetSlots(size_t storages) {
  size_t capacity = 64;
  while (capacity < 2 * storages)
    capacity *= 2;
  if (slots_.size() < capacity) {
    slots_.assign(capacity, StorageSlot());
    stamp_ = 0;
  }
  if (++stamp_ == 0) { // wrapped: stamps of old entries could match again
    slots_.assign(slots_.size(), StorageSlot());
    stamp_ = 1;
  }
  next_number_ = 0;
}

PartitionMemo::StorageSlot& PartitionMemo::slotOf(const void* storage) {
  const size_t mask = slots_.size() - 1;
  for (size_t i = bucketOf(storage, mask);; i = (i + 1) & mask) {
    StorageSlot& slot = slots_[i];
    if (slot.stamp != stamp_) {
      slot = StorageSlot{storage, stamp_, -1, 0};
      return slot;
    }
    if (slot.storage == storage) return slot;
  }
}

int32_t PartitionMemo::numberOf(const void* storage) {
  StorageSlot& slot = slotOf(storage);
  if (slot.number < 0) slot.number = next_number_++;
  return slot.number;
}

// Whether anything outside the window holds `storage`: the window's references are all it has
// (`held`, counted before), else it is not the window's to judge, so it escapes.
bool PartitionMemo::escapes(const void* storage) {
  const StorageSlot& slot = slotOf(storage);
  const auto* impl = static_cast<const c10::StorageImpl*>(storage);
  return slot.held == 0 ||
         c10::raw::intrusive_ptr::use_count(const_cast<c10::StorageImpl*>(impl)) > slot.held;
}

// The launch's memrefs (memrefShapes) as storage number and byte offset there, element offset,
// sizes and strides. `numbers`: those of the launch's storages, in order.
void PartitionMemo::fingerprintMemrefs(const DeferredLaunch& launch,
                                       c10::ArrayRef<int32_t> numbers) {
  const MemrefShapes shapes = memrefShapes(launch);
  const int64_t* cursor = launch.slots.data();
  const size_t count = shapes.size();
  // Places are taken at record time (plan_executor.cpp); a launch without them (none is
  // recorded so today) makes the batch one that is partitioned as is, not remembered.
  const bool placed = launch.memref_places.size() == count;
  if (!placed) all_placed_ = false;
  size_t next = 0;
  auto memref = [&](int rank, c10::ScalarType dtype) {
    const auto address = static_cast<uintptr_t>(cursor[1]);
    bool found = false;
    if (placed) {
      const int64_t place = launch.memref_places[next++];
      if ((place & 0xff) != 0) {
        words_.push_back(numbers[(place & 0xff) - 1]);
        words_.push_back(place >> 8);
        found = true;
      }
    }
    if (!found) { // host memory (a CPU number): numbered by its address, its extent kept
      words_.push_back(kRawAddress);
      words_.push_back(numberOf(reinterpret_cast<const void*>(address)));
      const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
      int64_t last = 0;
      bool empty = false;
      for (int d = 0; d < rank; ++d) {
        empty |= cursor[3 + d] == 0;
        last += (cursor[3 + d] - 1) * std::abs(cursor[3 + rank + d]);
      }
      if (!empty) {
        const uintptr_t begin = address + cursor[2] * item;
        raw_extents_.push_back({begin, begin + (last + 1) * item});
      }
    }
    words_.insert(words_.end(), cursor + 2, cursor + 3 + 2 * rank);
    cursor += 3 + 2 * rank;
  };
  for (const auto& [rank, dtype] : shapes)
    memref(rank, dtype);
}

// Host memrefs are numbered by address, which is exact while two of them either start at the
// same byte or do not overlap at all (distinct CPU numbers); otherwise the batch is partitioned
// as it is, not remembered.
bool PartitionMemo::rawExtentsAreDisjoint() {
  std::sort(raw_extents_.begin(), raw_extents_.end());
  for (size_t i = 1; i < raw_extents_.size(); ++i) {
    const auto& before = raw_extents_[i - 1];
    const auto& after = raw_extents_[i];
    if (after.first != before.first && after.first < before.second) return false;
  }
  return true;
}

RememberedPartition* PartitionMemo::partition(const std::vector<DeferredLaunch>& launches,
                                              const std::vector<c10::Storage>& held, bool& reused) {
  reused = false;
  size_t fusible_launches = 0, storages = held.size();
  for (const DeferredLaunch& launch : launches) {
    storages += launch.storages.size();
    if (consumable(launch))
      storages += launch.reduction->inputs.size() + launch.reduction->outputs.size();
    if (!fusible(launch)) continue;
    ++fusible_launches;
    storages += 1 + launch.elementwise->inputs.size(); // its memrefs: CPU ones have own slots
  }
  if (fusible_launches == 0) return nullptr;

  // The window's references per storage: one whose use count exceeds them is held outside the
  // window (a Python tensor, autograd's saved tensors, a library step's captured operands).
  resetSlots(storages);
  for (const c10::Storage& storage : held)
    ++slotOf(storage.unsafeGetStorageImpl()).held;
  escapes_.assign(launches.size(), ~0u);
  raw_extents_.clear();
  all_placed_ = true;
  words_.clear();
  words_.push_back(static_cast<int64_t>(launches.size()));
  for (size_t i = 0; i < launches.size(); ++i) {
    const DeferredLaunch& launch = launches[i];
    numbers_.clear();
    for (const void* storage : launch.storages)
      numbers_.push_back(numberOf(storage));
    if (fusible(launch)) {
      escapes_[i] = escapes(launch.output_storage);
      words_.push_back(reinterpret_cast<int64_t>(launch.elementwise));
      words_.push_back(escapes_[i]);
      words_.push_back(slotOf(launch.output_storage).number);
      fingerprintMemrefs(launch, numbers_);
    } else if (consumable(launch)) {
      for (size_t o = 0; o < launch.reduction->outputs.size(); ++o) {
        const void* storage = outputStorage(launch, o);
        if (storage != nullptr && !escapes(storage)) escapes_[i] &= ~(1u << o);
      }
      words_.push_back(reinterpret_cast<int64_t>(launch.reduction));
      words_.push_back(escapes_[i]);
      fingerprintMemrefs(launch, numbers_);
    } else {
      words_.push_back(kOtherStep);
    }
    words_.push_back(static_cast<int64_t>(launch.storages.size()));
    words_.insert(words_.end(), numbers_.begin(), numbers_.end());
  }
  const bool rememberable = rawExtentsAreDisjoint() && all_placed_;
  const Hash128 fingerprint = hashBytes128(words_.data(), words_.size() * sizeof(int64_t));
  auto found = rememberable ? entries_.find(fingerprint) : entries_.end();
  if (found != entries_.end()) {
    reused = true;
    return found->second.get();
  }

  std::vector<fusion::PartitionLaunch> views(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const DeferredLaunch& launch = launches[i];
    fusion::PartitionLaunch& view = views[i];
    view.storages = launch.storages;
    if (consumable(launch)) {
      view.reduction = launch.reduction;
      view.slots = launch.slots.data();
      for (size_t o = 0; o < launch.reduction->outputs.size(); ++o)
        view.output_storages.push_back(outputStorage(launch, o));
      view.escaping_outputs = escapes_[i];
    }
    if (!fusible(launch)) continue;
    view.elementwise = launch.elementwise;
    view.slots = launch.slots.data();
    view.output_storage = launch.output_storage;
    view.output_escapes = escapes_[i] != 0;
  }
  auto remembered = std::make_unique<RememberedPartition>();
  remembered->result = fusion::partitionWindow(views);
  for (const fusion::FusedGroup& group : remembered->result.groups)
    remembered->keys.push_back(
        group.signature.members.empty() && !group.signature.consumer ? 0 : group.signature.key());
  remembered->kernels.resize(remembered->result.groups.size());
  if (!rememberable) {
    unremembered_ = std::move(remembered);
    return unremembered_.get();
  }
  if (entries_.size() >= kMaxEntries) entries_.clear();
  return entries_.emplace(fingerprint, std::move(remembered)).first->second.get();
}

} // namespace torchneuron::tracer

#include "device/list_launch.h"

#include <ATen/Parallel.h>
#include <c10/core/Storage.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <vector>

#include "support/settings.h"
#include "target/target.h"

namespace torchneuron {
namespace {

// Which storages the pending launches touch, and whether any writes them: an open-addressing set
// of pointers reused from call to call (a list of hundreds of parameters adds a few entries per
// element, and a node-based map's allocations were most of an element's cost).
class TouchedStorages {
public:
  // Whether `storage` is touched; `written` says whether it is written.
  bool find(const c10::StorageImpl* storage, bool* written) const {
    if (slots_.empty()) return false;
    for (size_t i = indexOf(storage);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].storage == nullptr) return false;
      if (slots_[i].storage == storage) {
        *written = slots_[i].written;
        return true;
      }
    }
  }

  // Notes `storage`; returns true when it was not noted before.
  bool note(const c10::StorageImpl* storage, bool written) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    for (size_t i = indexOf(storage);; i = (i + 1) & (slots_.size() - 1)) {
      Slot& slot = slots_[i];
      if (slot.storage == storage) {
        slot.written = slot.written || written;
        return false;
      }
      if (slot.storage == nullptr) {
        slot = {storage, written};
        ++count_;
        return true;
      }
    }
  }

  void clear() {
    if (count_ == 0) return;
    std::fill(slots_.begin(), slots_.end(), Slot{});
    count_ = 0;
  }

private:
  struct Slot {
    const c10::StorageImpl* storage = nullptr;
    bool written = false;
  };

  size_t indexOf(const c10::StorageImpl* storage) const {
    // Fibonacci hashing of the address (allocations are 64-byte aligned: the low bits are 0).
    const uint64_t bits = reinterpret_cast<uintptr_t>(storage) * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>(bits >> 32) & (slots_.size() - 1);
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(64, 2 * old.size()), Slot{});
    count_ = 0;
    for (const Slot& slot : old)
      if (slot.storage != nullptr) note(slot.storage, slot.written);
  }

  std::vector<Slot> slots_; // a power of two in size, at most half full
  size_t count_ = 0;
};

} // namespace

// The launches a scope holds back, with what they touch. One per thread, reused by its scopes
// (their vectors keep their capacity).
class PendingListLaunches {
public:
  // Whether a launch reading `reads` and writing `writes` must wait for the pending ones.
  bool conflicts(c10::ArrayRef<c10::StorageImpl*> reads,
                 c10::ArrayRef<c10::StorageImpl*> writes) const {
    bool written = false;
    for (c10::StorageImpl* storage : reads)
      if (touched_.find(storage, &written) && written) return true;
    for (c10::StorageImpl* storage : writes)
      if (touched_.find(storage, &written)) return true;
    return false;
  }

  void add(KernelHandle kernel, const int64_t* slots, int64_t slot_count, const LaunchShape& shape,
           c10::ArrayRef<c10::StorageImpl*> reads, c10::ArrayRef<c10::StorageImpl*> writes) {
    launches_.push_back({std::move(kernel), slots_.size(), shape});
    slots_.insert(slots_.end(), slots, slots + slot_count);
    for (c10::StorageImpl* storage : reads)
      hold(storage, /*written=*/false);
    for (c10::StorageImpl* storage : writes)
      hold(storage, /*written=*/true);
  }

  // Runs the pending launches as one table launch and forgets them, also when running fails.
  void run() {
    if (launches_.empty()) return;
    struct Forget {
      PendingListLaunches& pending;
      ~Forget() {
        pending.launches_.clear();
        pending.slots_.clear();
        pending.touched_.clear();
        pending.held_.clear(); // the storages may be freed now
      }
    } forget{*this};
    table_.clear();
    for (const Pending& launch : launches_)
      table_.push_back({launch.kernel->function, slots_.data() + launch.first_slot,
                        launch.shape.range, launch.shape.work_per_index});
    deviceTarget().launchTable(table_.data(), table_.size(), at::get_num_threads());
    ++table_launches_;
  }

  // Starts a scope's count of table launches (tableLaunches()).
  void startCount() { table_launches_ = 0; }
  int64_t tableLaunches() const { return table_launches_; }

private:
  struct Pending {
    KernelHandle kernel; // keeps the code linked until it runs
    size_t first_slot;
    LaunchShape shape;
  };

  void hold(c10::StorageImpl* storage, bool written) {
    if (touched_.note(storage, written))
      held_.emplace_back(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage));
  }

  std::vector<Pending> launches_;
  std::vector<int64_t> slots_;
  std::vector<TableEntry> table_;
  TouchedStorages touched_;
  std::vector<c10::Storage> held_;
  int64_t table_launches_ = 0;
};

namespace {
thread_local PendingListLaunches thread_list_launches;
// -1: NEURON_LIST_LAUNCHES decides; 0 or 1: setListLaunches() did.
std::atomic<int> list_launches_override{-1};
} // namespace

bool listLaunchesEnabled() {
  const int set = list_launches_override.load(std::memory_order_relaxed);
  return set < 0 ? settings().list_launches : set == 1;
}

void setListLaunches(bool enabled) { list_launches_override.store(enabled ? 1 : 0); }

namespace detail {

thread_local PendingListLaunches* list_launches = nullptr;

void runPendingListLaunches() { list_launches->run(); }

} // namespace detail

// A scope opened inside another on the same thread joins it: the outer one runs and counts.
ListLaunchScope::ListLaunchScope() : owner_(detail::list_launches == nullptr) {
  if (!owner_) return;
  detail::list_launches = &thread_list_launches;
  thread_list_launches.startCount();
}

int64_t ListLaunchScope::finish() {
  if (!owner_) return 0;
  thread_list_launches.run();
  return thread_list_launches.tableLaunches();
}

ListLaunchScope::~ListLaunchScope() {
  if (!owner_) return;
  // Reached here without finish(), an element op threw: the elements before it run, as in ATen's
  // loop, and the element op's error propagates. Running them can fail only for memory (the
  // table's vectors); the list call has failed either way, and a second exception during
  // unwinding would end the process.
  try {
    thread_list_launches.run();
  } catch (const std::exception&) { // NOLINT(bugprone-empty-catch): see above
  }
  detail::list_launches = nullptr;
}

void collectListLaunch(KernelHandle kernel, const int64_t* slots, int64_t slot_count,
                       const LaunchShape& shape, c10::ArrayRef<c10::StorageImpl*> reads,
                       c10::ArrayRef<c10::StorageImpl*> writes) {
  PendingListLaunches& pending = *detail::list_launches;
  if (pending.conflicts(reads, writes)) pending.run();
  pending.add(std::move(kernel), slots, slot_count, shape, reads, writes);
}

} // namespace torchneuron

#pragma once
// Partitions of batches remembered by their structure. A hot window records the same launches
// batch after batch, at other addresses: partitioning each batch anew (fusion/window_partition.h:
// parsing every memref, building every fused signature, hashing its key) cost about 1 µs per
// recorded op of a tiny chain, more than running it eagerly. The memo computes a batch's
// structural fingerprint instead (one pass over its launches, no allocation) and reuses the
// partition of an earlier batch with the same fingerprint; only the fused kernels' argument
// slots are gathered from the batch itself (FusedGroup::gatherSlots).
//
// The fingerprint covers everything the partitioner reads, with addresses made relative:
// per launch its interned elementwise or reduction signature (or that it is another step), for
// a fusible one whether its output escapes and, for both, per memref, the storage it lies in
// (numbered by first use in the batch) with its byte offset there, its element offset, sizes and
// strides; and every storage each step touches. Where each memref lies was noted when it was
// recorded (RecordedOperands::memref_places), so no storage object is read again here but for the
// outputs' reference counts. Memory of distinct live storages never overlaps, so two batches
// with one fingerprint have the same overlaps and identities between their memrefs, the same
// escapes and the same later touches: the partitioner would decide the same. A memref outside
// the launch's device storages (a CPU number) is numbered by its address among the batch's
// host memrefs, with its extent; that is exact while no two of them partly overlap, which is
// checked (a batch where they do is partitioned as is, not remembered). Scalar parameters are
// not structure: they stay in the slots.
//
// Locking: owned by the op window and used under the tracer's window lock.

#include <c10/core/Storage.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/window_partition.h"
#include "support/hash.h"

namespace torchneuron::tracer {

struct DeferredLaunch;

// A batch's partition, with what the schedule derives from it once.
struct RememberedPartition {
  fusion::PartitionResult result;
  std::vector<Hash64> keys;          // per group: its fused kernel's key (0: nothing stored)
  std::vector<KernelHandle> kernels; // per group: its fused kernel, once it is compiled
};

class PartitionMemo {
public:
  // The partition of `launches` (`held`: the storages the window holds, one entry per
  // reference), remembered (`reused` set) or computed now; null when no launch of the batch is
  // fusible.
  RememberedPartition* partition(const std::vector<DeferredLaunch>& launches,
                                 const std::vector<c10::Storage>& held, bool& reused);

private:
  // A storage of the batch: its number in first-use order (-1 before its first use) and the
  // window's references to it.
  struct StorageSlot {
    const void* storage = nullptr;
    uint32_t stamp = 0;
    int32_t number = -1;
    uint32_t held = 0;
  };
  StorageSlot& slotOf(const void* storage);
  int32_t numberOf(const void* storage);
  bool escapes(const void* storage);
  void resetSlots(size_t storages);
  void fingerprintMemrefs(const DeferredLaunch& launch, c10::ArrayRef<int32_t> numbers);
  bool rawExtentsAreDisjoint();

  // Open addressing over storage pointers, cleared by bumping the stamp.
  std::vector<StorageSlot> slots_;
  uint32_t stamp_ = 0;
  int32_t next_number_ = 0;
  std::vector<int64_t> words_;           // the fingerprint's words, hashed at the end
  c10::SmallVector<int32_t, 8> numbers_; // the numbers of one launch's storages
  bool all_placed_ = true;               // every memref of the batch had its place
  // Per launch: whether its output escapes the window (an elementwise launch), or bit o set
  // when its output o does (a reduction's).
  std::vector<uint32_t> escapes_;
  std::vector<std::pair<uintptr_t, uintptr_t>> raw_extents_; // host memrefs' [begin, end)
  std::unique_ptr<RememberedPartition> unremembered_;        // the last batch that could not be
  struct Hash128Hasher {
    size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.low ^ h.high); }
  };
  // Bounded: a window with ever new structures forgets everything at kMaxEntries.
  static constexpr size_t kMaxEntries = 64;
  std::unordered_map<Hash128, std::unique_ptr<RememberedPartition>, Hash128Hasher> entries_;
};

} // namespace torchneuron::tracer

#include "device/caching_allocator.h"

#include <c10/util/Exception.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/device.h"
#include "device/huge_page_memory.h"
#include "support/settings.h"
#include "tracer/unbacked_results.h"

namespace torchneuron {
namespace {

constexpr size_t kAlignment = 64;              // a cache line and an AVX-512 vector
constexpr size_t kSmallGranule = 512;          // size class step below kLargeThreshold
constexpr size_t kLargeThreshold = 1 << 20;    // 1 MiB
constexpr size_t kLargeGranule = 64 << 10;     // size class step from kLargeThreshold up
constexpr size_t kPageBytes = kSmallPageBytes; // huge_page_memory.h
constexpr size_t kMaxRecordedBlocks = 1 << 16; // of blocksInFirstUseOrder()
// Used blocks below this size wait in one list per size class instead of the size-ordered map:
// a tiny op's allocation and release are then a vector pop and push, not a tree node's
// allocation and rebalancing (most of a tiny recorded op's allocation cost).
constexpr size_t kSmallListLimit = 64 << 10;
constexpr size_t kStaggerThreshold = 64 << 10; // blocks from here up start at staggered offsets
constexpr size_t kStaggerSlots = kPageBytes / kAlignment; // cache-line offsets in a page
constexpr size_t kStaggerStep = 23; // coprime with kStaggerSlots: visits every offset

// Large blocks start at staggered cache-line offsets within a page. The C library maps a large
// block on its own pages, so the blocks made before its mmap threshold adapts (all of the warm
// start's, made at import) would otherwise all start at one page offset, and kernels streaming
// over several of them contend for the same cache sets. Measured on the layernorm-residual
// workload (bench/run_workload.py) at 2 threads, eight runs each way alternating warm start on and
// off: 1.51 ms against 1.31 ms with the warm start's blocks all at one offset; 1.33 against 1.30
// staggered. The offset is taken from the allocation's actual place in its page: once the C
// library's mmap threshold has grown, a large block comes from the heap at any 64-byte boundary,
// and a fixed shift would then leave two blocks at one offset by chance (a test saw 7 offsets for
// 8 blocks).
std::atomic<size_t> next_stagger{0};

// A block of `capacity` bytes from the OS, or nullptr when there is no memory. From
// kHugePageBytes up (with NEURON_HUGE_PAGES), its own mapping on a huge-page boundary
// (huge_page_memory.h); below, from the C library.
DeviceBlock* newSystemBlock(size_t capacity) {
  const bool staggered = capacity >= kStaggerThreshold;
  const size_t length = capacity + (staggered ? kPageBytes : 0);
  const bool huge = capacity >= kHugePageBytes && settings().huge_pages;
  void* allocation = huge ? mapHugePageRegion(length) : std::aligned_alloc(kAlignment, length);
  if (allocation == nullptr) return nullptr;
  size_t shift = 0;
  if (staggered) {
    const size_t page_offset = nextStaggeredPageOffset();
    const size_t place = reinterpret_cast<uintptr_t>(allocation) % kPageBytes;
    shift = (page_offset + kPageBytes - place) % kPageBytes; // a multiple of kAlignment
  }
  auto* block = new DeviceBlock();
  block->data = static_cast<char*>(allocation) + shift;
  block->bytes = capacity;
  block->allocation = allocation;
  block->mapped_bytes = huge ? length : 0;
  return block;
}

void freeSystemBlock(DeviceBlock* block) {
  if (block->mapped_bytes != 0)
    unmapHugePageRegion(block->allocation, block->mapped_bytes);
  else
    std::free(block->allocation);
  delete block;
}

void releaseDeviceBlock(void* context);

// Locking: one mutex guards the free lists and the counters. Allocation is a list pop (small
// blocks) or a map lookup, so the critical section is short. pthread_atfork keeps the mutex
// usable in a forked child.
class CachingAllocator final : public c10::Allocator {
public:
  CachingAllocator() {
    pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                   [] { instance().mutex_.unlock(); });
  }

  static CachingAllocator& instance();

  c10::DataPtr allocate(size_t nbytes) const override {
    const c10::Device device(kNeuronDeviceType, 0);
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &releaseDeviceBlock, device);
    // Rounding a size this large up to its class (and adding a stagger) would wrap around to a
    // small block; no memory could hold it anyway.
    TORCH_CHECK(nbytes <= std::numeric_limits<size_t>::max() / 2,
                "[device] out of memory: tried to allocate ", nbytes, " bytes");
    DeviceBlock* block = acquire(nbytes);
    return c10::DataPtr(block->data, block, &releaseDeviceBlock, device);
  }

  // A DataPtr's context is its DeviceBlock, not the data pointer, so no raw deleter.
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void release(DeviceBlock* block) const {
    block->pending.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes -= static_cast<int64_t>(block->bytes);
    if (block->used && block->bytes < kSmallListLimit)
      small_free_[block->bytes / kSmallGranule].push_back(block);
    else
      free_blocks_.emplace(block->bytes, block);
  }

  AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void resetPeaks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void emptyCache() const {
    std::lock_guard<std::mutex> lock(mutex_);
    freeCachedBlocksLocked();
  }

  std::vector<size_t> firstUses() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_uses_;
  }

  void expectPrefaulted(const std::vector<size_t>& capacities) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t capacity : capacities)
      ++announced_[capacity];
  }

  bool prefault(size_t capacity) const {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = announced_.find(capacity);
      if (it == announced_.end() || it->second == 0) return false;
      --it->second;
    }
    DeviceBlock* block = newSystemBlock(capacity);
    if (block == nullptr) return false;
    auto* bytes = static_cast<volatile char*>(block->data);
    for (size_t offset = 0; offset < capacity; offset += kPageBytes)
      bytes[offset] = 0;
    std::lock_guard<std::mutex> lock(mutex_);
    countSystemBlockLocked(*block);
    ++stats_.prefaulted_blocks;
    stats_.prefaulted_bytes += static_cast<int64_t>(capacity);
    free_blocks_.emplace(capacity, block);
    return true;
  }

private:
  DeviceBlock* acquire(size_t nbytes) const {
    const size_t bytes = roundedBlockSize(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.allocations;
    // Best fit among cached blocks, wasting at most 1/8 of the request. A prefaulted block that
    // no tensor has used yet serves only its own capacity: it was made for a request of that
    // size, which would otherwise go to the OS (and the next run's profile would grow).
    if (bytes < kSmallListLimit) {
      const size_t last = std::min(bytes + bytes / 8, kSmallListLimit - 1) / kSmallGranule;
      for (size_t size_class = bytes / kSmallGranule; size_class <= last; ++size_class) {
        std::vector<DeviceBlock*>& list = small_free_[size_class];
        if (list.empty()) continue;
        DeviceBlock* block = list.back();
        list.pop_back();
        ++stats_.cache_hits;
        stats_.allocated_bytes += static_cast<int64_t>(block->bytes);
        stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
        return block; // used before: its first use is recorded
      }
    }
    auto it = free_blocks_.lower_bound(bytes);
    while (it != free_blocks_.end() && it->first <= bytes + bytes / 8 && !it->second->used &&
           it->first != bytes)
      ++it;
    DeviceBlock* block = nullptr;
    if (it != free_blocks_.end() && it->first <= bytes + bytes / 8) {
      // Of the blocks of that capacity, the one freed last (emplace puts equal keys last), whose
      // lines are likeliest still in cache, as the C library's allocators do; the oldest went
      // cold while the others were used.
      // A prefaulted block no tensor has used serves only its own capacity (as above).
      auto last = std::prev(free_blocks_.upper_bound(it->first));
      while (last != it && !last->second->used && last->first != bytes)
        --last;
      it = last;
      block = it->second;
      free_blocks_.erase(it);
      ++stats_.cache_hits;
    } else {
      block = systemAllocateLocked(bytes);
    }
    stats_.allocated_bytes += static_cast<int64_t>(block->bytes);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    if (!block->used) {
      block->used = true;
      if (first_uses_.size() < kMaxRecordedBlocks) first_uses_.push_back(block->bytes);
    }
    return block;
  }

  DeviceBlock* systemAllocateLocked(size_t bytes) const {
    // Made here, so the warm-start thread need not make it too.
    if (auto it = announced_.find(bytes); it != announced_.end() && it->second > 0) --it->second;
    DeviceBlock* block = newSystemBlock(bytes);
    if (block == nullptr) {
      // Cached blocks may be what stands between us and success.
      freeCachedBlocksLocked();
      block = newSystemBlock(bytes);
    }
    TORCH_CHECK(block != nullptr, "[device] out of memory: tried to allocate ", bytes,
                " bytes (allocated ", stats_.allocated_bytes, ", reserved ", stats_.reserved_bytes,
                ")");
    countSystemBlockLocked(*block);
    return block;
  }

  // Counts `block`, now held from the OS.
  void countSystemBlockLocked(const DeviceBlock& block) const {
    const size_t bytes = block.bytes;
    ++stats_.system_allocations;
    if (block.mapped_bytes != 0) {
      ++stats_.huge_page_blocks;
      stats_.huge_page_bytes += static_cast<int64_t>(bytes);
    }
    stats_.reserved_bytes += static_cast<int64_t>(bytes);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }

  void freeCachedBlocksLocked() const {
    for (auto& [bytes, block] : free_blocks_) {
      freeSystemBlock(block);
      stats_.reserved_bytes -= static_cast<int64_t>(bytes);
      ++stats_.system_frees;
    }
    free_blocks_.clear();
    for (std::vector<DeviceBlock*>& list : small_free_) {
      for (DeviceBlock* block : list) {
        stats_.reserved_bytes -= static_cast<int64_t>(block->bytes);
        freeSystemBlock(block);
        ++stats_.system_frees;
      }
      list.clear();
    }
  }

  mutable std::mutex mutex_;
  mutable std::multimap<size_t, DeviceBlock*> free_blocks_;
  // Used blocks below kSmallListLimit, by size class (bytes / kSmallGranule).
  mutable std::vector<std::vector<DeviceBlock*>> small_free_ =
      std::vector<std::vector<DeviceBlock*>>(kSmallListLimit / kSmallGranule);
  mutable AllocatorStats stats_;
  mutable std::vector<size_t> first_uses_;
  mutable std::unordered_map<size_t, int64_t> announced_; // capacity -> blocks still to prefault
};

// Never destroyed: tensors may be freed during interpreter shutdown after static destructors.
CachingAllocator& CachingAllocator::instance() {
  static auto* allocator = new CachingAllocator();
  return *allocator;
}

void releaseDeviceBlock(void* context) {
  if (context != nullptr) CachingAllocator::instance().release(static_cast<DeviceBlock*>(context));
}

} // namespace

c10::Allocator* neuronAllocator() { return &CachingAllocator::instance(); }

size_t nextStaggeredPageOffset() {
  return next_stagger.fetch_add(1) * kStaggerStep % kStaggerSlots * kAlignment;
}

size_t roundedBlockSize(size_t nbytes) {
  const size_t granule = nbytes < kLargeThreshold ? kSmallGranule : kLargeGranule;
  return (nbytes + granule - 1) / granule * granule;
}

AllocatorStats allocatorStats() { return CachingAllocator::instance().stats(); }
void resetPeakAllocatorStats() { CachingAllocator::instance().resetPeaks(); }
void emptyAllocatorCache() { CachingAllocator::instance().emptyCache(); }

std::vector<size_t> blocksInFirstUseOrder() { return CachingAllocator::instance().firstUses(); }
void expectPrefaultedBlocks(const std::vector<size_t>& capacities) {
  CachingAllocator::instance().expectPrefaulted(capacities);
}
bool prefaultBlock(size_t capacity) { return CachingAllocator::instance().prefault(capacity); }

DeviceBlock* deviceBlockOf(const c10::Storage& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  if (ptr.get_deleter() != &releaseDeviceBlock) return nullptr;
  return static_cast<DeviceBlock*>(ptr.get_context());
}

void materializeStorage(const c10::Storage& storage) {
  // An unbacked result still without memory here was orphaned by a window whose batch failed to
  // get memory for it (tracer/result_backing.h); every other one got memory when its window ran,
  // which the host access ran first.
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  if (impl != nullptr && tracer::isUnbacked(impl)) tracer::backStorage(impl);
  DeviceBlock* block = deviceBlockOf(storage);
  if (block == nullptr || !block->pending) return;
  std::shared_ptr<PendingContents> pending = std::move(block->pending);
  pending->materialize();
}

REGISTER_ALLOCATOR(kNeuronDeviceType, &CachingAllocator::instance());

} // namespace torchneuron

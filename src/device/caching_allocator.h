#pragma once
// Device memory: host memory handed out by a caching allocator, so that freed blocks are
// reused instead of returned to the OS (a fresh 64 MB buffer costs ~180 ms of 4 KiB page faults;
// blocks of 2 MiB and up are mapped on huge pages, huge_page_memory.h, which cuts that to ~4 ms).

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace torchneuron {

// Contents of a device storage that are not in memory yet (DESIGN.md decision 4): the lazy op
// window that will produce them. Every host access of a storage materializes it first.
class PendingContents {
public:
  virtual ~PendingContents() = default;
  // Writes the storage's bytes; called once, before the first host access.
  virtual void materialize() = 0;
};

// One block of device memory. It is the DataPtr context of every non-empty device storage.
// Locking: `pending` is set and cleared by the thread that records into the owning window.
struct DeviceBlock {
  void* data = nullptr;
  size_t bytes = 0;           // capacity: the request rounded up to its size class
  void* allocation = nullptr; // what the C library handed out; `data` lies at an offset in it
  size_t mapped_bytes = 0;    // not 0: `allocation` is a huge-page mapping of this many bytes
  std::shared_ptr<PendingContents> pending;
  bool used = false; // a tensor has held it (a pre-faulted block has not, at first)
};

// Counters of the allocator. All byte counts are block capacities (see roundedBlockSize).
struct AllocatorStats {
  int64_t allocated_bytes = 0;      // in live tensors
  int64_t peak_allocated_bytes = 0; // since start or resetPeakAllocatorStats()
  int64_t reserved_bytes = 0;       // held from the OS: allocated plus cached free blocks
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;        // allocate() calls with a non-zero size
  int64_t cache_hits = 0;         // of those, served from a cached block
  int64_t system_allocations = 0; // blocks obtained from the OS
  int64_t system_frees = 0;       // blocks returned to the OS
  int64_t prefaulted_blocks = 0;  // of system_allocations, made ahead of need (warm start)
  int64_t prefaulted_bytes = 0;
  // Of system_allocations, blocks mapped on huge-page boundaries with huge pages asked for
  // (NEURON_HUGE_PAGES, huge_page_memory.h), and their bytes.
  int64_t huge_page_blocks = 0;
  int64_t huge_page_bytes = 0;
};

// The allocator of every neuron device storage.
c10::Allocator* neuronAllocator();

// The capacity of the block that a request of `nbytes` gets when no cached block is reused.
size_t roundedBlockSize(size_t nbytes);

// The offset, a multiple of 64 bytes below 4 KiB, at which the next large block starts within
// its page: successive calls visit every cache-line offset, so buffers streamed together do not
// share cache sets (caching_allocator.cpp). The benchmark's limit buffers use it too.
size_t nextStaggeredPageOffset();

AllocatorStats allocatorStats();
void resetPeakAllocatorStats();

// Returns every cached (free) block to the OS; live tensors are untouched.
void emptyAllocatorCache();

// Warm start (device/warm_start.h). The capacities of the blocks this process has handed to
// tensors, in the order each was first handed out (at most 65536 are recorded).
std::vector<size_t> blocksInFirstUseOrder();
// Announces blocks that a background thread will make with prefaultBlock(). A request that
// finds no cached block takes its size off the announced ones, so that no more than the
// announced blocks are ever made ahead of need.
void expectPrefaultedBlocks(const std::vector<size_t>& capacities);
// Makes one announced block of `capacity` bytes, touches every page of it (outside the lock)
// and caches it as free. False when no block of that capacity is still announced.
bool prefaultBlock(size_t capacity);

// The block behind a device storage, or nullptr for an empty storage.
DeviceBlock* deviceBlockOf(const c10::Storage& storage);

// Ensures the storage's bytes are in memory (runs a pending producer, if any; gives an unbacked
// result orphaned by a failed window its memory).
void materializeStorage(const c10::Storage& storage);

} // namespace torchneuron

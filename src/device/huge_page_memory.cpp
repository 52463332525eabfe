#include "device/huge_page_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <limits>

namespace torchneuron {
namespace {

size_t mappedLength(size_t bytes) {
  return (bytes + kSmallPageBytes - 1) / kSmallPageBytes * kSmallPageBytes;
}

} // namespace

void* mapHugePageRegion(size_t bytes) {
  // Past this, rounding and over-mapping would wrap around: no mapping could be that large.
  if (bytes > std::numeric_limits<size_t>::max() / 2) return nullptr;
  const size_t length = mappedLength(bytes);
  // Over-map by one huge page and trim both ends: the kept part starts on a boundary. Its end is
  // not rounded up to one: the last partial huge page stays in 4 KiB pages rather than backing
  // memory past the block.
  const size_t reserved = length + kHugePageBytes;
  void* raw = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t end = aligned + length;
  if (aligned > start) munmap(raw, aligned - start);
  if (start + reserved > end) munmap(reinterpret_cast<void*>(end), start + reserved - end);
  // Advice only: where the kernel has no huge pages it fails (EINVAL), and the mapping works in
  // 4 KiB pages.
  madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmapHugePageRegion(void* region, size_t bytes) {
  if (region != nullptr) munmap(region, mappedLength(bytes));
}

} // namespace torchneuron

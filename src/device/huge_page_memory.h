#pragma once
// Large device blocks on transparent huge pages. The first touch of a 4 KiB page costs a page
// fault (about 13 us on this VM: a fresh 64 MiB block took 210-235 ms to fill); a 2 MiB huge page
// is faulted in once for 512 of them (the same fill took 5 ms). The kernel grants huge pages to
// a mapping that asks for them (madvise, MADV_HUGEPAGE) when
// /sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise`; with `never`, or without
// a free 2 MiB page, the mapping is faulted in 4 KiB pages as before.

#include <cstddef>

namespace torchneuron {

// The size of a huge page, and the alignment of every mapping below.
constexpr size_t kHugePageBytes = size_t{2} << 20;
// The smallest page: one write faults it in, and mappings are whole numbers of them.
constexpr size_t kSmallPageBytes = 4096;

// A private anonymous mapping of `bytes` (rounded up to whole 4 KiB pages) that starts on a
// huge-page boundary and asks for huge pages; nullptr when the OS refuses the mapping (out of
// memory or address space). The memory reads as zeros. Release it with unmapHugePageRegion and
// the same `bytes`.
void* mapHugePageRegion(size_t bytes);
void unmapHugePageRegion(void* region, size_t bytes);

} // namespace torchneuron

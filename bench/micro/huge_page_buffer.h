#pragma once
// Buffers for the triad and the limit loops on the pages device memory has: a buffer of 2 MiB
// and up is a huge-page mapping when NEURON_HUGE_PAGES is on, as a device block of that size is
// (device/huge_page_memory.h), so that the device is never compared with a limit on other pages
// (address translation alone moved a fused step by up to 1.7x on this VM). Like device blocks,
// the buffers start at staggered cache-line offsets within their first page, so that buffers
// streamed together do not share cache sets (nextStaggeredPageOffset, caching_allocator.h).

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "device/caching_allocator.h"
#include "device/huge_page_memory.h"
#include "support/settings.h"

template <typename T> class HugePageAllocator {
public:
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U> HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (!onHugePages(bytes)) return static_cast<T*>(::operator new(bytes));
    void* region = torchneuron::mapHugePageRegion(bytes + torchneuron::kSmallPageBytes);
    if (region == nullptr) throw std::bad_alloc();
    return reinterpret_cast<T*>(static_cast<char*>(region) +
                                torchneuron::nextStaggeredPageOffset());
  }

  void deallocate(T* data, size_t count) {
    const size_t bytes = count * sizeof(T);
    if (onHugePages(bytes)) // the region starts on the huge-page boundary below `data`
      torchneuron::unmapHugePageRegion(
          reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(data) /
                                  torchneuron::kHugePageBytes * torchneuron::kHugePageBytes),
          bytes + torchneuron::kSmallPageBytes);
    else
      ::operator delete(data);
  }

  template <typename U> bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <typename U> bool operator!=(const HugePageAllocator<U>&) const { return false; }

private:
  static bool onHugePages(size_t bytes) {
    return bytes >= torchneuron::kHugePageBytes && torchneuron::settings().huge_pages;
  }
};

template <typename T> using HugePageVector = std::vector<T, HugePageAllocator<T>>;

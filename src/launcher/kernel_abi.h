#pragma once
// The kernel ABI every compiled kernel exports: arguments in 8-byte slots and the [begin, end)
// range of the outer parallel dimension this call covers. KernelArguments is the one place that
// writes slots: each memref operand (outputs first, then inputs) as its descriptor (allocated
// pointer, aligned pointer, offset 0, sizes, strides), then the op's run-time scalars (f64 bits
// for float compute, i64 otherwise), then trailing integers (a reduction's element count); the
// kernel builders (fusion/kernel_builder.h) declare the functions that read them in that order.

#include <cstdint>
#include <cstring>
#include <vector>

namespace torchneuron {

using KernelFunction = void (*)(const int64_t* slots, int64_t begin, int64_t end);

// The slot of a run-time scalar of a float-compute kernel: the bits of its f64 value (integer
// kernels take the i64 value itself).
inline int64_t floatSlot(double value) {
  int64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The slots of one call, written in ABI order.
class KernelArguments {
public:
  KernelArguments() = default;
  KernelArguments(const KernelArguments&) = delete;
  KernelArguments& operator=(const KernelArguments&) = delete;

  // A strided memref of `rank` dimensions over `data` (sizes and strides in elements).
  void memref(const void* data, const int64_t* sizes, const int64_t* strides, int64_t rank) {
    const auto address = reinterpret_cast<int64_t>(data);
    push(address);
    push(address);
    push(0);
    for (int64_t d = 0; d < rank; ++d)
      push(sizes[d]);
    for (int64_t d = 0; d < rank; ++d)
      push(strides[d]);
  }
  // A run-time scalar or trailing integer, as its slot (floatSlot for float compute).
  void word(int64_t slot) { push(slot); }

  const int64_t* slots() const { return spill_.empty() ? inline_ : spill_.data(); }
  int64_t size() const { return size_; }

private:
  // Inline slots cover every common call (five rank-6 operands and a few scalars) without
  // allocating; more spill to the heap.
  static constexpr int64_t kInlineSlots = 96;

  void push(int64_t value) {
    if (size_ < kInlineSlots) {
      inline_[size_++] = value;
      return;
    }
    if (spill_.empty()) spill_.assign(inline_, inline_ + kInlineSlots);
    spill_.push_back(value);
    ++size_;
  }

  int64_t inline_[kInlineSlots];
  std::vector<int64_t> spill_;
  int64_t size_ = 0;
};

} // namespace torchneuron

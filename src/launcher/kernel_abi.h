#pragma once
// The kernel ABI every compiled kernel exports: arguments in 8-byte slots (pointers, sizes,
// strides, scalar bits; see fusion/kernel_builder.h for the order) and the [begin, end) range
// of the outer parallel dimension this call covers.

#include <cstdint>

namespace torchneuron {

using KernelFunction = void (*)(const int64_t* slots, int64_t begin, int64_t end);

} // namespace torchneuron

#pragma once
// One launch over a table of kernel calls (DESIGN.md decision 8): every entry is a kernel with its
// own arguments and range, and the entries are independent (none reads what another writes). The
// table's total work is split into parts of about equal work, each a run of whole small entries
// or a slice of a large one, and the parts run across the TBB workers as one parallel launch: a
// list of a hundred small tensors (an optimizer's biases) costs one launch, not a hundred, and a
// list of large ones splits like one large tensor. Used by the multi-tensor ops (_foreach_*,
// device/list_launch.h).

#include <cstddef>
#include <cstdint>

#include "launcher/kernel_abi.h"

namespace torchneuron {

struct TableEntry {
  KernelFunction kernel = nullptr;
  const int64_t* slots = nullptr; // the kernel's argument slots, alive until the launch returns
  int64_t range = 0;              // extent of the entry's outer dimension
  int64_t work_per_index = 1;     // elements touched per outer index (the cost estimate)
};

// Runs every entry over [0, range) of its outer dimension, on at most `threads` threads; inline on
// the calling thread, in table order, when the whole table's work is small.
void launchKernelTable(const TableEntry* entries, size_t count, int threads);

} // namespace torchneuron

#pragma once
// Runs a kernel over [0, range) of its outer dimension (DESIGN.md decision 8): inline on the
// calling thread when the work is small, else split into parts run by as many threads as
// PyTorch's intra-op thread count. The threads are PyTorch's own OpenMP team by default
// (NEURON_LAUNCH_POOL=openmp): a device step alternates compiled kernels with ATen's CPU kernels
// (library ops), and ATen's OpenMP workers spin for a while after each of its parallel regions; a
// second pool's workers (TBB's) then shared two cores with spinning threads, and 2-thread steps
// ran 2-3x slower than at 1 thread in about half the processes (docs/architecture.md,
// "Parallelism"). NEURON_LAUNCH_POOL=tbb runs the parts in a TBB arena instead.

#include <cstdint>
#include <functional>

#include "launcher/kernel_abi.h"

namespace torchneuron {

struct LaunchShape {
  int64_t range = 0;          // extent of the outer dimension
  int64_t work_per_index = 1; // elements touched per outer index (the cost estimate)
  int threads = 1;            // at most this many threads (torch.get_num_threads())
};

// Work below this many elements runs inline: splitting costs more than it saves.
constexpr int64_t kInlineWorkLimit = 32768;

void launchKernel(KernelFunction kernel, const int64_t* slots, const LaunchShape& shape);

// Whether launches run inline on the calling thread: after runLaunchesInline(), or in a forked
// child (which this call notices, and from then on runs every launch inline).
bool launchesRunInline();

// Runs part(0) ... part(parts - 1), each once, on at most `threads` threads of the launch pool
// (the calling thread among them); they may run in any order and at once. Inside an OpenMP
// parallel region they run on the calling thread.
void runParts(int threads, int64_t parts, const std::function<void(int64_t)>& part);

// From now on every launch runs inline on the calling thread. A forked child does this itself
// (TBB's workers did not survive the fork, and its arenas are not used there).
void runLaunchesInline();

} // namespace torchneuron

#pragma once
// Runs a kernel over [0, range) of its outer dimension (DESIGN.md decision 8): inline on the
// calling thread when the work is small, else split across TBB workers, as many as PyTorch's
// intra-op thread count so TBB and PyTorch's OpenMP never oversubscribe the machine.

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

// Runs `work` inside the TBB arena of `threads` threads, whose parallel loops then use at most
// that many (launchKernel's own arenas).
void runOnLaunchThreads(int threads, const std::function<void()>& work);

// From now on every launch runs inline on the calling thread. A forked child does this itself
// (TBB's workers did not survive the fork, and its arenas are not used there).
void runLaunchesInline();

} // namespace torchneuron

#pragma once
// Warm start: a rerun of a program starts with its kernels linked and its memory faulted in.
//
// At exit a process writes a profile of what it used (the persistent-store keys of its kernels
// and the capacities of its memory blocks, each in first-use order; cache/warm_start_profile.h).
// When the same program (same working directory and command line) starts again, a background
// thread reads that profile and, while the program imports and builds its model, links the
// listed kernels from the persistent store (each verified as any cached kernel is) and makes the
// listed memory blocks, touching every page, into the caching allocator's free lists. The first
// iteration then finds both ready instead of paying for the store, the link and first-touch page
// faults. docs/warm-start.md.
//
// Settings: NEURON_WARM_START=0 turns it off (nothing read, nothing written); it is off whenever
// the persistent cache is (NEURON_CACHE=0). NEURON_WARM_START_MAX_BYTES caps the memory made
// ahead of need (default 1 GiB, and never more than a quarter of the memory available at start).

#include <cstdint>

namespace torchneuron {

struct WarmStartStats {
  bool profile_found = false; // a usable profile of this program was read
  int64_t kernels_listed = 0; // in that profile
  int64_t kernels_prefetched = 0;
  int64_t blocks_listed = 0;
  int64_t bytes_listed = 0;
  int64_t bytes_prefaulted = 0;
  double background_ms = 0; // the thread's wall time, once it is done
  bool done = false;        // nothing more will happen: the thread ended, or the warm start is off
};

// Starts the background thread (at most once per process; a no-op when turned off).
void startWarmStart();
// Stops the thread (it finishes the item in hand) and writes this run's profile when it differs
// from the one read. Called at interpreter exit; later calls do nothing.
void finishWarmStart();

WarmStartStats warmStartStats();

} // namespace torchneuron

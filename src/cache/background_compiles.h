#pragma once
// Eager kernels compiled on one background thread, so that a cold start does not wait for them
// (issue 15, "no cold-start penalty"): an op whose kernel is not loaded yet runs ATen's CPU
// kernel at once (device/interim_launch.h) while its kernel compiles here, and its later calls
// find the kernel in the memory tier (kernel_cache.h, loadedKernel()). Compiles go through
// kernelFor() like the dispatch thread's, so they are single-flight with them, written to the
// persistent cache and published to the remote tier, and a failure is remembered by the kernel
// cache: the op's next call finds the failed entry and takes the fallback with its one warning.
// A compile that throws an internal error is marked (backgroundCompileThrew()) so that the next
// call compiles on its own thread and the error reaches the caller, as it does without this.
//
// Locking: one mutex (ForkRank::kBackgroundCompiles), a leaf held only to read or change the
// queue; compiles run outside it. Across fork(): the child drops the queue and the running
// compile (its calls queue again what they need) and starts a worker of its own on demand.
// At exit the worker finishes the queue first (torchneuron's atexit, waitForBackgroundCompiles()),
// so that the next process loads what this one used instead of starting cold again.

#include <cstdint>
#include <functional>
#include <string>

#include "support/hash.h"

namespace torchneuron {

// Queues the compile of the kernel `key` from `mlir` (what its build_mlir returns), unless it is
// queued or compiling already. False when it cannot be queued (the worker thread could not be
// started, or the process is exiting): the caller compiles it itself.
bool compileInBackground(Hash64 key, std::string mlir);

// Whether the kernel `key` is queued or compiling.
bool compilingInBackground(Hash64 key);

// Whether a background compile of `key` threw an internal error (then not retried there).
bool backgroundCompileThrew(Hash64 key);

// Returns once nothing is queued or compiling (torchneuron.wait_for_compiles(), at exit).
void waitForBackgroundCompiles();

struct BackgroundCompileStats {
  int64_t queued = 0;  // compiles ever queued
  int64_t pending = 0; // of those, queued or compiling now
};
BackgroundCompileStats backgroundCompileStats();

} // namespace torchneuron

#pragma once
// The adaptive tracer's second level of captures (tracer.h, CallCacheHooks): a deferred call
// whose trie node's capture does not match it (the same op with other sizes: a loop over
// batches of varying lengths) is looked up here by its fingerprint before it is planned again.
// A trie node keeps one capture, the last one made there, so without this level a window whose
// sizes cycle through several values planned every deferred call of it (varlen-loop: 0 of 16,800
// deferred calls replayed).
//
// It holds only captures made while deferring, apart from the eager call cache's
// (eager_call_cache.h), so that each kind of replay reads captures made its own way. Per thread
// (no lock: each thread looks in its own table) and set-associative by op and fingerprint, 1,024
// captures a thread; a new capture replaces the oldest of its set. Captures hold their kernels,
// as the eager cache's do.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>

namespace torchneuron {

// Replays, deferred, a capture of this thread's table whose fingerprint equals the call's on top
// of `stack`, and returns it; null, touching nothing, when none does.
std::shared_ptr<const void> replayKeptDeferredCall(const c10::OperatorHandle& op,
                                                   torch::jit::Stack* stack);

// Keeps `captured` (a CapturedCall endCallCapture made for a deferred call of `op`) in this
// thread's table.
void keepDeferredCall(const c10::OperatorHandle& op, std::shared_ptr<const void> captured);

} // namespace torchneuron

#pragma once
// Eager mode's call cache: a compiled call whose arguments look exactly like an earlier call's
// (the same op, dtypes, sizes, strides, offsets, storage and tensor sharing, number values and
// default dtype: plan_replay.h's fingerprint) replays that call's capture: its outputs are
// allocated and its kernels launched, without binding, planning or kernel lookup. Planning is
// most of a tiny op's cost (an add of 32 elements: ~60% of the call below Python).
//
// A call is captured the second time its fingerprint reaches its slot (TinyJit's rule: code
// whose numbers change every call, a decaying learning rate, pays the fingerprint only), and
// one that cannot be captured (plan_replay.h) is remembered as such. The cache is per thread
// (no lock) and direct-mapped: a slot holds one capture, and a new one replaces it. Captures
// hold their kernels, so a kernel the memory tier evicts stays linked while a capture holds it.
// Replays do not count as kernel-cache hits.
//
// NEURON_EAGER_CALL_CACHE=0 turns it off (every call is planned). It serves eager mode and, in
// adaptive mode, the calls the tracer runs without deferring them (CallCacheHooks::run_eager);
// deferred calls replay the tracer's own capture per trie node (tracer/tracer.h).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

#include "tracer/tracer.h"

namespace torchneuron {

// Runs the compiled route's call through the cache: replays a capture, or runs `kernel` (a
// compiled route kernel, op_routing.h), capturing it when it recurs. Returns what `kernel`
// returns (true for a replay).
bool runWithEagerCallCache(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                           tracer::CompiledKernelFunction kernel);

// metrics()["eager_call_cache"], since the last reset_metrics().
struct EagerCallCacheStats {
  bool enabled = true;
  int64_t replays = 0;      // calls run from a capture
  int64_t captures = 0;     // captures made
  int64_t uncapturable = 0; // recurring calls found not capturable (planned every time)
};
EagerCallCacheStats eagerCallCacheStats();
void resetEagerCallCacheStats();

} // namespace torchneuron

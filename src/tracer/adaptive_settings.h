#pragma once
// The adaptive tracer's NEURON_ADAPTIVE_* settings (README, "Environment variables"), read at
// import. A value outside its type or range is an error naming the variable and the value.

#include <cstdint>
#include <functional>

namespace torchneuron::tracer {

struct AdaptiveSettings {
  bool enabled = false;                      // NEURON_ADAPTIVE_EAGER
  int64_t threshold = 2;                     // NEURON_ADAPTIVE_THRESHOLD: occurrences to be hot
  int64_t window_ops = 512;                  // NEURON_ADAPTIVE_WINDOW: ops per window at most
  int64_t window_bytes = int64_t{256} << 10; // NEURON_ADAPTIVE_WINDOW_BYTES: pending bytes
  // NEURON_ADAPTIVE_MIN_BYTES: a compiled call is deferred only when one of its tensors holds
  // more bytes than this; smaller calls run eagerly (the eager call cache replays them for less
  // than recording costs). 0: every call the tracer can defer is deferred.
  int64_t min_bytes = int64_t{32} << 10;
  bool debug = false;         // NEURON_ADAPTIVE_DEBUG
  bool explain = false;       // NEURON_ADAPTIVE_EXPLAIN
  bool fusion = true;         // NEURON_ADAPTIVE_FUSION: fuse hot windows
  bool sync_compiles = false; // NEURON_ADAPTIVE_SYNC: wait for fused compiles
  // NEURON_ADAPTIVE_UNBACKED: results recorded into a window that runs fused get memory only if
  // something reads them (unbacked_results.h).
  bool unbacked = true;
  // NEURON_ADAPTIVE_ACCUMULATE: a matrix product whose only use is an in-place add into another
  // tensor adds itself into it (accumulating_products.h).
  bool accumulate = true;
};

// Reads the settings through `lookup` (nullptr: unset); throws std::invalid_argument naming the
// variable and the value when one is malformed or out of range.
AdaptiveSettings parseAdaptiveSettings(const std::function<const char*(const char*)>& lookup);

} // namespace torchneuron::tracer

#pragma once
// NEURON_FALLBACK: what happens when an op has no device kernel.

#include <string>

namespace torchneuron {

enum class FallbackPolicy { kWarn, kSilent, kError };

// Reads NEURON_FALLBACK (warn, silent or error; default warn) on every call so that a script
// or a test may change it at run time. A bad value is an error that names the value.
FallbackPolicy currentFallbackPolicy();

// True the first time it is called for `op_name` in this process (thread-safe).
bool firstFallbackOf(const std::string& op_name);

} // namespace torchneuron

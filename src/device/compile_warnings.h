#pragma once
// The warning a kernel signature gives when it cannot be compiled and runs on the CPU instead.

#include <string>

#include "support/hash.h"

namespace torchneuron {

// Warns once per kernel key (thread-safe), naming the signature and the compiler's reason.
void warnCompileFailureOnce(Hash64 key, const std::string& signature, const std::string& reason);

} // namespace torchneuron

#pragma once
// Links kernel object code into the process with LLVM ORC and returns its entry points.

#include <string>
#include <vector>

#include "launcher/kernel_abi.h"

namespace torchneuron {

// Links `object` (an ELF relocatable object) and returns the address of `entry`. Symbols the
// object needs (libm, glibc's libmvec) resolve against the process. Thread-safe. Throws
// std::runtime_error starting with "[launcher]" when linking or the lookup fails.
KernelFunction loadKernelObject(const std::vector<char>& object, const std::string& entry);

}  // namespace torchneuron

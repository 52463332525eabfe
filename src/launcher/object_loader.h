#pragma once
// Links kernel object code into the process with LLVM ORC and returns its entry points.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "launcher/kernel_abi.h"

namespace torchneuron {

// One linked object. Its code stays mapped, and `function` callable, while any reference to it
// lives; the last reference unlinks it (memory freed, symbols removed from the process's JIT).
// Objects are linked apart, so one entry name may be linked more than once.
class LoadedCode {
public:
  LoadedCode(KernelFunction function, size_t bytes, void* dylib);
  ~LoadedCode();
  LoadedCode(const LoadedCode&) = delete;
  LoadedCode& operator=(const LoadedCode&) = delete;

  KernelFunction function() const { return function_; }
  size_t bytes() const { return bytes_; } // the object's size, the measure of its footprint

private:
  KernelFunction function_;
  size_t bytes_;
  void* dylib_; // the ORC JITDylib holding the code (its type kept out of this header)
};

// Links `object` (an ELF relocatable object) and returns its code with the address of `entry`.
// Symbols the object needs (libm, glibc's libmvec) resolve against the process. Thread-safe.
// Throws EnvironmentError (support/errors.h) starting with "[launcher]" when linking or the
// lookup fails.
std::shared_ptr<LoadedCode> loadKernelObject(const std::vector<char>& object,
                                             const std::string& entry);

} // namespace torchneuron

#pragma once
// The kinds of failure a kernel's compile-and-load can end in, which the kernel cache treats
// differently (docs/persistent-cache.md, "Failures"):
// - CompileError: MLIR or LLVM rejected the kernel's module. A property of the module, so the
//   failure is remembered (in memory and in the persistent store) and the kernel falls back.
// - EnvironmentError (and std::bad_alloc): this process's circumstances (address space, the
//   ORC link, the host) failed it. The kernel falls back in this process; nothing is persisted,
//   so the next process tries again.
// - Anything else is an internal error (TORCH_INTERNAL_ASSERT, a bug of ours): it propagates to
//   the op's caller.

#include <stdexcept>
#include <string>

namespace torchneuron {

class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class EnvironmentError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace torchneuron

#pragma once
// The device target (DESIGN.md "The device target"): the one seam between kernels and the machine
// that runs them. A target lowers a kernel's MLIR to its own IR, emits object code, links it into
// the process and launches it; its description says exactly how it compiles, and is what every
// persistent cache key holds about the compiler (DESIGN.md decision 3). The host CPU
// (host_cpu_target.h) is the one implementation.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fusion/compiler.h"
#include "launcher/object_loader.h"
#include "launcher/parallel_launch.h"
#include "launcher/table_launch.h"

namespace torchneuron {

// What a target compiles for and how. Every field is what the target's compile runs, printed by
// the library that runs it; none is a hand-maintained name, a build id or a path.
struct TargetDescription {
  std::string name;                  // "host-cpu"
  std::string triple;                // LLVM's target triple
  std::string cpu;                   // the CPU the code is tuned for
  std::string features;              // "+avx2,+fma,..." as LLVM spells them, sorted
  std::string llvm_version;          // the LLVM that compiles
  std::string lowering_pipeline;     // the MLIR pipeline to the LLVM dialect, as MLIR prints it
  std::string optimization_pipeline; // the LLVM pipeline, as LLVM prints it, and codegen level
  std::string vector_math;           // the vector-math (veclib) table given to LLVM

  // The compile's options in a persistent key: the target's name, its three pipeline fields
  // (the lowering pipeline in full, the other two as XXH3-128 digests: they run to kilobytes),
  // one per line. With the triple, the features and the LLVM version (kept in entries as fields
  // of their own) and the codegen fingerprint, it decides the code a kernel compiles to. The CPU
  // name is left out: it tunes scheduling only, and code for the same features runs on any of
  // them, so nodes of one cluster share entries.
  std::string compileOptions() const;

  bool operator==(const TargetDescription& other) const;
};

// A kernel in the target's own IR (LLVM IR on the host CPU), lowered and optimized, ready for
// emitObject() of the target that made it.
class LoweredKernel {
public:
  virtual ~LoweredKernel() = default;
  virtual const std::string& entry() const = 0;
  virtual std::string text() const = 0; // the IR (tests and debugging)
};

using ObjectCode = fusion::ObjectCode;

// Thread-safe, every method. Errors as fusion/compiler.h's (lowering, emission) and
// launcher/object_loader.h's (linking) state them.
class Target {
public:
  virtual ~Target() = default;

  virtual const TargetDescription& description() const = 0;

  // A module holding `func.func @kernel(...)` (fusion/kernel_builder.h), lowered with the slot
  // entry point `entry` (launcher/kernel_abi.h) added.
  virtual std::unique_ptr<LoweredKernel> lower(const std::string& mlir_module,
                                               const std::string& entry) const = 0;
  virtual ObjectCode emitObject(std::unique_ptr<LoweredKernel> kernel) const = 0;

  // Links object code this target emitted (perhaps another process) and finds `entry` in it.
  virtual std::shared_ptr<LoadedCode> link(const std::vector<char>& object,
                                           const std::string& entry) const = 0;
  // Runs a linked kernel over [0, shape.range) of its outer dimension.
  virtual void launch(KernelFunction kernel, const int64_t* slots,
                      const LaunchShape& shape) const = 0;
  // Runs independent kernel calls as one launch on at most `threads` threads
  // (launcher/table_launch.h).
  virtual void launchTable(const TableEntry* entries, size_t count, int threads) const = 0;

  // lower(), then emitObject().
  ObjectCode compile(const std::string& mlir_module, const std::string& entry) const;
};

// The target device kernels compile for: the host CPU with the default codegen options. Made at
// first use, never destroyed (kernels outlive exit).
const Target& deviceTarget();

} // namespace torchneuron

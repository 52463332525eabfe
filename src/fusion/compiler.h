#pragma once
// MLIR to object code for the host CPU: the device target's compile step. The pass pipeline
// is assembled in one place (kLoweringPipeline) so tests can run the same one with mlir-opt.

#include <string>
#include <vector>

namespace torchneuron::fusion {

// The passes from the kernel dialects (linalg, arith, math, memref, scf) to the LLVM dialect, on
// a builtin.module: `mlir-opt-19 --pass-pipeline="builtin.module(<this>)"` runs the same.
extern const char* const kLoweringPipeline;

// What object code is compiled for; part of every persistent cache key.
struct TargetDescription {
  std::string triple;
  std::string cpu;
  std::string features; // "+avx2,+fma,..." as LLVM spells them
  std::string llvm_version;
};

const TargetDescription& hostTarget();

struct ObjectCode {
  std::vector<char> bytes; // an ELF relocatable object
  std::string entry;       // its exported kernel symbol
};

// Compiles a module holding `func.func @kernel(...)` (see kernel_builder.h) and wraps it in
// `void entry(const int64_t* slots, int64_t begin, int64_t end)`, which reads each kernel
// argument from one 8-byte slot. Thread-safe (compiles are serialized; fork() waits for one in
// progress, and a forked child compiles as the parent does). Errors start with "[fusion]"
// (support/errors.h): CompileError when MLIR or LLVM rejects the module (with MLIR's
// diagnostics), EnvironmentError when this process cannot compile (no target, under 64 MiB of
// address space left below RLIMIT_AS), std::bad_alloc when LLVM runs out of memory, and
// std::logic_error when the module breaks the kernel builder's contract.
ObjectCode compileKernel(const std::string& mlir_module, const std::string& entry);

// The module after kLoweringPipeline, as text (tests and debugging).
std::string lowerToLLVMDialect(const std::string& mlir_module);

// The optimized LLVM IR that compileKernel turns into object code (tests and debugging).
std::string optimizedLLVMIR(const std::string& mlir_module, const std::string& entry);

} // namespace torchneuron::fusion

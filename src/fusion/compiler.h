#pragma once
// MLIR to object code for the host CPU: the code generator behind the host target
// (target/host_cpu_target.h). Every choice that changes the code a kernel compiles to is a
// CodegenOptions field, and describeCodegen() prints those choices from the same pass managers
// and tables a compile builds from them, so a persistent key states what the compiler runs.

#include <memory>
#include <string>
#include <vector>

namespace torchneuron::fusion {

// The passes from the kernel dialects (linalg, arith, math, memref, scf) to the LLVM dialect, on
// a builtin.module: `mlir-opt-19 --pass-pipeline="builtin.module(<this>)"` runs the same.
extern const char* const kLoweringPipeline;

// A function attribute a kernel builder may give `@kernel` (func.func's `passthrough` list) when
// no two of its memref arguments alias where one is written: the compiler then marks every
// pointer argument noalias, so LLVM vectorizes without runtime overlap checks.
constexpr const char* kNoAliasMemrefs = "neuron-noalias-memrefs";

// The host that object code is compiled for, from LLVM's host queries (no compiler state).
struct HostCpu {
  std::string triple;
  std::string cpu;
  std::string features; // "+avx2,+fma,..." as LLVM spells them, sorted
  std::string llvm_version;
};

const HostCpu& hostCpu();

// How kernel MLIR becomes object code. The defaults are what the device compiles with.
struct CodegenOptions {
  std::string lowering_pipeline = kLoweringPipeline; // MLIR passes, as kLoweringPipeline
  int optimization_level = 3; // 0-3: LLVM's per-module default pipeline and code generator
  bool vectorize = true;      // LLVM's loop and SLP vectorizers
  bool vector_math = true;    // vectorized math calls through glibc's libmvec
};

// The code generator's configuration as it runs, each part printed by the library that runs it.
struct CodegenDescription {
  std::string lowering_pipeline; // MLIR's print of the parsed pipeline, every option spelled out
  std::string optimization_pipeline; // LLVM's print of the module pipeline (`opt -passes=`
                                     // syntax), then the code generator's level
  std::string vector_math;           // the vector-function table LLVM is given ("none" when off)
};

// Thread-safe (serialized with compiles). Needs no MLIR context. Throws std::logic_error
// starting with "[fusion]" when the options are invalid (a pipeline that does not parse, a level
// outside 0-3).
CodegenDescription describeCodegen(const CodegenOptions& options);

struct ObjectCode {
  std::vector<char> bytes; // an ELF relocatable object
  std::string entry;       // its exported kernel symbol
};

// A kernel module lowered to optimized LLVM IR with its slot entry point (see lowerKernel),
// ready for emitObjectCode. Owns its LLVM context; remembers the options it was lowered with.
class LoweredModule {
public:
  struct State; // the LLVM context and module (compiler.cpp)
  explicit LoweredModule(std::unique_ptr<State> state);
  LoweredModule(LoweredModule&&) noexcept;
  LoweredModule& operator=(LoweredModule&&) noexcept;
  ~LoweredModule();

  const std::string& entry() const;
  std::string llvmIR() const; // the optimized LLVM IR as text (tests and debugging)

private:
  friend ObjectCode emitObjectCode(LoweredModule module);
  std::unique_ptr<State> state_;
};

// Lowers a module holding `func.func @kernel(...)` (see kernel_builder.h) and wraps it in
// `void entry(const int64_t* slots, int64_t begin, int64_t end)`, which reads each kernel
// argument from one 8-byte slot. Thread-safe (compiles are serialized; fork() waits for one in
// progress, and a forked child compiles as the parent does). Errors start with "[fusion]"
// (support/errors.h): CompileError when MLIR or LLVM rejects the module (with MLIR's
// diagnostics), EnvironmentError when this process cannot compile (no target, under 64 MiB of
// address space left below RLIMIT_AS), std::bad_alloc when LLVM runs out of memory, and
// std::logic_error when the module breaks the kernel builder's contract.
LoweredModule lowerKernel(const std::string& mlir_module, const std::string& entry,
                          const CodegenOptions& options);

// The lowered module as an ELF relocatable object (consumes it). Errors as lowerKernel's.
ObjectCode emitObjectCode(LoweredModule module);

// lowerKernel, then emitObjectCode.
ObjectCode compileKernel(const std::string& mlir_module, const std::string& entry,
                         const CodegenOptions& options = CodegenOptions());

// The module after the lowering pipeline, as text (tests and debugging).
std::string lowerToLLVMDialect(const std::string& mlir_module,
                               const CodegenOptions& options = CodegenOptions());

// The optimized LLVM IR that compileKernel turns into object code (tests and debugging).
std::string optimizedLLVMIR(const std::string& mlir_module, const std::string& entry,
                            const CodegenOptions& options = CodegenOptions());

} // namespace torchneuron::fusion

#pragma once
// The executable container (this project's "NEFF"): everything needed to decide whether cached
// object code may be loaded into this process, and the code itself. Format:
// docs/executable-container.md. Parsing checks bounds and the checksum; verify() checks the
// versions, the target and the key material before any code is mapped.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torchneuron {

// Bumped whenever the byte layout changes.
constexpr uint32_t kContainerFormatVersion = 1;
// Bumped whenever code generation changes what a key compiles to (lowerings, pipeline, ABI).
extern const char* const kEngineVersion;

struct KernelTableEntry {
  std::string symbol;  // exported entry point
  std::string abi;     // "slots-v1": void(const int64_t* slots, int64_t begin, int64_t end)
};

struct ExecutableContainer {
  std::string engine_version;
  std::string llvm_version;
  std::string target_triple;
  std::string cpu;
  std::string cpu_features;
  std::string compile_options;  // the lowering pipeline and optimization level
  std::string key_material;     // what was compiled (the kernel's MLIR module)
  std::vector<KernelTableEntry> kernels;
  std::vector<char> object;     // ELF relocatable object

  std::vector<char> serialize() const;
};

// Parses bytes into a container; nullopt (and `why`) on a bad magic, an unknown format version,
// a failed checksum, or any field out of bounds. Never reads outside `bytes`.
std::optional<ExecutableContainer> parseContainer(const std::vector<char>& bytes, std::string* why);

// What this process requires of an entry it loads.
struct LoadRequirements {
  std::string engine_version, llvm_version, target_triple, cpu_features, compile_options;
  std::string key_material;
};

// Empty when `container` may be loaded here; else the first mismatch, named.
std::string verifyContainer(const ExecutableContainer& container, const LoadRequirements& wanted);

}  // namespace torchneuron

#pragma once
// The executable container (this project's "NEFF"): everything needed to decide whether cached
// object code may be loaded into this process, and the code itself. Format (every field, the byte
// layout, what is checksummed and what is MACed): docs/executable-container.md. Parsing checks
// bounds and the checksum; checkSeal() checks the keyed MAC; verifyContainer() checks the
// versions, the target and the key material. All of them pass before any code is mapped.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/entry_authenticator.h"

namespace torchneuron {

// Bumped whenever the byte layout changes; an entry of another version is a miss.
constexpr uint32_t kContainerFormatVersion = 2;
// Bumped whenever the program section's encoding changes (inside a container version).
constexpr uint32_t kProgramEncodingVersion = 1;
// The engine's version: its codegen fingerprint (fusion/codegen_fingerprint.h), which changes by
// itself whenever the sources that decide what a key compiles to change (lowerings, pipeline,
// vector-math table, ABI, target), and is the same for the same sources built anywhere. Entries,
// remembered failures and warm-start profiles of another engine are misses.
extern const char* const kEngineVersion;

struct KernelTableEntry {
  std::string symbol; // exported entry point
  std::string abi;    // "slots-v1": void(const int64_t* slots, int64_t begin, int64_t end)
};

// One buffer a program's steps use: a launch argument, named by its slot id, or scratch memory
// whose size is an expression over the launch's integer slots:
// element_bytes * slots[size_slots[0]] * slots[size_slots[1]] * ...
struct ProgramBuffer {
  enum class Kind : uint8_t { kSlot = 0, kScratch = 1 };
  Kind kind = Kind::kSlot;
  uint32_t slot = 0;                // kSlot
  uint64_t element_bytes = 0;       // kScratch
  std::vector<uint32_t> size_slots; // kScratch
};

// One step: a kernel of the kernel table, or a library op (an ATen op such as "aten::mm"), run
// over the program's buffers `operands` (indices into Program::buffers). A kernel step with no
// operands receives the launch's slots as they are.
struct ProgramStep {
  enum class Kind : uint8_t { kKernel = 0, kLibrary = 1 };
  Kind kind = Kind::kKernel;
  uint32_t kernel = 0;    // kKernel
  std::string library_op; // kLibrary
  std::vector<uint32_t> operands;
};

// What running the container means: its steps in order, over its buffer plan. An eager kernel's
// program is one kernel step (kernel 0, the launch's slots); a fused window fills in more.
struct Program {
  std::vector<ProgramBuffer> buffers;
  std::vector<ProgramStep> steps = {ProgramStep{}};
};

// "2 steps: kernel 0, aten::mm; 3 buffers" (the CLI's listing).
std::string describeProgram(const Program& program);

struct ExecutableContainer {
  std::string engine_version;
  std::string llvm_version;
  std::string target_triple;
  std::string cpu;
  std::string cpu_features;
  std::string compile_options; // the target's pipelines (TargetDescription::compileOptions)
  std::string key_material;    // what was compiled (the kernel's MLIR module)
  std::vector<KernelTableEntry> kernels;
  std::vector<char> object; // ELF relocatable object
  Program program;          // (serialized before the object; declared after it for brevity)
  // The MAC slot: the signing key's id and the MAC, as parsed; zeros until sealContainer() fills
  // them in the serialized bytes.
  EntryAuthenticator::KeyId key_id{};
  EntryAuthenticator::Mac mac{};

  // The container's bytes with its MAC slot as held (zeros: unsigned) and a fresh checksum.
  std::vector<char> serialize() const;
};

// Parses bytes into a container; nullopt (and `why`) on a bad magic, another format version, a
// failed checksum, or any field out of bounds or referring outside its table. Never reads outside
// `bytes`. Does not check the MAC (checkSeal does).
std::optional<ExecutableContainer> parseContainer(const std::vector<char>& bytes, std::string* why);

// The format version `bytes` declare, or nullopt when they do not start like a container.
std::optional<uint32_t> containerFormatVersion(const std::vector<char>& bytes);

// What the seal of serialized bytes says under a key, checked in this order (each before any
// parsing of the fields): another format version; damage (too short, bad magic, failed checksum);
// signed under another key id (or unsigned); a MAC that does not verify (forged, or damaged
// after sealing); else authentic.
enum class SealStatus { kAuthentic, kOtherFormat, kDamaged, kOtherKey, kForged };
SealStatus checkSeal(const std::vector<char>& bytes, const EntryAuthenticator& key,
                     std::string* why = nullptr);
// The key id in the MAC slot of a well-formed container.
std::optional<EntryAuthenticator::KeyId> sealKeyId(const std::vector<char>& bytes);

// Signs serialized bytes in place: the key id and the MAC over every byte before the MAC, then a
// fresh checksum. False (bytes unchanged) when they are not an intact container of this version.
bool sealContainer(std::vector<char>& bytes, const EntryAuthenticator& key);

// What this process requires of an entry it loads.
struct LoadRequirements {
  std::string engine_version, llvm_version, target_triple, cpu_features, compile_options;
  std::string key_material;
};

// Empty when `container` may be loaded here; else the first mismatch, named.
std::string verifyContainer(const ExecutableContainer& container, const LoadRequirements& wanted);

} // namespace torchneuron

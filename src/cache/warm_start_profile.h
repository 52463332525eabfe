#pragma once
// A warm-start profile: what one run of a program used, so that its next run can load those
// kernels and fault in that memory in the background before it needs them (device/warm_start.h,
// docs/warm-start.md). Kept as one small file per program under <cache dir>/profiles/, written
// atomically (a temporary file renamed over the old one). It is a hint: a damaged, foreign or
// stale profile is ignored, and nothing it names is trusted (each kernel is verified as any
// cached kernel is).
//
// Format (text, one item per line):
//   torchneuron warm-start profile 1
//   engine <engine version>
//   kernels <n>        then n store keys (32 hex digits), in first-use order
//   blocks <m>         then m block capacities in bytes, in first-use order
//   checksum <XXH3-128 of every byte above, hex>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torchneuron {

struct WarmStartProfile {
  std::vector<std::string> kernel_keys;
  std::vector<size_t> block_bytes;
};

// Bounds a profile is held to (a larger one is truncated when written, rejected when read).
constexpr size_t kMaxProfileKernels = 1 << 16;
constexpr size_t kMaxProfileBlocks = 1 << 16;
constexpr size_t kMaxProfileBlockBytes = size_t{1} << 40;

std::string serializeProfile(const WarmStartProfile& profile);
// `body` followed by its checksum line, as serializeProfile ends (tests build profiles whose
// checksum holds but whose body is wrong with it).
std::string sealedProfile(const std::string& body);
// The profile in `text`, or nullopt with `why` naming the first problem (bad header, another
// engine version, a malformed or out-of-bounds line, a count that does not match, a failed
// checksum). `other_engine`, when given, tells an intact profile of another engine version (not
// damage: its keys are simply not this engine's) from a damaged one.
std::optional<WarmStartProfile> parseProfile(const std::string& text, std::string* why,
                                             bool* other_engine = nullptr);

// The identity of the running program: a hash of the working directory and the command line
// (/proc/self/cmdline), so that reruns of a script share a profile and other programs do not.
std::string currentProgramIdentity();

// The profile file of `program` under the cache directory `cache_dir`.
std::string profilePath(const std::string& cache_dir, const std::string& program);
// The file's contents, or nullopt when it does not exist or cannot be read.
std::optional<std::string> readProfileFile(const std::string& path);
// Writes atomically (a temporary file renamed over `path`); false on any failure.
bool writeProfileFile(const std::string& path, const std::string& text);
// Removes every profile under `cache_dir`; returns how many.
int64_t removeProfiles(const std::string& cache_dir);

} // namespace torchneuron

#pragma once
// The NEURON_* environment variables: the one place that knows each variable's name, type,
// default and range (README, "Environment variables").
//
// Values: a boolean is 1/0, true/false, yes/no or on/off (any case); a byte count is a
// non-negative integer with an optional binary suffix K, M, G or T (2^10 ... 2^40), at most
// 2^63 - 1 bytes. A cache knob (everything but NEURON_FALLBACK) with a value outside its type
// warns once, naming the variable and the value, and takes its documented default; a bad
// NEURON_FALLBACK is an error naming the value. A duration is a whole number of milliseconds from 1
// to 3600000 (an hour). NEURON_CACHE_DIR, NEURON_CACHE_KEY_FILE and NEURON_CACHE_REMOTE are paths
// and addresses, not typed values: the cache reads them where it checks them (directory_trust.cpp,
// entry_authenticator.cpp, remote_cache.cpp), so the CLI and tests may point them elsewhere.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace torchneuron {

enum class FallbackMode { kWarn, kSilent, kError };

// Whose worker threads run the parts of a parallel launch: PyTorch's OpenMP team (the one its
// own CPU kernels use), or a TBB arena of the launcher's own.
enum class LaunchPool { kOpenMp, kTbb };
// How long PyTorch's idle OpenMP workers spin (device/openmp_wait.h).
enum class OpenMpWait { kShort, kUnchanged };

struct Settings {
  bool cache_enabled = true;                           // NEURON_CACHE
  int64_t cache_max_bytes = 0;                         // NEURON_CACHE_MAX_BYTES; 0: no cap
  int64_t cache_memory_max_bytes = int64_t{256} << 20; // NEURON_CACHE_MEMORY_MAX_BYTES
  bool cache_retry_failed = false;                     // NEURON_CACHE_RETRY_FAILED
  bool warm_start = true;                              // NEURON_WARM_START
  int64_t warm_start_max_bytes = int64_t{1} << 30;     // NEURON_WARM_START_MAX_BYTES
  int64_t cache_remote_timeout_ms = 50;                // NEURON_CACHE_REMOTE_TIMEOUT_MS
  int64_t cache_remote_lease_ms = 10000;               // NEURON_CACHE_REMOTE_LEASE_MS
  bool interim_launches = true; // NEURON_INTERIM_LAUNCHES: run ops on the CPU while they compile
  bool deterministic = false;   // NEURON_DETERMINISTIC: wait for every compile (reproducible runs)
  bool eager_call_cache = true; // NEURON_EAGER_CALL_CACHE: replay recurring eager calls' plans
  bool list_launches = true;    // NEURON_LIST_LAUNCHES: a _foreach_* call as one compiled launch
  bool fused_lstm = true;       // NEURON_FUSED_LSTM: an LSTM direction as one node, fused cells
  bool huge_pages = true;       // NEURON_HUGE_PAGES: large device blocks on huge pages
  bool perf_map = false;        // NEURON_PERF_MAP: name linked kernels for perf (perf_map.h)
  // NEURON_LAUNCH_POOL: the threads that run a parallel launch (launcher/parallel_launch.h).
  LaunchPool launch_pool = LaunchPool::kOpenMp;
  OpenMpWait openmp_wait = OpenMpWait::kShort; // NEURON_OPENMP_WAIT
  // One line per cache knob that was set to a value outside its type, naming the variable and
  // the value and saying which default it took instead.
  std::vector<std::string> warnings;
};

// Reads every cache knob through `lookup` (nullptr: unset). Never throws.
Settings parseSettings(const std::function<const char*(const char*)>& lookup);

// The process's settings, read from the environment once, at first use (thread-safe).
const Settings& settings();

// NEURON_FALLBACK, read from the environment at every call (a script may change it at run
// time): warn (also when unset or empty), silent or error. Throws std::invalid_argument naming
// the variable and the value otherwise.
FallbackMode fallbackMode();
FallbackMode parseFallbackMode(const char* value);

// The parsers behind the settings (tests): nullopt when `text` is not a value of the type.
std::optional<bool> parseBoolean(const std::string& text);
std::optional<int64_t> parseByteCount(const std::string& text);
std::optional<int64_t> parseMilliseconds(const std::string& text);

} // namespace torchneuron

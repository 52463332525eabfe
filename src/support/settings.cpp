#include "support/settings.h"
#include "support/made_once.h"

#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace torchneuron {
namespace {

std::string lowercase(std::string text) {
  for (char& c : text)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return text;
}

std::string describeBytes(int64_t bytes) {
  if (bytes == 0) return "0";
  for (auto [shift, suffix] : {std::pair{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}})
    if (bytes % (int64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + suffix;
  return std::to_string(bytes);
}

// Reads one variable: unset or empty leaves `value` at its default; a value `parse` rejects
// adds a warning and leaves the default too.
template <typename T, typename Parse>
void readSetting(const std::function<const char*(const char*)>& lookup, const char* name,
                 const char* type, T& value, const std::string& default_text, Parse parse,
                 Settings& out) {
  const char* raw = lookup(name);
  if (raw == nullptr || *raw == '\0') return;
  if (std::optional<T> parsed = parse(raw)) {
    value = *parsed;
    return;
  }
  out.warnings.push_back(std::string(name) + "=" + raw + " is not " + type + "; the default (" +
                         default_text + ") is used");
}

} // namespace

std::optional<bool> parseBoolean(const std::string& text) {
  const std::string value = lowercase(text);
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  return std::nullopt;
}

std::optional<int64_t> parseByteCount(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  if (digits == 0) return std::nullopt;
  int shift = 0;
  if (digits + 1 == text.size()) {
    switch (text.back()) {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    case 'T':
    case 't':
      shift = 40;
      break;
    default:
      return std::nullopt;
    }
  } else if (digits != text.size()) {
    return std::nullopt;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const int digit = text[i] - '0';
    if (value > (kMax - digit) / 10) return std::nullopt; // beyond int64: rejected, not clamped
    value = value * 10 + digit;
  }
  if (value > (kMax >> shift)) return std::nullopt;
  return value << shift;
}

std::optional<int64_t> parseMilliseconds(const std::string& text) {
  constexpr int64_t kHourMs = 3600 * 1000;
  if (text.empty() || text.size() > 7) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > kHourMs) return std::nullopt;
  return value;
}

Settings parseSettings(const std::function<const char*(const char*)>& lookup) {
  Settings s;
  const Settings defaults;
  auto boolean = [](const char* raw) { return parseBoolean(raw); };
  auto bytes = [](const char* raw) { return parseByteCount(raw); };
  const char* kBoolean = "a boolean (1/0, true/false, yes/no, on/off)";
  const char* kBytes = "a byte count (a non-negative integer, optionally with K, M, G or T)";
  readSetting(lookup, "NEURON_CACHE", kBoolean, s.cache_enabled, "1: the cache is on", boolean, s);
  readSetting(lookup, "NEURON_CACHE_MAX_BYTES", kBytes, s.cache_max_bytes, "0: no cap", bytes, s);
  readSetting(lookup, "NEURON_CACHE_MEMORY_MAX_BYTES", kBytes, s.cache_memory_max_bytes,
              describeBytes(defaults.cache_memory_max_bytes), bytes, s);
  readSetting(lookup, "NEURON_CACHE_RETRY_FAILED", kBoolean, s.cache_retry_failed,
              "0: remembered failures are not retried", boolean, s);
  readSetting(lookup, "NEURON_WARM_START", kBoolean, s.warm_start, "1: the warm start is on",
              boolean, s);
  readSetting(lookup, "NEURON_INTERIM_LAUNCHES", kBoolean, s.interim_launches,
              "1: ops run on the CPU while their kernels compile", boolean, s);
  readSetting(lookup, "NEURON_DETERMINISTIC", kBoolean, s.deterministic,
              "0: ops do not wait for their compiles", boolean, s);
  readSetting(lookup, "NEURON_EAGER_CALL_CACHE", kBoolean, s.eager_call_cache,
              "1: recurring eager calls replay their plans", boolean, s);
  readSetting(lookup, "NEURON_LIST_LAUNCHES", kBoolean, s.list_launches,
              "1: list calls run as one compiled launch", boolean, s);
  readSetting(lookup, "NEURON_FUSED_LSTM", kBoolean, s.fused_lstm,
              "1: LSTM layers run with fused cells", boolean, s);
  readSetting(lookup, "NEURON_HUGE_PAGES", kBoolean, s.huge_pages,
              "1: large device blocks ask for huge pages", boolean, s);
  readSetting(lookup, "NEURON_PERF_MAP", kBoolean, s.perf_map,
              "0: no map of kernel symbols for perf", boolean, s);
  auto pool = [](const char* raw) -> std::optional<LaunchPool> {
    const std::string value = raw;
    if (value == "openmp") return LaunchPool::kOpenMp;
    if (value == "tbb") return LaunchPool::kTbb;
    return std::nullopt;
  };
  readSetting(lookup, "NEURON_LAUNCH_POOL", "a launch pool ('openmp' or 'tbb')", s.launch_pool,
              "openmp", pool, s);
  auto wait = [](const char* raw) -> std::optional<OpenMpWait> {
    const std::string value = raw;
    if (value == "short") return OpenMpWait::kShort;
    if (value == "unchanged") return OpenMpWait::kUnchanged;
    return std::nullopt;
  };
  readSetting(lookup, "NEURON_OPENMP_WAIT",
              "a wait rule for OpenMP's idle workers ('short' or 'unchanged')", s.openmp_wait,
              "short", wait, s);
  readSetting(lookup, "NEURON_WARM_START_MAX_BYTES", kBytes, s.warm_start_max_bytes,
              describeBytes(defaults.warm_start_max_bytes), bytes, s);
  auto ms = [](const char* raw) { return parseMilliseconds(raw); };
  const char* kMs = "a duration (whole milliseconds from 1 to 3600000)";
  readSetting(lookup, "NEURON_CACHE_REMOTE_TIMEOUT_MS", kMs, s.cache_remote_timeout_ms,
              std::to_string(defaults.cache_remote_timeout_ms), ms, s);
  readSetting(lookup, "NEURON_CACHE_REMOTE_LEASE_MS", kMs, s.cache_remote_lease_ms,
              std::to_string(defaults.cache_remote_lease_ms), ms, s);
  return s;
}

const Settings& settings() {
  static MadeOnce<const Settings> parsed; // fork-safe (made_once.h)
  return parsed.get([] {
    return new Settings(parseSettings(
        [](const char* name) { return static_cast<const char*>(std::getenv(name)); }));
  });
}

FallbackMode parseFallbackMode(const char* value) {
  if (value == nullptr || *value == '\0') return FallbackMode::kWarn;
  const std::string mode = value;
  if (mode == "warn") return FallbackMode::kWarn;
  if (mode == "silent") return FallbackMode::kSilent;
  if (mode == "error") return FallbackMode::kError;
  throw std::invalid_argument("[fallback] NEURON_FALLBACK must be 'warn', 'silent' or 'error', "
                              "got '" +
                              mode + "'");
}

FallbackMode fallbackMode() { return parseFallbackMode(std::getenv("NEURON_FALLBACK")); }

} // namespace torchneuron

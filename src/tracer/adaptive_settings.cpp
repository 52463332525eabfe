#include "tracer/adaptive_settings.h"

#include <stdexcept>
#include <string>

#include "support/settings.h"

namespace torchneuron::tracer {
namespace {

[[noreturn]] void reject(const char* name, const char* value, const char* expected) {
  throw std::invalid_argument(std::string("[adaptive] ") + name + "='" + value + "' is not " +
                              expected);
}

bool readBoolean(const std::function<const char*(const char*)>& lookup, const char* name,
                 bool fallback) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return fallback;
  std::optional<bool> parsed = parseBoolean(value);
  if (!parsed) reject(name, value, "a boolean (1/0, true/false, yes/no, on/off)");
  return *parsed;
}

// An integer in [minimum, maximum]; byte counts take the binary suffixes K, M, G, T.
int64_t readCount(const std::function<const char*(const char*)>& lookup, const char* name,
                  int64_t fallback, int64_t minimum, int64_t maximum) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return fallback;
  std::optional<int64_t> parsed = parseByteCount(value);
  if (!parsed || *parsed < minimum || *parsed > maximum)
    reject(
        name, value,
        ("an integer from " + std::to_string(minimum) + " to " + std::to_string(maximum)).c_str());
  return *parsed;
}

} // namespace

AdaptiveSettings parseAdaptiveSettings(const std::function<const char*(const char*)>& lookup) {
  AdaptiveSettings settings;
  settings.enabled = readBoolean(lookup, "NEURON_ADAPTIVE_EAGER", settings.enabled);
  settings.threshold =
      readCount(lookup, "NEURON_ADAPTIVE_THRESHOLD", settings.threshold, 1, int64_t{1} << 30);
  settings.window_ops =
      readCount(lookup, "NEURON_ADAPTIVE_WINDOW", settings.window_ops, 1, int64_t{1} << 20);
  settings.window_bytes =
      readCount(lookup, "NEURON_ADAPTIVE_WINDOW_BYTES", settings.window_bytes, 1, int64_t{1} << 50);
  settings.min_bytes =
      readCount(lookup, "NEURON_ADAPTIVE_MIN_BYTES", settings.min_bytes, 0, int64_t{1} << 50);
  settings.debug = readBoolean(lookup, "NEURON_ADAPTIVE_DEBUG", settings.debug);
  settings.explain = readBoolean(lookup, "NEURON_ADAPTIVE_EXPLAIN", settings.explain);
  settings.fusion = readBoolean(lookup, "NEURON_ADAPTIVE_FUSION", settings.fusion);
  settings.sync_compiles = readBoolean(lookup, "NEURON_ADAPTIVE_SYNC", settings.sync_compiles);
  settings.unbacked = readBoolean(lookup, "NEURON_ADAPTIVE_UNBACKED", settings.unbacked);
  settings.accumulate = readBoolean(lookup, "NEURON_ADAPTIVE_ACCUMULATE", settings.accumulate);
  return settings;
}

} // namespace torchneuron::tracer

#pragma once
// Process-wide counters behind torchneuron.metrics().

#include <cstdint>
#include <map>
#include <string>

namespace torchneuron {

// How the device ran an op.
enum class LaunchKind { kCompiled, kLibrary, kFallback };

const char* launchKindName(LaunchKind kind);

// Counts one launch of `op_name` (e.g. "aten::add.Tensor") of the given kind.
void recordLaunch(LaunchKind kind, const std::string& op_name);

struct MetricsSnapshot {
  std::map<std::string, int64_t> launches;  // kind name -> count
  std::map<std::string, std::map<std::string, int64_t>> ops_by_kind;  // kind -> op -> count
};

MetricsSnapshot metricsSnapshot();
void resetMetrics();

}  // namespace torchneuron

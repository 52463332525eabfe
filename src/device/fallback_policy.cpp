#include "device/fallback_policy.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace torchneuron {

FallbackPolicy currentFallbackPolicy() {
  const char* value = std::getenv("NEURON_FALLBACK");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "warn") == 0)
    return FallbackPolicy::kWarn;
  if (std::strcmp(value, "silent") == 0) return FallbackPolicy::kSilent;
  if (std::strcmp(value, "error") == 0) return FallbackPolicy::kError;
  TORCH_CHECK(false, "[fallback] NEURON_FALLBACK must be 'warn', 'silent' or 'error', got '",
              value, "'");
}

bool firstFallbackOf(const std::string& op_name) {
  // Locking: fallbacks run on user and autograd threads alike.
  static std::mutex mutex;
  static auto* warned = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  return warned->insert(op_name).second;
}

}  // namespace torchneuron

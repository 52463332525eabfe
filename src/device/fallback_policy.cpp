#include "device/fallback_policy.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <stdexcept>
#include <unordered_set>

#include "support/fork_handlers.h"
#include "support/settings.h"

namespace torchneuron {
namespace {

// Locking: `warned_mutex` guards `warned`; fallbacks run on user and autograd threads alike.
// Held across fork() (ForkRank::kWarnOnce).
std::mutex warned_mutex;
std::unordered_set<std::string>* warned = nullptr;

} // namespace

FallbackPolicy currentFallbackPolicy() {
  try {
    switch (fallbackMode()) {
    case FallbackMode::kWarn:
      return FallbackPolicy::kWarn;
    case FallbackMode::kSilent:
      return FallbackPolicy::kSilent;
    case FallbackMode::kError:
      return FallbackPolicy::kError;
    }
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, error.what());
  }
  TORCH_INTERNAL_ASSERT(false, "[fallback] unknown fallback mode");
}

bool firstFallbackOf(const std::string& op_name) {
  holdAcrossFork<warned_mutex>(ForkRank::kWarnOnce);
  std::lock_guard<std::mutex> lock(warned_mutex);
  if (warned == nullptr) warned = new std::unordered_set<std::string>();
  return warned->insert(op_name).second;
}

} // namespace torchneuron

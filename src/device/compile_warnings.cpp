#include "device/compile_warnings.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_set>

#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

// Locking: `warned_mutex` guards `warned`; held across fork() (ForkRank::kWarnOnce).
std::mutex warned_mutex;
std::unordered_set<Hash64>* warned = nullptr;

} // namespace

void warnCompileFailureOnce(Hash64 key, const std::string& signature, const std::string& reason) {
  holdAcrossFork<warned_mutex>(ForkRank::kWarnOnce);
  {
    std::lock_guard<std::mutex> lock(warned_mutex);
    if (warned == nullptr) warned = new std::unordered_set<Hash64>();
    if (!warned->insert(key).second) return;
  }
  TORCH_WARN("[fusion] ", signature,
             " could not be compiled; this signature runs on the CPU. Reason: ", reason);
}

} // namespace torchneuron

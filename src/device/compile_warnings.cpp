#include "device/compile_warnings.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_set>

namespace torchneuron {

void warnCompileFailureOnce(Hash64 key, const std::string& signature, const std::string& reason) {
  static std::mutex mutex;
  static std::unordered_set<Hash64> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(key).second) return;
  }
  TORCH_WARN("[fusion] ", signature,
             " could not be compiled; this signature runs on the CPU. Reason: ", reason);
}

}  // namespace torchneuron

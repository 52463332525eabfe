#include "device/openmp_wait.h"

#include <link.h>
#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "support/settings.h"

namespace torchneuron {
namespace {

std::string trimmedLowered(const char* text) {
  std::string value = text;
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!value.empty() && blank(value.back()))
    value.pop_back();
  value.erase(value.begin(), std::find_if_not(value.begin(), value.end(), blank));
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return value;
}

bool isSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// Starts the helper and returns once its team exists (libgomp counts the team's threads when it
// starts them, so the rule holds from the caller's next parallel region on).
// Returns the parked team's size.
int parkIdleTeam(int threads) {
  std::promise<int> team_started;
  std::future<int> started = team_started.get_future();
  std::thread helper([threads, team_started = std::move(team_started)]() mutable {
    pthread_setname_np(pthread_self(), "neuron-omp-park");
    std::atomic<int> members{0};
#pragma omp parallel num_threads(threads)
    {
      // Counted, so that the region is not an empty one the compiler may drop. Afterwards the
      // team's threads return to libgomp's pool of this thread and sleep there.
      members.fetch_add(1, std::memory_order_relaxed);
    }
    team_started.set_value(members.load());
    // Lives as long as the process: its pool (the parked threads) is freed when it exits.
    std::mutex forever;
    std::condition_variable never;
    std::unique_lock<std::mutex> hold(forever);
    never.wait(hold, [] { return false; });
  });
  helper.detach();
  return started.get();
}

// Whether the process has exactly one OpenMP runtime loaded and it is GCC's libgomp, so that the
// team parked here is counted by the runtime PyTorch's team runs on (a wheel's bundled
// libgomp-<hash>.so, LLVM's libomp or Intel's libiomp5 would not be, or would not throttle).
bool oneLibgompLoaded() {
  struct Count {
    int libgomp = 0;
    int other = 0;
  } count;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        auto* seen = static_cast<Count*>(data);
        const std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const std::string name = path.substr(path.rfind('/') + 1);
        if (name.rfind("libgomp", 0) == 0) ++seen->libgomp;
        if (name.rfind("libomp.so", 0) == 0 || name.rfind("libiomp", 0) == 0) ++seen->other;
        return 0;
      },
      &count);
  return count.libgomp == 1 && count.other == 0;
}

struct Applied {
  OpenMpWaitRule rule;
  int parked_team_size = 0;
};

Applied chooseAndApply() {
  // As libgomp reads them (env.c): GOMP_SPINCOUNT wins over OMP_WAIT_POLICY; the policy's value
  // is trimmed and compared without case. (Values set after libgomp loaded, from os.environ after
  // `import torch`, are read here but were never libgomp's: not detectable.)
  if (isSet("GOMP_SPINCOUNT")) return {OpenMpWaitRule::kUserSet};
  if (isSet("OMP_WAIT_POLICY")) {
    return {trimmedLowered(std::getenv("OMP_WAIT_POLICY")) == "passive" ? OpenMpWaitRule::kPassive
                                                                        : OpenMpWaitRule::kUserSet};
  }
  if (settings().openmp_wait == OpenMpWait::kUnchanged) return {OpenMpWaitRule::kUnchanged};
  // The process's CPUs now (omp_get_num_procs(): its affinity) may be fewer than libgomp counted
  // when it loaded, never more than are online.
  const int online = static_cast<int>(std::thread::hardware_concurrency());
  const int cpus = std::max(omp_get_num_procs(), online);
  if (cpus < 2) return {OpenMpWaitRule::kOneCpu};
  if (!oneLibgompLoaded()) return {OpenMpWaitRule::kOtherRuntime};
  // libgomp throttles while it runs more threads than the CPUs it counted when it loaded (the
  // process's affinity then, at most the CPUs online). A team of one more than that many makes
  // its count exceed them on its own: throttled from the park's first wait on, whatever affinity
  // the process has now and however many threads PyTorch runs.
  const int wanted = cpus + 1;
  int parked = 0;
  try {
    parked = parkIdleTeam(wanted);
  } catch (const std::system_error&) {
    return {OpenMpWaitRule::kUnchanged}; // no thread for the helper: libgomp as it is
  }
  // Fewer threads than asked (OMP_THREAD_LIMIT, OMP_DYNAMIC, ...): not enough to throttle.
  return {parked >= wanted ? OpenMpWaitRule::kShortSpin : OpenMpWaitRule::kPartialTeam, parked};
}

// Applied once, at the first call, thread-safely.
const Applied& applied() {
  static const Applied once = chooseAndApply();
  return once;
}

} // namespace

OpenMpWaitRule applyOpenMpWaitRule() { return applied().rule; }

int parkedOpenMpTeamSize() { return applied().parked_team_size; }

const char* openMpWaitRuleName(OpenMpWaitRule rule) {
  switch (rule) {
  case OpenMpWaitRule::kShortSpin:
    return "short-spin";
  case OpenMpWaitRule::kPassive:
    return "passive";
  case OpenMpWaitRule::kUserSet:
    return "user-set";
  case OpenMpWaitRule::kUnchanged:
    return "unchanged";
  case OpenMpWaitRule::kOneCpu:
    return "one-cpu";
  case OpenMpWaitRule::kOtherRuntime:
    return "other-runtime";
  case OpenMpWaitRule::kPartialTeam:
    return "partial-team";
  }
  return "unknown";
}

bool idleOpenMpWorkersSpinLong(OpenMpWaitRule rule) {
  return rule == OpenMpWaitRule::kUserSet || rule == OpenMpWaitRule::kUnchanged ||
         rule == OpenMpWaitRule::kOtherRuntime || rule == OpenMpWaitRule::kPartialTeam;
}

} // namespace torchneuron

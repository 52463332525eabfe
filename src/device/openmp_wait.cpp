#include "device/openmp_wait.h"

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
#include <thread>

#include "support/settings.h"

namespace torchneuron {
namespace {

std::string lowered(const char* text) {
  std::string value = text;
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

int parked_team_size = 0; // written once, before applyOpenMpWaitRule()'s static is published

OpenMpWaitRule chooseAndApply() {
  if (isSet("OMP_WAIT_POLICY")) {
    return lowered(std::getenv("OMP_WAIT_POLICY")) == "passive" ? OpenMpWaitRule::kPassive
                                                                : OpenMpWaitRule::kUserSet;
  }
  if (isSet("GOMP_SPINCOUNT")) return OpenMpWaitRule::kUserSet;
  if (settings().openmp_wait == OpenMpWait::kUnchanged) return OpenMpWaitRule::kUnchanged;
  const int cpus = omp_get_num_procs();
  if (cpus < 2) return OpenMpWaitRule::kOneCpu;
  parked_team_size = parkIdleTeam(cpus);
  return OpenMpWaitRule::kShortSpin;
}

} // namespace

OpenMpWaitRule applyOpenMpWaitRule() {
  static const OpenMpWaitRule rule = chooseAndApply();
  return rule;
}

int parkedOpenMpTeamSize() {
  applyOpenMpWaitRule();
  return parked_team_size;
}

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
  }
  return "unknown";
}

bool idleOpenMpWorkersSpinLong(OpenMpWaitRule rule) {
  return rule == OpenMpWaitRule::kUserSet || rule == OpenMpWaitRule::kUnchanged;
}

} // namespace torchneuron

// The fork handler registry (src/support/fork_handlers.h): a lock registered by a thread that
// holds another registered lock while fork() is waiting for that lock neither deadlocks the
// fork nor is held across it. This is what the warm-start thread does when it links its first
// kernel (the linker's lock registers lazily, under the warm start's item lock).
#include "support/fork_handlers.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

namespace torchneuron {
namespace {

std::atomic<bool> fork_is_preparing{false};
std::mutex held_while_forking; // taken by the test thread before fork() starts
std::mutex registered_late;    // registered while fork() waits for the lock above

// Forks; the child reports through its exit status whether both locks were free in it.
int forkAndReportChild() {
  pid_t pid = fork();
  if (pid == 0) {
    bool free = held_while_forking.try_lock() && registered_late.try_lock();
    _exit(free ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ForkHandlers, ARegistrationWhileForkWaitsNeitherDeadlocksNorIsHeldAcrossFork) {
  registerForkHandlers(static_cast<ForkRank>(5),
                       {[] { fork_is_preparing.store(true); }, nullptr, nullptr});
  holdAcrossFork<held_while_forking>(ForkRank::kWarmStartItem);

  // The thread that holds a lock and registers another while fork() waits for the first.
  auto holder = [] {
    held_while_forking.lock();
    auto child_status = std::async(std::launch::async, forkAndReportChild);
    while (!fork_is_preparing.load())
      std::this_thread::yield();
    // fork() now waits in its prepare step for the lock this thread holds.
    holdAcrossFork<registered_late>(ForkRank::kLinker);
    registered_late.lock();
    held_while_forking.unlock();
    // fork() may now take the first lock; it must also wait for this one, registered meanwhile.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    registered_late.unlock();
    return child_status.get();
  };
  auto child_status = std::async(std::launch::async, holder);
  if (child_status.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "fork() deadlocked on a registration made while it waited\n");
    std::abort(); // the deadlocked threads cannot be joined
  }
  EXPECT_EQ(child_status.get(), 0) << "a registered lock was held across fork()";
}

} // namespace
} // namespace torchneuron

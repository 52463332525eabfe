// MadeOnce (src/support/made_once.h): a child forked while another thread waits inside the
// making for a lock that fork() holds makes the object itself, where a function-local static
// would leave it waiting for ever (the fork hang CI caught on 2026-12-05: a launch counter's
// static initializer waited for the counter table's lock while the main thread forked).
#include "support/made_once.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

struct Value {
  int number;
};

std::mutex held_by_fork; // registered: fork() holds it from its prepare step to its end
std::atomic<bool> fork_holds_the_lock{false};
std::atomic<bool> making{false};
MadeOnce<Value> value;

Value* makeValueAfterTheLock() {
  making.store(true);
  std::lock_guard<std::mutex> lock(held_by_fork); // waits while fork() holds it
  return new Value{42};
}

// Forks; the child gets the value and reports it through its exit status (a child that hangs is
// killed by its alarm after 10 s and reports -1).
int forkAndReportChildsValue() {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    _exit(value.get(makeValueAfterTheLock).number);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MadeOnce, AChildForkedWhileAnotherThreadWaitsInsideTheMakingMakesItItself) {
  registerForkHandlers(static_cast<ForkRank>(10),
                       {[] {
                          held_by_fork.lock();
                          fork_holds_the_lock.store(true);
                        },
                        [] { held_by_fork.unlock(); }, [] { held_by_fork.unlock(); }});
  // Prepared after the lock above: fork() goes on only once the maker waits inside the making.
  registerForkHandlers(static_cast<ForkRank>(11),
                       {[] {
                          while (!making.load())
                            std::this_thread::yield();
                          std::this_thread::sleep_for(std::chrono::milliseconds(50));
                        },
                        nullptr, nullptr});
  std::thread maker([] {
    while (!fork_holds_the_lock.load())
      std::this_thread::yield();
    value.get(makeValueAfterTheLock);
  });
  const int child = forkAndReportChildsValue();
  maker.join();
  EXPECT_EQ(child, 42) << "the child did not make the value (-1: it hung)";
  EXPECT_EQ(value.get(makeValueAfterTheLock).number, 42);
}

TEST(MadeOnce, IsMadeOnceAndAChildKeepsWhatItsParentMade) {
  static MadeOnce<Value> made;
  static std::atomic<int> makes{0};
  auto make = [] {
    makes.fetch_add(1);
    return new Value{makes.load()};
  };
  std::thread others[4];
  for (std::thread& t : others)
    t = std::thread([&] { made.get(make); });
  for (std::thread& t : others)
    t.join();
  EXPECT_EQ(makes.load(), 1);
  pid_t pid = fork();
  if (pid == 0) _exit(made.get(make).number == 1 && makes.load() == 1 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

} // namespace
} // namespace torchneuron

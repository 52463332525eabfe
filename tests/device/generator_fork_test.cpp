// fork() while another thread holds PyTorch's default CPU generator
// (src/device/torch_fork_safety.h): the child's first random op must not wait for a lock whose
// holder stayed in the parent. CI saw that hang once in tests/device/test_fork_safety.py (a child's
// torch.rand while the parent's compiling threads drew inputs); here the holder is made to hold the
// lock across the fork.

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "device/torch_fork_safety.h"

namespace torchneuron {
namespace {

TEST(GeneratorFork, AForkWhileAnotherThreadDrawsLeavesTheChildAbleToDraw) {
  makeTorchForkSafe();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::atomic<bool> holding{false};
  std::thread drawer([&] {
    std::lock_guard<std::mutex> lock(generator.mutex()); // as ATen's random kernels do
    holding = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  while (!holding)
    std::this_thread::yield();
  const pid_t child = fork(); // waits for the drawer's lock, then holds it across the fork
  if (child == 0) {
    alarm(20); // a child that hangs on the lock is killed by SIGALRM: the parent sees the signal
    const at::Tensor drawn = at::rand({4});
    _exit(drawn.numel() == 4 ? 0 : 1);
  }
  drawer.join();
  ASSERT_GT(child, 0) << "fork failed";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
      << "the child hung on the generator's lock (killed after 20 s)";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

} // namespace
} // namespace torchneuron

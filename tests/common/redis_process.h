#pragma once
// A real redis-server (Debian's) for the remote tier's tests: started on a free loopback port in a
// temporary directory of the test's own, stopped (SIGTERM, then SIGKILL) when destroyed. Nothing
// is saved to disk.

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace torchneuron::testing {

class RedisProcess {
public:
  // Starts the server with `arguments` added (e.g. {"--requirepass", "secret"}); aborts the test
  // program when none starts (a test without its server would only fail later, less clearly).
  explicit RedisProcess(const std::vector<std::string>& arguments = {});
  ~RedisProcess();
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  void pause();  // SIGSTOP: connections are accepted by the kernel, never answered
  void resume(); // SIGCONT
  void kill();   // SIGKILL, and waits for it

private:
  pid_t pid_ = -1;
  pid_t owner_ = getpid();
  int port_ = 0;
};

} // namespace torchneuron::testing

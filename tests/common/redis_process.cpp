#include "common/redis_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/test_directory.h"

namespace torchneuron::testing {
namespace {

// A port nothing listens on now (the kernel's choice for port 0).
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0)
    port = ntohs(address.sin_port);
  close(fd);
  return port;
}

// True once the server on `port` answers and is process `pid` (not another test's server that
// took the port first): INFO's process_id, after AUTH when there is a password.
bool answers(int port, pid_t pid, const std::string& password) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request =
        (password.empty() ? "" : "AUTH " + password + "\r\n") + "INFO server\r\n";
    timeval timeout{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n = 0;
      while (reply.find("process_id:") == std::string::npos ||
             reply.find("\r\n", reply.find("process_id:")) == std::string::npos) {
        if ((n = read(fd, buffer, sizeof buffer)) <= 0) break;
        reply.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return reply.find("process_id:" + std::to_string(pid) + "\r\n") != std::string::npos;
}

} // namespace

RedisProcess::RedisProcess(const std::vector<std::string>& arguments) {
  const std::string directory = makeTestDirectory("neuron-redis-");
  std::string password;
  for (size_t i = 0; i + 1 < arguments.size(); ++i)
    if (arguments[i] == "--requirepass") password = arguments[i + 1];
  for (int attempt = 0; attempt < 20 && pid_ < 0; ++attempt) {
    port_ = freePort();
    std::vector<std::string> argv = {
        "redis-server", "--port",    std::to_string(port_),   "--bind", "127.0.0.1",
        "--save",       "",          "--appendonly",          "no",     "--dir",
        directory,      "--logfile", directory + "/redis.log"};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> raw;
      for (std::string& a : argv)
        raw.push_back(a.data());
      raw.push_back(nullptr);
      execvp("redis-server", raw.data());
      _exit(127);
    }
    // Up when it answers; gone (the port was taken meanwhile): another port.
    for (int waited = 0; waited < 500; ++waited) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      if (answers(port_, pid, password)) {
        pid_ = pid;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid_ < 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (pid_ < 0) {
    std::fprintf(stderr, "[test] cannot start redis-server (see %s/redis.log)\n",
                 directory.c_str());
    std::abort();
  }
}

RedisProcess::~RedisProcess() {
  if (pid_ < 0 || getpid() != owner_) return; // a forked test child's copy: the server is not its
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  for (int waited = 0; waited < 200; ++waited) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
}

void RedisProcess::pause() { ::kill(pid_, SIGSTOP); }
void RedisProcess::resume() { ::kill(pid_, SIGCONT); }

void RedisProcess::kill() {
  if (pid_ < 0 || getpid() != owner_) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

} // namespace torchneuron::testing

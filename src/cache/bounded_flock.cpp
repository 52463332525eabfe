#include "cache/bounded_flock.h"

#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace torchneuron {

bool flockWithin(int fd, int operation, std::chrono::steady_clock::duration wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  auto pause = std::chrono::microseconds(100);
  while (flock(fd, operation | LOCK_NB) != 0) {
    const int error = errno;
    if (error != EWOULDBLOCK || std::chrono::steady_clock::now() >= until) {
      errno = error;
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000)); // holders come and go often
  }
  return true;
}

} // namespace torchneuron

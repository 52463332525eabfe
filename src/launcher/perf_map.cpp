#include "launcher/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "support/settings.h"

namespace torchneuron {
namespace {

// The open map and the pid it belongs to: a forked child inherits the parent's descriptor, and
// must not append its kernels to the parent's map. Guarded by the caller's lock.
int map_fd = -1;
pid_t map_pid = 0;
bool refused = false; // this pid's map could not be used: said once, nothing more written

// Opens /tmp/perf-<pid>.map for appending, emptied of what an earlier process of the same pid
// left there, or says why not on stderr and returns -1. Any other user can create that path first
// (/tmp is shared), so: no link is followed (O_NOFOLLOW), nothing blocks on a FIFO or device
// (O_NONBLOCK: the open returns at once, and the type check refuses it), and the file is written
// only when it is a regular file this user owns with no other name (a hard link would lead the
// writes, and the truncation, to another file).
int openMap(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/tmp/perf-%d.map", static_cast<int>(pid));
  const int fd =
      ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  std::string problem;
  struct stat st{};
  if (fd < 0)
    problem = std::strerror(errno);
  else if (::fstat(fd, &st) != 0)
    problem = std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    problem = "not a regular file";
  else if (st.st_uid != ::geteuid())
    problem = "owned by user " + std::to_string(st.st_uid) + ", not by this process's user";
  else if (st.st_nlink != 1)
    problem = "it has " + std::to_string(st.st_nlink) + " names (a hard link)";
  else if (::ftruncate(fd, 0) != 0)
    problem = std::strerror(errno);
  if (problem.empty()) return fd;
  if (fd >= 0) ::close(fd);
  std::fprintf(stderr, "[launcher] NEURON_PERF_MAP: %s not written (%s)\n", path, problem.c_str());
  return -1;
}

} // namespace

bool perfMapEnabled() { return settings().perf_map; }

void notePerfMapSymbol(const void* start, uint64_t size, const std::string& name) {
  const pid_t pid = ::getpid();
  if (pid != map_pid) {
    if (map_fd >= 0) ::close(map_fd);
    map_pid = pid;
    map_fd = openMap(pid);
    refused = map_fd < 0;
  }
  if (refused) return;
  char line[512];
  const int length = std::snprintf(line, sizeof line, "%" PRIxPTR " %" PRIx64 " %s\n",
                                   reinterpret_cast<uintptr_t>(start), size, name.c_str());
  if (length <= 0 || static_cast<size_t>(length) >= sizeof line) return;
  // One write per line with O_APPEND: perf never reads half a line another write split.
  if (::write(map_fd, line, static_cast<size_t>(length)) != length) {
    std::fprintf(stderr, "[launcher] NEURON_PERF_MAP: writing /tmp/perf-%d.map failed (%s)\n",
                 static_cast<int>(pid), std::strerror(errno));
    refused = true;
  }
}

} // namespace torchneuron

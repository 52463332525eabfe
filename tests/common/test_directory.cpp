#include "common/test_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace torchneuron::testing {
namespace {

// Locking: `mutex` guards `paths`; tests may make directories from several threads.
struct MadeDirectories {
  std::mutex mutex;
  std::vector<std::string> paths;
  pid_t owner = getpid();

  ~MadeDirectories() {
    if (getpid() != owner) return;
    for (const std::string& path : paths) {
      std::error_code ignored;
      // Tests may leave read-only trees behind: make them writable so they can go.
      for (auto it = std::filesystem::recursive_directory_iterator(path, ignored);
           it != std::filesystem::recursive_directory_iterator(); it.increment(ignored)) {
        if (it->is_directory(ignored)) chmod(it->path().c_str(), 0700);
      }
      chmod(path.c_str(), 0700);
      std::filesystem::remove_all(path, ignored);
    }
  }
};

MadeDirectories& made() {
  static MadeDirectories directories;
  return directories;
}

} // namespace

std::string makeTestDirectory(const std::string& prefix) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp") + "/" + prefix + "XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror(("[test] cannot make a temporary directory " + pattern).c_str());
    std::abort();
  }
  MadeDirectories& directories = made();
  std::lock_guard<std::mutex> lock(directories.mutex);
  directories.paths.push_back(pattern);
  return pattern;
}

} // namespace torchneuron::testing

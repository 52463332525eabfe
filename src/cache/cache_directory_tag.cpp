#include "cache/cache_directory_tag.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cache/directory_trust.h"

namespace torchneuron {
namespace {

// What the cache writes in its directory (persistent_store.cpp, warm_start_profile.cpp,
// entry_authenticator.cpp); temporary files are `<name>.tmp.<pid>.<n>`.
bool writtenByTheCache(const std::string& name) {
  for (const char* known :
       {"db", "locks", "profiles", "store.lock", "mac.key", kCacheDirectoryTagName}) {
    const std::string k = known;
    if (name == k || name.rfind(k + ".tmp.", 0) == 0) return true;
  }
  return false;
}

// Whether `path` is a regular file (not followed if a link) whose text names this cache. Opened
// non-blocking: a FIFO there must not hang the process.
bool carriesOurTag(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info;
  char text[512] = {};
  const bool regular = fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  const ssize_t got = regular ? read(fd, text, sizeof text - 1) : -1;
  close(fd);
  if (got <= 0) return false;
  const std::string content(text, static_cast<size_t>(got));
  return content.rfind(kCacheDirectoryTagSignature, 0) == 0 &&
         content.find(kCacheDirectoryTagOwner) != std::string::npos;
}

void writeTag(const std::string& directory) {
  std::string temporary;
  const int fd = createTemporaryFile(directory + "/" + kCacheDirectoryTagName, &temporary);
  if (fd < 0) return;
  const std::string text = std::string(kCacheDirectoryTagSignature) + "\n" +
                           kCacheDirectoryTagOwner + "\n" +
                           "# For information about cache directory tags, see "
                           "https://bford.info/cachedir/\n";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written ||
      std::rename(temporary.c_str(), (directory + "/" + kCacheDirectoryTagName).c_str()) != 0)
    unlink(temporary.c_str());
}

} // namespace

std::string cacheDirectoryProblem(const std::string& resolved, bool* tagged) {
  const bool ours = carriesOurTag(resolved + "/" + kCacheDirectoryTagName);
  if (tagged) *tagged = ours;
  if (ours) return "";
  DIR* listing = opendir(resolved.c_str());
  if (listing == nullptr) return resolved + ": " + std::strerror(errno);
  std::vector<std::string> names, foreign;
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(name);
    if (!writtenByTheCache(name)) foreign.push_back(name);
  }
  closedir(listing);
  const auto holds = [&](const char* name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  // A cache creates locks before db: another program's db without locks is not one (a process
  // opening the directory at the same moment may have made only some of the cache's names).
  if (foreign.empty() && (!holds("db") || holds("locks"))) return "";
  std::vector<std::string>& shown = foreign.empty() ? names : foreign;
  std::sort(shown.begin(), shown.end());
  std::string listed;
  for (size_t i = 0; i < shown.size() && i < 3; ++i)
    listed += (i ? ", " : "") + shown[i];
  if (shown.size() > 3) listed += ", ...";
  return resolved + " is neither a torchneuron cache nor empty (it holds " + listed +
         "): give the cache a directory of its own";
}

std::string claimCacheDirectory(const std::string& resolved) {
  bool tagged = false;
  std::string problem = cacheDirectoryProblem(resolved, &tagged);
  if (problem.empty() && !tagged) writeTag(resolved);
  return problem;
}

} // namespace torchneuron

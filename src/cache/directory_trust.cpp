#include "cache/directory_trust.h"

#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace torchneuron {
namespace {

std::string ownerName(uid_t uid) {
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  std::string text = "uid " + std::to_string(uid);
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr)
    text += " (" + std::string(found->pw_name) + ")";
  return text;
}

std::string parentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

// realpath(), or "" with errno set.
std::string resolve(const std::string& path) {
  char buffer[PATH_MAX];
  return realpath(path.c_str(), buffer) != nullptr ? std::string(buffer) : std::string();
}

} // namespace

std::string octalMode(unsigned mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode & 07777);
  return text;
}

std::string defaultCacheDirectory() {
  if (const char* dir = std::getenv("NEURON_CACHE_DIR"); dir != nullptr && *dir) return dir;
  std::string home;
  if (const char* value = std::getenv("HOME"); value != nullptr && *value) {
    home = value;
  } else {
    std::vector<char> buffer(16384);
    passwd entry{};
    passwd* found = nullptr;
    if (getpwuid_r(getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 &&
        found != nullptr && found->pw_dir != nullptr && found->pw_dir[0] == '/')
      home = found->pw_dir;
  }
  return home.empty() ? std::string() : home + "/.cache/torchneuron";
}

std::string directoryChainProblem(const std::string& resolved, bool final_is_users) {
  const uid_t me = geteuid();
  for (std::string at = resolved;; at = parentOf(at)) {
    struct stat info;
    if (stat(at.c_str(), &info) != 0) return at + ": " + std::strerror(errno);
    const bool final = at == resolved;
    if (!S_ISDIR(info.st_mode)) return at + " is not a directory";
    if (final && final_is_users && info.st_uid != me)
      return at + " is owned by " + ownerName(info.st_uid) + ", not by this user (" +
             ownerName(me) + ")";
    if (info.st_uid != me && info.st_uid != 0)
      return at + " is owned by " + ownerName(info.st_uid) + ", neither root nor this user";
    // A root-owned sticky parent (/tmp) admits other users' files, but nobody can rename or remove
    // this user's directory in it; the directory itself must be private.
    const bool shared_sticky = !final && info.st_uid == 0 && (info.st_mode & S_ISVTX) != 0;
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !shared_sticky)
      return at + " is writable by " + ((info.st_mode & S_IWOTH) != 0 ? "others" : "its group") +
             " (mode " + octalMode(info.st_mode) + ")";
    if (at == "/") return "";
  }
}

std::string preparePrivateDirectory(const std::string& path, std::string* resolved) {
  if (path.empty()) return "the cache directory is an empty path";
  // Missing components are created private; an existing one is accepted only by the checks below.
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string prefix = at == std::string::npos ? path : path.substr(0, at);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot create " + prefix + " (" + std::strerror(errno) + ")";
    if (at == std::string::npos) break;
  }
  const std::string real = resolve(path);
  if (real.empty()) return "cannot resolve " + path + " (" + std::strerror(errno) + ")";
  std::string problem = directoryChainProblem(real, true);
  if (!problem.empty()) {
    if (real != path) problem = path + " resolves to " + real + ", and " + problem;
    return problem;
  }
  *resolved = real;
  return "";
}

std::string preparePrivateSubdirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create " + path + " (" + std::strerror(errno) + ")";
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) return path + ": " + std::strerror(errno);
  if (S_ISLNK(info.st_mode)) return path + " is a symbolic link";
  if (!S_ISDIR(info.st_mode)) return path + " is not a directory";
  if (info.st_uid != geteuid())
    return path + " is owned by " + ownerName(info.st_uid) + ", not by this user";
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return path + " is writable by group or others (mode " + octalMode(info.st_mode) + ")";
  return "";
}

int createTemporaryFile(const std::string& prefix, std::string* path) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    *path = prefix + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
    const int fd = open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd; // EEXIST: a leftover of a dead process
  }
  return -1;
}

bool resolvesInside(const std::string& path, const std::string& resolved_directory) {
  // The file may not exist yet: resolve the nearest existing ancestor, keep the rest as written.
  std::string existing = path, rest;
  std::string real;
  while (true) {
    real = resolve(existing);
    if (!real.empty() || existing == "/" || existing.empty()) break;
    const size_t slash = existing.rfind('/');
    if (slash == std::string::npos) {
      real = resolve(".");
      rest = "/" + existing + rest;
      break;
    }
    rest = existing.substr(slash) + rest;
    existing = slash == 0 ? "/" : existing.substr(0, slash);
  }
  const std::string full = real + rest;
  return full == resolved_directory ||
         full.compare(0, resolved_directory.size() + 1, resolved_directory + "/") == 0;
}

const char* networkFilesystemName(long type) {
  switch (static_cast<unsigned long>(type) & 0xffffffffUL) {
  case 0x6969:
    return "nfs";
  case 0x517B:
    return "smb";
  case 0xFF534D42:
    return "cifs";
  case 0xFE534D42:
    return "smb2";
  case 0x00C36400:
    return "ceph";
  case 0x0BD00BD0:
    return "lustre";
  case 0x47504653:
    return "gpfs";
  case 0x5346414F:
  case 0x6B414653:
    return "afs";
  case 0x01021997:
    return "9p";
  case 0x73757245:
    return "coda";
  case 0x01161970:
    return "gfs2";
  case 0x7461636F:
    return "ocfs2";
  case 0x19830326:
    return "beegfs";
  case 0x65735546:
    return "fuse";
  default:
    return nullptr;
  }
}

std::string networkFilesystemOf(const std::string& path) {
  struct statfs info{};
  if (statfs(path.c_str(), &info) != 0) return "";
  const char* name = networkFilesystemName(static_cast<long>(info.f_type));
  return name ? name : "";
}

} // namespace torchneuron

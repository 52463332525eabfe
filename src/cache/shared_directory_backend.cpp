// The remote tier in a shared directory (remote_tier.h): an NFS mount, a volume several containers
// share. Many writers on many hosts: each entry is written whole to a temporary file of a unique
// name and renamed onto its own name (atomic within a directory, NFS included), so a reader sees
// a whole old file, none, or a whole new one. Trust comes from the MAC alone (remote_cache.h):
// this code checks no owner or mode, but it never follows a link it did not expect: the namespace
// directories are opened O_NOFOLLOW and every file is reached relative to them (openat,
// renameat), so a link planted in the shared directory cannot make a writer create files
// elsewhere.
//
// Leases are files created O_EXCL holding "<expiry in unix ms> <token>", renewed in place by their
// holder (pwrite and fdatasync through the descriptor it created them with). An expired lease
// (its holder died or hangs) is taken over by renaming it to a name of the taker's own and
// checking that the file renamed is the one found expired; then the taker creates its own. Expiry
// is compared with this host's clock: the cluster's clocks must agree to well within the lease
// time (NTP does).

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "cache/bounded_flock.h"
#include "cache/remote_tier.h"

namespace torchneuron {
namespace {

int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string errnoText(const std::string& what, int error) {
  return what + " (" + std::strerror(error) + ")";
}

// A write the directory refuses (read-only, no permission, full) rather than a fault of reaching
// it.
bool refusal(int error) {
  return error == EROFS || error == EACCES || error == EPERM || error == ENOSPC || error == EDQUOT;
}

RemoteResult failure(const std::string& what, int error) {
  return {
      refusal(error) ? RemoteOutcome::kRefused : RemoteOutcome::kFault, errnoText(what, error), {}};
}

bool isStoreKey(const std::string& name) {
  if (name.size() != 32) return false;
  for (char c : name)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A unique suffix for this host, process and call: host name, pid, 64 random bits.
std::string uniqueSuffix() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char host[64] = "host";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  for (char* c = host; *c; ++c)
    if (*c == '/' || *c == '.' || *c == ' ') *c = '_';
  char text[160];
  std::snprintf(text, sizeof text, "%s.%d.%016llx", host, static_cast<int>(getpid()),
                static_cast<unsigned long long>(random()));
  return text;
}

constexpr size_t kLeaseTextBytes = 20 + 1 + 64 + 1; // expiry, space, token (padded), newline

std::string leaseText(int64_t expiry_ms, const std::string& token) {
  char text[kLeaseTextBytes + 1];
  std::snprintf(text, sizeof text, "%020lld %-64.64s\n", static_cast<long long>(expiry_ms),
                token.c_str());
  return std::string(text, kLeaseTextBytes);
}

// A descriptor closed when it goes out of scope.
class Descriptor {
public:
  Descriptor() = default;
  ~Descriptor() {
    if (fd_ >= 0) close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int* out() { return &fd_; }
  int get() const { return fd_; }

private:
  int fd_ = -1;
};

class SharedDirectoryBackend : public RemoteBackend {
public:
  SharedDirectoryBackend(RemoteLocation where, const std::string& name_space)
      : where_(std::move(where)), name_space_("torchneuron/" + name_space) {}

  ~SharedDirectoryBackend() override {
    for (auto& [key, held] : leases_)
      close(held.fd);
    closeDirectories();
  }

  std::string location() const override { return where_.describe(); }

  RemoteResult get(const std::string& key, size_t max_bytes) override {
    Descriptor entries_dir;
    if (RemoteResult r = directories(entries_dir.out(), nullptr); r.outcome != RemoteOutcome::kOk)
      return r;
    const int entries = entries_dir.get();
    const int fd = openat(entries, key.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) return {RemoteOutcome::kAbsent, "", {}};
      if (errno == ELOOP) return {RemoteOutcome::kBadValue, "the entry is a symbolic link", {}};
      return dropOnFault(failure("cannot open the entry " + key, errno));
    }
    RemoteResult result = readWhole(fd, max_bytes);
    close(fd);
    return result.outcome == RemoteOutcome::kFault ? dropOnFault(result) : result;
  }

  RemoteResult put(const std::string& key, const std::vector<char>& value) override {
    Descriptor entries_dir;
    if (RemoteResult r = directories(entries_dir.out(), nullptr); r.outcome != RemoteOutcome::kOk)
      return r;
    const int entries = entries_dir.get();
    const std::string temporary = ".tmp." + key + "." + uniqueSuffix();
    const int fd = openat(entries, temporary.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return dropOnFault(failure("cannot create a file in the shared directory", errno));
    size_t written = 0;
    int error = 0;
    while (written < value.size()) {
      const ssize_t n = write(fd, value.data() + written, value.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = n < 0 ? errno : EIO;
        break;
      }
      written += static_cast<size_t>(n);
    }
    // Durable before it is visible under its name (a crash leaves a temporary file, never a
    // partial entry); close() is where NFS reports a failed write-back.
    if (error == 0 && fsync(fd) != 0) error = errno;
    if (close(fd) != 0 && error == 0) error = errno;
    if (error == 0 && renameat(entries, temporary.c_str(), entries, key.c_str()) != 0)
      error = errno;
    if (error != 0) {
      unlinkat(entries, temporary.c_str(), 0);
      return dropOnFault(failure("cannot write the entry " + key, error));
    }
    return {RemoteOutcome::kOk, "", {}};
  }

  RemoteResult list(std::vector<std::string>* keys) override {
    Descriptor entries_dir;
    if (RemoteResult r = directories(entries_dir.out(), nullptr); r.outcome != RemoteOutcome::kOk)
      return r;
    const int entries = entries_dir.get();
    const int fd = openat(entries, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* dir = fd >= 0 ? fdopendir(fd) : nullptr; // owns fd from here
    if (dir == nullptr) {
      const int error = errno;
      if (fd >= 0) close(fd);
      return dropOnFault(failure("cannot list the shared directory", error));
    }
    while (dirent* item = readdir(dir))
      if (isStoreKey(item->d_name)) keys->push_back(item->d_name);
    closedir(dir);
    return {RemoteOutcome::kOk, "", {}};
  }

  RemoteResult acquireLease(const std::string& key, const std::string& token,
                            std::chrono::milliseconds ttl) override {
    Descriptor leases_dir;
    if (RemoteResult r = directories(nullptr, leases_dir.out()); r.outcome != RemoteOutcome::kOk)
      return r;
    const int leases = leases_dir.get();
    for (int attempt = 0; attempt < 2; ++attempt) {
      const int fd =
          openat(leases, key.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd >= 0) {
        const std::string text = leaseText(nowUnixMs() + ttl.count(), token);
        if (pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
            fdatasync(fd) != 0) {
          const int error = errno;
          unlinkat(leases, key.c_str(), 0);
          close(fd);
          return failure("cannot write a lease file", error);
        }
        std::lock_guard<std::mutex> lock(mutex_);
        leases_[key] = {fd, token};
        return {RemoteOutcome::kOk, "", {}};
      }
      if (errno != EEXIST) return dropOnFault(failure("cannot create a lease file", errno));
      struct stat found{};
      if (leaseExpiry(leases, key, ttl, &found) > nowUnixMs())
        return {RemoteOutcome::kHeld, "", {}};
      if (found.st_ino == 0) continue; // gone meanwhile: try to create it again
      takeOver(leases, key, found);
    }
    return {RemoteOutcome::kHeld, "", {}};
  }

  RemoteResult renewLease(const std::string& key, const std::string& token,
                          std::chrono::milliseconds ttl) override {
    Descriptor leases_dir;
    if (RemoteResult r = directories(nullptr, leases_dir.out()); r.outcome != RemoteOutcome::kOk)
      return r;
    const int leases = leases_dir.get();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = leases_.find(key);
    if (it == leases_.end() || it->second.token != token || !linkedAt(it->second.fd, leases, key))
      return {RemoteOutcome::kAbsent, "", {}};
    const std::string text = leaseText(nowUnixMs() + ttl.count(), token);
    if (pwrite(it->second.fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
        fdatasync(it->second.fd) != 0)
      return failure("cannot renew a lease file", errno);
    return {RemoteOutcome::kOk, "", {}};
  }

  RemoteResult releaseLease(const std::string& key, const std::string& token) override {
    Descriptor leases_dir;
    RemoteResult reached = directories(nullptr, leases_dir.out());
    const int leases = leases_dir.get();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = leases_.find(key);
    if (it == leases_.end() || it->second.token != token) return {RemoteOutcome::kOk, "", {}};
    if (reached.outcome == RemoteOutcome::kOk && linkedAt(it->second.fd, leases, key))
      unlinkat(leases, key.c_str(), 0);
    close(it->second.fd);
    leases_.erase(it);
    return reached.outcome == RemoteOutcome::kOk ? RemoteResult{RemoteOutcome::kOk, "", {}}
                                                 : reached;
  }

  RemoteResult leaseHeld(const std::string& key) override {
    Descriptor leases_dir;
    if (RemoteResult r = directories(nullptr, leases_dir.out()); r.outcome != RemoteOutcome::kOk)
      return r;
    const int leases = leases_dir.get();
    struct stat found{};
    // A lease file whose expiry cannot be read counts by its age, with a lease time of 10 s.
    const bool held =
        leaseExpiry(leases, key, std::chrono::milliseconds(10000), &found) > nowUnixMs();
    return {held ? RemoteOutcome::kOk : RemoteOutcome::kAbsent, "", {}};
  }

  // This host's counters live in usage/<host>, rewritten (temporary file, rename) under an flock
  // of usage/<host>.lock: only this host's processes write it, so the lock is a local one even
  // where the filesystem's locking does not reach across hosts.
  RemoteResult addUsage(const std::map<std::string, int64_t>& counts) override {
    Descriptor usage_dir;
    if (RemoteResult r = directories(nullptr, nullptr, usage_dir.out());
        r.outcome != RemoteOutcome::kOk)
      return r;
    const int usage = usage_dir.get();
    const std::string host = hostName();
    Descriptor lock;
    *lock.out() =
        openat(usage, (host + ".lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (lock.get() < 0) return failure("cannot lock the usage counters", errno);
    // Waited for at most 2 s: anyone who can read the directory can hold an flock on the file,
    // and a blocking one made every process of the tier wait at its exit for as long as they
    // liked. Counters are a statistic: skipped then, as on any other failure.
    if (!flockWithin(lock.get(), LOCK_EX, std::chrono::seconds(2)))
      return failure("cannot lock the usage counters", errno);
    std::map<std::string, int64_t> sums = counts;
    readCounters(usage, host, &sums);
    std::string text;
    for (const auto& [name, value] : sums)
      text += name + " " + std::to_string(value) + "\n";
    const std::string temporary = ".tmp." + host + "." + uniqueSuffix();
    Descriptor out;
    *out.out() = openat(usage, temporary.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out.get() < 0) return failure("cannot write the usage counters", errno);
    const bool written =
        write(out.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
        renameat(usage, temporary.c_str(), usage, host.c_str()) == 0;
    const int error = errno;
    if (!written) {
      unlinkat(usage, temporary.c_str(), 0);
      return failure("cannot write the usage counters", error);
    }
    return {RemoteOutcome::kOk, "", {}};
  }

  RemoteResult readUsage(std::map<std::string, int64_t>* sums) override {
    Descriptor usage_dir;
    if (RemoteResult r = directories(nullptr, nullptr, usage_dir.out());
        r.outcome != RemoteOutcome::kOk)
      return r;
    const int fd = openat(usage_dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* dir = fd >= 0 ? fdopendir(fd) : nullptr; // owns fd from here
    if (dir == nullptr) {
      const int error = errno;
      if (fd >= 0) close(fd);
      return failure("cannot list the usage counters", error);
    }
    while (dirent* item = readdir(dir)) {
      const std::string name = item->d_name;
      if (name[0] == '.' || (name.size() > 5 && name.substr(name.size() - 5) == ".lock")) continue;
      readCounters(usage_dir.get(), name, sums);
    }
    closedir(dir);
    return {RemoteOutcome::kOk, "", {}};
  }

  void prepareFork() override { mutex_.lock(); }
  void afterForkInParent() override { mutex_.unlock(); }
  // The leases are the parent's (its threads renew and release them): the child closes its copies
  // of their descriptors and forgets them.
  void afterForkInChild() override {
    for (auto& [key, held] : leases_)
      close(held.fd);
    leases_.clear();
    mutex_.unlock();
  }

private:
  struct HeldLease {
    int fd;
    std::string token;
  };

  // The namespace's `entries` and `leases` directories, opened (made when missing) at first use
  // and again after a fault: new descriptors of them, which the caller closes, in `*entries` /
  // `*leases` (either may be null). The backend's own stay open for the next call.
  RemoteResult directories(int* entries, int* leases, int* usage = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_fd_ < 0 || leases_fd_ < 0 || usage_fd_ < 0) {
      closeDirectories();
      RemoteResult opened = openDirectories();
      if (opened.outcome != RemoteOutcome::kOk) {
        closeDirectories();
        return opened;
      }
    }
    if (entries) *entries = fcntl(entries_fd_, F_DUPFD_CLOEXEC, 0);
    if (leases) *leases = fcntl(leases_fd_, F_DUPFD_CLOEXEC, 0);
    if (usage) *usage = fcntl(usage_fd_, F_DUPFD_CLOEXEC, 0);
    if ((entries && *entries < 0) || (leases && *leases < 0) || (usage && *usage < 0))
      return {RemoteOutcome::kFault, errnoText("cannot duplicate a descriptor", errno), {}};
    return {RemoteOutcome::kOk, "", {}};
  }

  // Walks from the root to <root>/torchneuron/<namespace>/{entries,leases,usage}, making what is
  // missing with the root's permission bits (a group-writable, setgid root gives group-writable
  // directories of the root's group), never following a link below the root.
  RemoteResult openDirectories() {
    struct stat root{};
    int at = open(where_.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (at < 0 || fstat(at, &root) != 0) {
      const int error = errno;
      if (at >= 0) close(at);
      return {RemoteOutcome::kFault,
              errnoText("cannot open the shared directory " + where_.path, error),
              {}};
    }
    const mode_t mode = root.st_mode & 07777;
    std::string path = name_space_ + "/";
    std::vector<std::string> parts;
    for (size_t start = 0, slash; (slash = path.find('/', start)) != std::string::npos;
         start = slash + 1)
      parts.push_back(path.substr(start, slash - start));
    for (const char* leaf : {"entries", "leases", "usage"}) {
      int dir = dup(at);
      for (const std::string& part : parts) {
        if (RemoteResult r = descend(&dir, part, mode); r.outcome != RemoteOutcome::kOk) {
          close(at);
          return r;
        }
      }
      if (RemoteResult r = descend(&dir, leaf, mode); r.outcome != RemoteOutcome::kOk) {
        close(at);
        return r;
      }
      const std::string name = leaf;
      (name == "entries" ? entries_fd_ : name == "leases" ? leases_fd_ : usage_fd_) = dir;
    }
    close(at);
    return {RemoteOutcome::kOk, "", {}};
  }

  // Replaces `*dir` by its subdirectory `name`, made with `mode` when missing.
  RemoteResult descend(int* dir, const std::string& name, mode_t mode) {
    if (mkdirat(*dir, name.c_str(), 0700) == 0) {
      const int made = openat(*dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (made >= 0) fchmod(made, mode); // the root's bits, past this process's umask
      if (made >= 0) close(made);
    } else if (errno != EEXIST) {
      const int error = errno;
      close(*dir);
      *dir = -1;
      return failure("cannot make " + name + " in the shared directory " + where_.path, error);
    }
    const int next = openat(*dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int error = errno;
    close(*dir);
    *dir = next;
    if (next < 0)
      return {RemoteOutcome::kFault,
              errnoText(name + " in the shared directory " + where_.path +
                            (error == ELOOP || error == ENOTDIR ? " is not a directory" : ""),
                        error),
              {}};
    return {RemoteOutcome::kOk, "", {}};
  }

  void closeDirectories() {
    for (int* fd : {&entries_fd_, &leases_fd_, &usage_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

  // A fault may mean the mount went away and came back (a stale handle): the directories are
  // opened afresh at the next call.
  RemoteResult dropOnFault(RemoteResult result) {
    if (result.outcome == RemoteOutcome::kFault) {
      std::lock_guard<std::mutex> lock(mutex_);
      closeDirectories();
    }
    return result;
  }

  static RemoteResult readWhole(int fd, size_t max_bytes) {
    struct stat info{};
    if (fstat(fd, &info) != 0) return failure("cannot read an entry", errno);
    if (!S_ISREG(info.st_mode)) return {RemoteOutcome::kBadValue, "not a regular file", {}};
    if (static_cast<uint64_t>(info.st_size) > max_bytes)
      return {RemoteOutcome::kBadValue,
              "the file is larger than the bound of " + std::to_string(max_bytes) + " bytes",
              {}};
    RemoteResult result{RemoteOutcome::kOk, "", {}};
    result.value.resize(static_cast<size_t>(info.st_size) + 1); // one more: a file that grew
    size_t got = 0;
    while (got < result.value.size()) {
      const ssize_t n = read(fd, result.value.data() + got, result.value.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failure("cannot read an entry", errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (got > static_cast<size_t>(info.st_size))
      return {RemoteOutcome::kBadValue, "the file changed while it was read", {}};
    result.value.resize(got);
    if (got == 0) return {RemoteOutcome::kAbsent, "", {}};
    return result;
  }

  // The expiry (unix ms) of the lease file `key`, and what `*found` says of it (st_ino 0 when
  // there is none: expiry 0). A file whose text cannot be read (a holder killed between creating
  // and writing it) expires `ttl` after its modification.
  static int64_t leaseExpiry(int leases, const std::string& key, std::chrono::milliseconds ttl,
                             struct stat* found) {
    *found = {};
    const int fd = openat(leases, key.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    char text[kLeaseTextBytes + 1] = {};
    const ssize_t n = fstat(fd, found) == 0 ? pread(fd, text, kLeaseTextBytes, 0) : -1;
    close(fd);
    long long expiry = 0;
    if (n == static_cast<ssize_t>(kLeaseTextBytes) && std::sscanf(text, "%20lld", &expiry) == 1)
      return expiry;
    return static_cast<int64_t>(found->st_mtim.tv_sec) * 1000 + found->st_mtim.tv_nsec / 1000000 +
           ttl.count();
  }

  // Removes the expired lease file `found` (by its inode: a file a faster taker put there since
  // stays, or is put back).
  void takeOver(int leases, const std::string& key, const struct stat& found) {
    const std::string aside = key + ".expired." + uniqueSuffix();
    if (renameat(leases, key.c_str(), leases, aside.c_str()) != 0) return;
    struct stat moved{};
    if (fstatat(leases, aside.c_str(), &moved, AT_SYMLINK_NOFOLLOW) == 0 &&
        (moved.st_ino != found.st_ino || moved.st_dev != found.st_dev))
      linkat(leases, aside.c_str(), leases, key.c_str(), 0); // a fresh lease: put it back
    unlinkat(leases, aside.c_str(), 0);
  }

  static std::string hostName() {
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    for (char* c = host; *c; ++c)
      if (*c == '/' || *c == '.' || *c == ' ') *c = '_';
    return host;
  }

  // Adds the counters in usage/<name> ("<counter> <value>" lines, at most 64 KiB) to `sums`.
  static void readCounters(int usage, const std::string& name,
                           std::map<std::string, int64_t>* sums) {
    const int fd = openat(usage, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return;
    std::string text(65536, '\0');
    const ssize_t n = read(fd, text.data(), text.size());
    close(fd);
    if (n <= 0) return;
    text.resize(static_cast<size_t>(n));
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      char counter[64];
      long long value = 0;
      if (std::sscanf(text.substr(start, end - start).c_str(), "%63s %lld", counter, &value) == 2)
        (*sums)[counter] += value;
      start = end + 1;
    }
  }

  static bool linkedAt(int fd, int leases, const std::string& key) {
    struct stat held{}, linked{};
    return fstat(fd, &held) == 0 &&
           fstatat(leases, key.c_str(), &linked, AT_SYMLINK_NOFOLLOW) == 0 &&
           held.st_ino == linked.st_ino && held.st_dev == linked.st_dev;
  }

  const RemoteLocation where_;
  const std::string name_space_;
  // Locking: `mutex_` guards the directory descriptors and `leases_`; never held during a read or
  // write of an entry (only during lease renewals, a few small writes). A leaf, held across fork().
  std::mutex mutex_;
  int entries_fd_ = -1, leases_fd_ = -1, usage_fd_ = -1;
  std::map<std::string, HeldLease> leases_;
};

} // namespace

std::unique_ptr<RemoteBackend> makeSharedDirectoryBackend(const RemoteLocation& location,
                                                          const std::string& name_space) {
  return std::make_unique<SharedDirectoryBackend>(location, name_space);
}

} // namespace torchneuron

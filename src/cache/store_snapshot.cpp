#include "cache/store_snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

namespace torchneuron {

namespace {

// Up to 128 bytes of `fd` into `text` when it is a regular file, and its stat into `info` when
// given; closes `fd`. (Opened O_NONBLOCK: a FIFO in its place must not hang the process.)
void readSmallFile(int fd, std::string* text, struct stat* info) {
  if (fd < 0) return;
  struct stat own{};
  if (info == nullptr) info = &own;
  if (fstat(fd, info) == 0 && S_ISREG(info->st_mode)) {
    char buffer[128];
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got > 0) text->assign(buffer, static_cast<size_t>(got));
  }
  close(fd);
}

} // namespace

StoreGeneration readGeneration(const std::string& db_path) {
  StoreGeneration generation;
  const int fd =
      open((db_path + "/CURRENT").c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return generation;
  struct stat info{};
  readSmallFile(fd, &generation.current, &info);
  generation.inode = info.st_ino;
  generation.modified_ns = int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec;
  readSmallFile(
      open((db_path + "/IDENTITY").c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
      &generation.identity, nullptr);
  return generation;
}

bool StoreSnapshot::taken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return taken_;
}

void StoreSnapshot::replace(Contents contents) {
  std::lock_guard<std::mutex> lock(mutex_);
  taken_ = true;
  writing_from_current_ = false;
  contents_ = std::move(contents);
}

void StoreSnapshot::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  taken_ = false;
  writing_from_current_ = false;
  contents_ = Contents();
}

bool StoreSnapshot::knownAbsent(const std::string& key, const StoreGeneration& now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return taken_ && contents_.complete && (writing_from_current_ || contents_.generation == now) &&
         contents_.keys.count(key) == 0;
}

std::optional<std::string> StoreSnapshot::failure(const std::string& key,
                                                  const StoreGeneration& now, bool* known) const {
  std::lock_guard<std::mutex> lock(mutex_);
  *known = taken_ && (writing_from_current_ || contents_.generation == now);
  if (!*known) return std::nullopt;
  auto it = contents_.failures.find(key);
  if (it == contents_.failures.end()) return std::nullopt;
  return it->second;
}

void StoreSnapshot::beginWrite(const StoreGeneration& before) {
  std::lock_guard<std::mutex> lock(mutex_);
  writing_from_current_ = taken_ && contents_.generation == before;
}

void StoreSnapshot::endWrite(bool written, const StoreGeneration& after,
                             const std::vector<std::string>& keys,
                             const std::unordered_map<std::string, std::string>& failures) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool current = writing_from_current_;
  writing_from_current_ = false;
  // A failed write may still have stored part of its batch (a synced log whose flush failed):
  // the snapshot stays at `before`, stale, so the next lookup reads the database again.
  if (!current || !written) return;
  contents_.generation = after;
  for (const std::string& key : keys) {
    contents_.keys.insert(key);
    contents_.failures.erase(key); // a stored entry deletes its remembered failure
  }
  for (const auto& failure : failures)
    contents_.failures[failure.first] = failure.second;
}

} // namespace torchneuron

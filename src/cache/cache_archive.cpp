#include "cache/cache_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cache/directory_trust.h"

namespace torchneuron {
namespace {

const std::string kHeader = "NEFF-ARCHIVE 2\n";

bool writeAll(int fd, const void* data, size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = read(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

} // namespace

bool isStoreKey(const std::string& key) {
  if (key.size() != 32) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

ArchiveWriter::ArchiveWriter(const std::string& path) : path_(path) {
  fd_ = createTemporaryFile(path, &temporary_);
  if (fd_ < 0 || !writeAll(fd_, kHeader.data(), kHeader.size()))
    problem_ = "cannot write next to " + path + " (" + std::strerror(errno) + ")";
}

ArchiveWriter::~ArchiveWriter() {
  if (fd_ >= 0) close(fd_);
  if (!temporary_.empty()) unlink(temporary_.c_str());
}

void ArchiveWriter::add(const std::string& key, const char* value, size_t size) {
  if (!problem_.empty()) return;
  const uint64_t key_size = key.size(), value_size = size;
  if (!writeAll(fd_, &key_size, sizeof key_size) || !writeAll(fd_, key.data(), key.size()) ||
      !writeAll(fd_, &value_size, sizeof value_size) || !writeAll(fd_, value, size))
    problem_ = "cannot write " + path_ + " (" + std::strerror(errno) + ")";
}

bool ArchiveWriter::finish() {
  if (problem_.empty() && fsync(fd_) != 0)
    problem_ = "cannot write " + path_ + " (" + std::strerror(errno) + ")";
  close(fd_);
  fd_ = -1;
  if (problem_.empty() && rename(temporary_.c_str(), path_.c_str()) != 0)
    problem_ = "cannot replace " + path_ + " (" + std::strerror(errno) + ")";
  if (problem_.empty()) temporary_.clear();
  return problem_.empty();
}

std::string readArchive(const std::string& path, ArchiveEntries* entries) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot read " + path + " (" + std::strerror(errno) + ")";
  struct stat info;
  std::string problem;
  std::string header(kHeader.size(), '\0');
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    problem = path + " is not a regular file";
  } else if (!readAll(fd, header.data(), header.size()) || header != kHeader) {
    problem = path + " is not a torchneuron-cache export (no \"NEFF-ARCHIVE 2\" header)";
  }
  uint64_t left = problem.empty() ? static_cast<uint64_t>(info.st_size) - kHeader.size() : 0;
  for (size_t record = 0; problem.empty() && left > 0; ++record) {
    const std::string where = path + ", record " + std::to_string(record) + ": ";
    uint64_t key_size = 0, value_size = 0;
    if (left < sizeof key_size || !readAll(fd, &key_size, sizeof key_size)) {
      problem = where + "truncated";
      break;
    }
    left -= sizeof key_size;
    if (key_size != 32) {
      problem = where + "a key of " + std::to_string(key_size) + " bytes (a store key has 32)";
      break;
    }
    if (key_size > left) {
      problem = where + "truncated";
      break;
    }
    std::string key(key_size, '\0');
    if (!readAll(fd, key.data(), key.size()) || !isStoreKey(key)) {
      problem = where + "the key is not 32 lowercase hex digits";
      break;
    }
    left -= key_size;
    if (left < sizeof value_size || !readAll(fd, &value_size, sizeof value_size)) {
      problem = where + "truncated";
      break;
    }
    left -= sizeof value_size;
    if (value_size > left || value_size > kMaxArchiveEntryBytes) {
      problem =
          where + "claims " + std::to_string(value_size) + " bytes, but " +
          (value_size > left ? std::to_string(left) + " remain in the file"
                             : "an entry holds at most " + std::to_string(kMaxArchiveEntryBytes));
      break;
    }
    std::vector<char> value(value_size);
    if (!readAll(fd, value.data(), value.size())) {
      problem = where + "truncated";
      break;
    }
    left -= value_size;
    entries->emplace_back(std::move(key), std::move(value));
  }
  close(fd);
  return problem;
}

} // namespace torchneuron

#pragma once
// The file `torchneuron-cache export` writes and `import` reads: the header "NEFF-ARCHIVE 2\n",
// then per entry: u64 key length, the key (a store key: 32 lowercase hex digits), u64 value
// length, the value (a sealed executable container), little-endian. Reading validates every
// record before anything is imported: a key of another shape or a length the file cannot hold
// is an error naming the record, never an allocation of the claimed size.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torchneuron {

// The largest entry an archive may hold (a kernel's container is a few KB).
constexpr uint64_t kMaxArchiveEntryBytes = uint64_t{256} << 20;

// True for a key of the store's form (32 lowercase hex digits).
bool isStoreKey(const std::string& key);

// Writes to a temporary file next to `path` (O_EXCL|O_NOFOLLOW, mode 0600), renamed over `path`
// by finish(): an interrupted export leaves `path` as it was.
class ArchiveWriter {
public:
  explicit ArchiveWriter(const std::string& path);
  ~ArchiveWriter(); // removes the temporary file unless finish() succeeded
  ArchiveWriter(const ArchiveWriter&) = delete;
  ArchiveWriter& operator=(const ArchiveWriter&) = delete;
  const std::string& problem() const { return problem_; } // "" while all is well
  void add(const std::string& key, const char* value, size_t size);
  bool finish();

private:
  std::string path_, temporary_, problem_;
  int fd_ = -1;
};

using ArchiveEntries = std::vector<std::pair<std::string, std::vector<char>>>;

// Reads every record of `path` into `entries`: "" or the problem (naming the record).
std::string readArchive(const std::string& path, ArchiveEntries* entries);

} // namespace torchneuron

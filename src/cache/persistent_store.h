#pragma once
// The persistent tier of the compile cache: executable containers in RocksDB under
// NEURON_CACHE_DIR, shared by every process of the node.
//
// Locking (many processes, one directory): RocksDB admits one writer process, and a read-only
// instance must not be open while a writer is. So every access is short-lived and takes a file
// lock on <dir>/store.lock first: shared to read (open read-only, get, close), exclusive to write
// (open, write, close). Compiles are single-flight per key across processes through an exclusive
// lock on <dir>/locks/<key>. flock() locks die with their process, so a killed writer or
// compiler never leaves a stale lock; RocksDB's write-ahead log leaves the old value or none.
//
// Fail open: any fault (no directory, read-only directory, full disk, damaged database, corrupt
// entry) is a miss, a counter and at most one warning per kind of fault; nothing throws.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_warnings.h"  // setCacheWarningHandler, for users of the store

namespace torchneuron {

struct PersistentStoreStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t corrupt = 0;   // entries that failed parsing or verification
  int64_t evicted = 0;
  int64_t write_failures = 0;
};

struct StoredEntryInfo {
  std::string key;
  int64_t bytes = 0;
  int64_t kernels = 0;
  int64_t last_use_unix_ms = 0;
  std::string problem;  // "" when the entry parses and its checksum holds
};

class PersistentStore {
 public:
  // The store for `directory` (created with mode 0700 when missing). `max_bytes` <= 0: no cap.
  PersistentStore(std::string directory, int64_t max_bytes);
  ~PersistentStore();

  // The process's store, configured from NEURON_CACHE, NEURON_CACHE_DIR (default
  // ~/.cache/torchneuron) and NEURON_CACHE_MAX_BYTES; nullptr when NEURON_CACHE=0.
  static PersistentStore* fromEnvironment();

  const std::string& directory() const { return directory_; }

  // The stored bytes of `key`, or nullopt (a miss; also on any fault).
  std::optional<std::vector<char>> get(const std::string& key);
  // Stores `value` and its last-use time, then evicts least recently used entries over the cap.
  bool put(const std::string& key, const std::vector<char>& value);
  void noteCorrupt(const std::string& key, const std::string& why);

  // A remembered compile failure of `key` for `engine_version` (this engine's by default), or
  // nullopt: a failure recorded by another engine version is retried.
  std::optional<std::string> failure(const std::string& key, const std::string& engine_version = "");
  void recordFailure(const std::string& key, const std::string& reason,
                     const std::string& engine_version = "");

  // Holds the cross-process compile lock of one key until destroyed.
  class KeyLock {
   public:
    explicit KeyLock(int fd) : fd_(fd) {}
    ~KeyLock();
    KeyLock(const KeyLock&) = delete;
    KeyLock& operator=(const KeyLock&) = delete;
   private:
    int fd_;
  };
  // Waits up to `deadline` for the key's lock; nullptr when it cannot be had (the caller then
  // compiles without it: correct, at worst one duplicate compile).
  std::unique_ptr<KeyLock> lockKey(const std::string& key, std::chrono::milliseconds deadline);

  // Administration (the torchneuron-cache CLI).
  PersistentStoreStats stats();
  std::vector<StoredEntryInfo> list();
  int64_t prune(int64_t max_bytes);  // returns the number of entries evicted
  bool clear();
  // Writes every entry to `file` (length-prefixed key/value records); returns the count or -1.
  int64_t exportTo(const std::string& file);
  // Reads such a file, verifying each entry's container checksum; returns the number imported,
  // or -1 when the file is unreadable. Damaged entries are skipped and counted in `rejected`.
  int64_t importFrom(const std::string& file, int64_t* rejected);

 private:
  struct Impl;
  std::string directory_;
  int64_t max_bytes_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace torchneuron

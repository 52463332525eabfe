#pragma once
// The persistent tier of the compile cache: executable containers in RocksDB under
// NEURON_CACHE_DIR, shared by every process of the node.
//
// Locking (many processes, one directory): RocksDB admits one writer process, and a read-only
// instance must not be open while a writer is. So every access is short-lived and takes a file
// lock on <dir>/store.lock first: shared to read (open read-only, get, close), exclusive to write
// (open, write, close). Compiles are single-flight per key across processes through an exclusive
// lock on <dir>/locks/<key>, whose file its holder removes before letting go (KeyLock). flock()
// locks die with their process, so a killed writer or
// compiler never leaves a stale lock; RocksDB's write-ahead log leaves the old value or none.
//
// Fail open: any fault (no directory, read-only directory, full disk, damaged database, corrupt
// entry) is a miss, a counter and at most one warning per kind of fault; nothing throws.
//
// Trust (docs/persistent-cache.md): the directory must pass directory_trust.h's checks and the
// MAC key (entry_authenticator.h) must load, else the store is off (problem() says why). Every
// entry written is sealed with the key; get() returns only entries whose MAC verifies.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_warnings.h" // setCacheWarningHandler, for users of the store
#include "cache/store_writer.h"

namespace torchneuron {

struct PersistentStoreStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t corrupt = 0; // entries that failed parsing or verification
  int64_t evicted = 0;
  int64_t write_failures = 0;
  int64_t foreign = 0;          // entries of another format version or key id: misses, no warning
  int64_t forged = 0;           // entries whose MAC failed: never returned
  int64_t lookup_opens = 0;     // times get() or failure() opened the database (this instance)
  std::string database_problem; // "" unless the database cannot be read (damaged)
};

struct StoredEntryInfo {
  std::string key;
  int64_t bytes = 0;
  int64_t kernels = 0;
  int64_t last_use_unix_ms = 0;
  std::string problem; // "" when the entry parses, its checksum holds and its MAC verifies
  uint32_t format_version = 0;
  std::string key_id;  // the signing key's id (hex), "" when unreadable
  std::string seal;    // "authentic", "other key", "other format", "damaged", "FORGED"
  std::string program; // describeProgram() of a parsed entry
};

// What get() found: an authentic entry; nothing; an entry of another format version or key id
// (a miss, counted in `foreign`, no warning); one whose checksum or MAC failed (counted, warned).
enum class StoreRead { kFound, kAbsent, kForeign, kRejected };

struct ExportReport {
  int64_t exported = 0;
  int64_t skipped = 0; // entries that are not authentic under this store's key
  std::string problem; // "" on success
};

struct ImportReport {
  int64_t imported = 0;
  int64_t resigned = 0;  // foreign entries signed with this store's key (trusted import)
  int64_t damaged = 0;   // another format version, failed checksum or fields, or misfiled: filed
                         // under a key their compile inputs do not hash to (ownStoreKey)
  int64_t untrusted = 0; // not authentic under this store's key, and not trusted
  std::string problem;   // "" unless nothing could be imported
};

struct ClearReport {
  bool cleared = false;
  int64_t profiles = 0;
  int64_t lock_files = 0;
  std::string kept_key; // the per-user key file, which clear() never removes
  std::string problem;
};

class PersistentStore {
public:
  // The store for `directory` (created with mode 0700 when missing). `max_bytes` <= 0: no cap.
  // A directory or key that fails the trust checks turns the store off (problem() says why;
  // fromEnvironment() warns once).
  PersistentStore(std::string directory, int64_t max_bytes);
  ~PersistentStore();

  // The process's store, configured from NEURON_CACHE, NEURON_CACHE_DIR (default
  // ~/.cache/torchneuron) and NEURON_CACHE_MAX_BYTES; nullptr when NEURON_CACHE=0 or when the
  // directory or the key is refused (warned once).
  static PersistentStore* fromEnvironment();

  // The resolved directory (symbolic links followed once, when it was checked).
  const std::string& directory() const { return directory_; }
  // Why the store is off ("" when it is on).
  const std::string& problem() const;
  // The MAC key's id (hex) and where the key comes from ("" when off).
  std::string keyId() const;
  std::string keySource() const;

  // The stored bytes of `key` when its MAC verifies under this store's key, else nullopt (a miss;
  // also on any fault); `read` tells why.
  std::optional<std::vector<char>> get(const std::string& key, StoreRead* read = nullptr);
  // Seals `value` (a serialized container) with this store's key and stores it and its last-use
  // time, then evicts least recently used entries over the cap.
  bool put(const std::string& key, const std::vector<char>& value);
  // Stores `value` exactly as given (already sealed: imports; tests planting entries).
  bool putVerbatim(const std::string& key, const std::vector<char>& value);
  class KeyLock;
  // As put(), but written by the background writer (store_writer.h), batched with others; the
  // caller goes on at once. `lock` (the key's compile lock, may be null) is held until the entry
  // is durable. Written by flushWrites(), at the latest by process exit. `sealed`: `value` is
  // already sealed with this store's key (its seal verified: a remote hit under the same key),
  // and is stored as it is.
  void putLater(const std::string& key, std::vector<char> value, std::unique_ptr<KeyLock> lock,
                bool sealed = false);
  // Returns once every write handed to the background writer before the call is durable.
  void flushWrites();
  StoreWriterStats writerStats();
  void noteCorrupt(const std::string& key, const std::string& why);

  // A remembered compile failure of `key` for `engine_version` (this engine's by default), or
  // nullopt: a failure recorded by another engine version is retried.
  std::optional<std::string> failure(const std::string& key,
                                     const std::string& engine_version = "");
  void recordFailure(const std::string& key, const std::string& reason,
                     const std::string& engine_version = "");

  // Holds the cross-process compile lock of one key until destroyed, then removes its lock
  // file (still holding the lock, so a process that opened the same file sees it unlinked and
  // takes a new one: lock files do not pile up, and two holders never coexist).
  class KeyLock {
  public:
    KeyLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
    ~KeyLock();
    KeyLock(const KeyLock&) = delete;
    KeyLock& operator=(const KeyLock&) = delete;

  private:
    int fd_;
    std::string path_;
  };
  // Waits up to `deadline` for the key's lock; nullptr when it cannot be had (the caller then
  // compiles without it: correct, at worst one duplicate compile).
  std::unique_ptr<KeyLock> lockKey(const std::string& key, std::chrono::milliseconds deadline);

  // Administration (the torchneuron-cache CLI). A database that cannot be read is reported in
  // `database_problem`, not as an empty cache. Reads and verifies every entry.
  PersistentStoreStats stats();
  // Writes of this instance that failed so far (stats().write_failures, without reading the
  // database).
  int64_t writeFailures() const;
  std::vector<StoredEntryInfo> list(std::string* database_problem = nullptr);
  int64_t prune(int64_t max_bytes); // returns the number of entries evicted
  // Removes the database, the warm-start profiles and unheld lock files; keeps the key and any
  // file the cache did not write.
  ClearReport clear();
  // RocksDB's RepairDB over the database: "" or the problem.
  std::string repair();
  // Writes every authentic entry, as sealed, to `file` (cache_archive.h), which must lie outside
  // the cache directory.
  ExportReport exportTo(const std::string& file);
  // Reads such a file (every record validated first) and stores the entries authentic under
  // this store's key; with `trust`, also re-signs intact foreign ones.
  ImportReport importFrom(const std::string& file, bool trust);

private:
  void takeSnapshot();
  // Seals `value` (a serialized container) with this store's key; false (counted as a failed
  // write, warned once) when it is not an intact container.
  bool seal(std::vector<char>& value);
  StoreWriter& writer();
  void commit(std::vector<PendingWrite>& batch);
  void commitBatch(std::vector<PendingWrite>& batch);
  std::string openTrusted(); // the trust checks and the key: "" or why the store is off
  bool off() const;
  StoreRead authenticate(const std::string& key, const std::vector<char>& bytes);
  struct Impl;
  std::string directory_;
  int64_t max_bytes_;
  std::unique_ptr<Impl> impl_;
};

} // namespace torchneuron

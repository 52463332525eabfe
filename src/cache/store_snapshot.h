#pragma once
// What a process knows of the persistent store without reading an entry (persistent_store.h):
// the keys stored and the remembered failures, read in one pass under the store's shared lock,
// valid for as long as the database's generation is unchanged. RocksDB writes a new MANIFEST and
// repoints CURRENT every time a writer opens the database, so CURRENT's content and identity
// change with every write by any process (StoreGeneration). A miss that finds the generation
// unchanged is answered here, without touching the database; one that finds it changed reads
// the database. A stale answer can only cost a duplicate compile (the key's lock, taken before a
// compile, is held until that entry is durable), never a wrong kernel: every entry returned is
// verified as any other.
//
// The keys are those of the last-use records, which every stored entry has (a put writes both,
// eviction deletes both): reading them touches a few hundred bytes per entry where reading the
// entries' own keys would read and decompress every entry. A last-use record without its entry
// (refreshed while another process evicted it) only sends that lookup to the database.
//
// Thread-safe: one mutex guards everything; it is never held while the database is open.

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torchneuron {

// CURRENT alone can repeat: a database destroyed (torchneuron-cache clear) and created again
// starts its MANIFEST numbers over, its CURRENT may get the freed inode back, and a filesystem
// with coarse timestamps can give it the old modification time. IDENTITY (a UUID RocksDB writes
// when it creates a database) tells the two databases apart.
struct StoreGeneration {
  std::string current; // the content of <db>/CURRENT ("" when there is no database)
  ino_t inode = 0;
  int64_t modified_ns = 0;
  std::string identity; // the content of <db>/IDENTITY
  bool operator==(const StoreGeneration& other) const {
    return current == other.current && inode == other.inode && modified_ns == other.modified_ns &&
           identity == other.identity;
  }
};

// The generation of the database at `db_path` now (a stat and reads of a few bytes).
StoreGeneration readGeneration(const std::string& db_path);

class StoreSnapshot {
public:
  // What one pass over the database found (taken under the store's shared lock).
  struct Contents {
    StoreGeneration generation;
    bool complete = true; // false when the database could not be read: no absence known
    std::unordered_set<std::string> keys;                  // of the entries stored
    std::unordered_map<std::string, std::string> failures; // key -> failure, as stored
  };

  bool taken() const;
  void replace(Contents contents);
  void clear(); // forgets everything: the next lookup takes a new snapshot

  // True when `key` is known to be absent: the snapshot is complete, the database's generation
  // is `now`, and neither the snapshot nor this process's writes since then hold the key.
  bool knownAbsent(const std::string& key, const StoreGeneration& now) const;
  // The remembered failure of `key` as the snapshot holds it (value as stored), when the
  // generation is `now`; otherwise `known` is false and the database must be read.
  std::optional<std::string> failure(const std::string& key, const StoreGeneration& now,
                                     bool* known) const;

  // This process's writes, made under the store's exclusive lock. beginWrite(before): a write
  // starts from generation `before`; until endWrite(), no other process can write, so if the
  // snapshot was current at `before` it stays current whatever CURRENT says meanwhile (the
  // write's own keys are this process's, already in memory). endWrite(): the write left the
  // database at `after`, having stored `keys` (entries) and `failures` (when `written`); a
  // snapshot current at `before` stays current at `after`, a stale one stays stale, and a failed
  // write (which may have stored part of its batch) leaves it stale.
  void beginWrite(const StoreGeneration& before);
  void endWrite(bool written, const StoreGeneration& after, const std::vector<std::string>& keys,
                const std::unordered_map<std::string, std::string>& failures);

private:
  mutable std::mutex mutex_;
  bool taken_ = false;
  bool writing_from_current_ = false; // a write of this process started from the snapshot's
  Contents contents_;                 // its keys grow with this process's writes
};

} // namespace torchneuron

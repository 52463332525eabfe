#include "cache/persistent_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "cache/bounded_flock.h"
#include "cache/cache_archive.h"
#include "cache/cache_directory_tag.h"
#include "cache/cache_warnings.h"
#include "cache/directory_trust.h"
#include "cache/entry_authenticator.h"
#include "cache/entry_verification.h"
#include "cache/executable_container.h"
#include "cache/store_snapshot.h"
#include "cache/store_writer.h"
#include "cache/warm_start_profile.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron {
namespace {

// Key prefixes: an entry, its last use (unix ms, 8 bytes), its size in bytes (8 bytes), a
// remembered compile failure. The sizes let eviction total the store from small records instead
// of reading every entry; an entry stored by an engine without them (none before 2026-12-06) has
// its size read once, by the first eviction, and recorded then.
const std::string kEntry = "e/", kUse = "u/", kSize = "s/", kFailure = "f/";
constexpr int64_t kUseGranularityMs = 3600 * 1000;

// A forked child that exits normally leaves here, before the static destructors: the
// destructor of RocksDB's thread pool waits forever for the parent's pool threads, which do not
// exist in the child. Python has finalized by now; stdio is flushed as exit() would.
void exitForkedChild(int status, void*) {
  std::fflush(nullptr);
  _exit(status);
}

// RocksDB's background threads do not survive fork(), and its thread-pool state in a child
// is not safe to use: a forked child (a DataLoader worker) runs without the persistent tier.
std::atomic<bool> in_forked_child{false};
void registerForkHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(nullptr, nullptr, [] {
      in_forked_child.store(true);
      on_exit(exitForkedChild, nullptr); // registered last, so it runs first
    });
  });
}

// The descriptors of the flock() locks this process holds (store.lock, locks/<key>). A forked
// child inherits them, and an flock() lives until every descriptor of it is closed: a child
// that kept them would hold its parent's store lock (and every other process's writes) for its
// whole life. The child closes its copies; the parent's locks stay held by the parent.
// Locking: `held_locks_mutex` guards `held_locks`, a leaf held across fork().
std::mutex held_locks_mutex;
std::set<int>* held_locks = nullptr;

// Takes `held_locks_mutex`, registering the fork handlers at first use. Opening and closing
// happen under it, so a fork never sees a descriptor that is open but not yet noted.
std::unique_lock<std::mutex> lockHeldLocks() {
  static std::once_flag fork_handlers;
  std::call_once(fork_handlers, [] {
    registerForkHandlers(ForkRank::kStoreLocks,
                         {[] { held_locks_mutex.lock(); }, [] { held_locks_mutex.unlock(); },
                          [] {
                            if (held_locks)
                              for (int fd : *held_locks)
                                close(fd);
                            if (held_locks) held_locks->clear();
                            held_locks_mutex.unlock();
                          }});
  });
  std::unique_lock<std::mutex> lock(held_locks_mutex);
  if (held_locks == nullptr) held_locks = new std::set<int>();
  return lock;
}

// open() and close() of a lock file, its descriptor noted for a forked child.
int openLockFile(const char* path, int flags) {
  std::unique_lock<std::mutex> lock = lockHeldLocks();
  const int fd = open(path, flags, 0600);
  if (fd >= 0) held_locks->insert(fd);
  return fd;
}

void closeLockFile(int fd) {
  std::unique_lock<std::mutex> lock = lockHeldLocks();
  held_locks->erase(fd);
  close(fd);
}

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A last-use time or a size as stored: 8 bytes, host order (a cache never leaves its host in
// this form: an export carries entries only).
std::string encodeNumber(int64_t value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}
std::optional<int64_t> decodeNumber(const rocksdb::Slice& stored) {
  int64_t value = 0;
  if (stored.size() != sizeof value) return std::nullopt;
  std::memcpy(&value, stored.data(), sizeof value);
  return value;
}
int64_t decodeTime(const std::string& stored) { return decodeNumber(stored).value_or(0); }

// How long a process waits for the store's lock before it goes on without the persistent
// cache: a write holds it for a batch (milliseconds), so only a stopped or hung holder (SIGSTOP,
// a debugger) makes anyone wait this long; a blocking flock() waited on such a holder forever.
// After a wait ran out, the process tries without waiting until it gets the lock again, so the
// holder costs it one wait, not one per cache lookup.
constexpr std::chrono::seconds kStoreLockWait{10};
std::atomic<bool> store_lock_wait_ran_out{false};

// An flock() held until destruction, taken within kStoreLockWait: held() is false (errno set)
// when it could not be taken, and a wait that ran out warns once.
class FileLock {
public:
  FileLock(const std::string& path, int operation) {
    fd_ = openLockFile(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0 && errno != ELOOP)
      fd_ = openLockFile(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC); // a read-only directory
    if (fd_ < 0) return;
    const bool ran_out_before = store_lock_wait_ran_out.load();
    if (flockWithin(fd_, operation, ran_out_before ? std::chrono::seconds(0) : kStoreLockWait)) {
      store_lock_wait_ran_out.store(false);
      return;
    }
    const int error = errno;
    closeLockFile(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      store_lock_wait_ran_out.store(true);
      warnCacheOnce("lock-wait", "another process has held " + path + " for over " +
                                     std::to_string(kStoreLockWait.count()) +
                                     " s (stopped or hung?); the compile cache is bypassed "
                                     "while it holds it, kernels compile as usual");
    }
    errno = error;
  }
  ~FileLock() {
    if (fd_ >= 0) closeLockFile(fd_); // closing releases the lock
  }
  bool held() const { return fd_ >= 0; }

private:
  int fd_ = -1;
};

// A name in the database directory that is neither a regular file nor a directory (a FIFO, a
// device, a socket, a link): RocksDB would open it as one of its files, and opening a FIFO blocks
// until a writer comes, which hung every process using the cache. "" or the problem naming it.
std::string specialFileProblem(const std::string& db_path) {
  DIR* listing = opendir(db_path.c_str());
  if (listing == nullptr) return "";
  std::string problem;
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    struct stat info;
    if (name == "." || name == ".." || lstat((db_path + "/" + name).c_str(), &info) != 0) continue;
    if (!S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode)) {
      problem = db_path + "/" + name + " is not a regular file";
      break;
    }
  }
  closedir(listing);
  return problem;
}

// RocksDB's informational LOG file is not written: nobody reads it, each short-lived open would
// add to it, and Debian's RocksDB 7.8 (built with assertions) aborts the process when it logs
// again after a failed write to that file (a full disk).
class DiscardingLogger : public rocksdb::Logger {
public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

rocksdb::Options baseOptions() {
  // Never destroyed: the background writer may still open the database while statics go.
  static MadeOnce<const std::shared_ptr<rocksdb::Logger>> logger; // fork-safe (made_once.h)
  rocksdb::Options options;
  options.info_log =
      logger.get([] { return new std::shared_ptr<rocksdb::Logger>(new DiscardingLogger()); });
  // Table files are opened on the calling thread: with more, RocksDB starts threads to open
  // them and calls std::terminate when one cannot start (under an address-space limit), where
  // the calling thread would have got a clean error. The cache has few, small tables.
  options.max_file_opening_threads = 1;
  return options;
}

// Makes every static that opening a database makes (RocksDB's periodic task scheduler's timer and
// mutex among them, made at the first DB::Open) by opening a throwaway database in memory. The
// writer's exit handler must be registered after them: registered before, it ran after their
// destructors, and a process whose first write of the store happened at exit (a short run on an
// empty cache) aborted in DB::Open ("pthread lock: Invalid argument").
void makeOpenStatics() {
  std::unique_ptr<rocksdb::Env> memory(rocksdb::NewMemEnv(rocksdb::Env::Default()));
  rocksdb::Options options = baseOptions();
  options.env = memory.get();
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  if (rocksdb::DB::Open(options, "/torchneuron-open-statics", &db).ok()) delete db;
}

// One warning when the cache directory lies on a network filesystem; the store stays on (it works
// for one node's processes, but its locks do not coordinate hosts).
void warnIfNetworkFilesystem(const std::string& directory) {
  const std::string type = networkFilesystemOf(directory);
  if (type.empty()) return;
  warnCacheOnce("network-directory",
                "NEURON_CACHE_DIR " + directory + " is on a network filesystem (" + type +
                    "): RocksDB's file locking is not meant for one, so keep NEURON_CACHE_DIR on a "
                    "local disk of each node and share compiled kernels through "
                    "NEURON_CACHE_REMOTE=file:///<shared directory> instead");
}

} // namespace

struct PersistentStore::Impl {
  std::string db_path, lock_path, locks_dir;
  std::string problem; // why the store is off; set once, in the constructor
  std::unique_ptr<EntryAuthenticator> authenticator;
  std::string key_source;
  std::string open_problem; // the latest failure to open the database for reading
  // The keys stored and the failures, read at the first lookup and again whenever another
  // process has written, so a miss is answered without reading the database (store_snapshot.h).
  StoreSnapshot snapshot;
  // The database opened read-only at the first lookup and kept open while its generation is the
  // one it was opened at, so a warm process opens it once rather than once per kernel and reads
  // only the entries it looks up. Used only under the shared lock at that generation: no writer
  // is active then and none has been since the open (each write changes the generation), so
  // every file the instance opened is as it was. Guarded by `mutex`.
  std::unique_ptr<rocksdb::DB> reader;
  StoreGeneration reader_generation;
  // Made at the first putLater(): entries of compiles, and last-use refreshes (store_writer.h).
  std::once_flag writer_made;
  std::unique_ptr<StoreWriter> writer;
  std::atomic<StoreWriter*> writer_made_ptr{nullptr}; // `writer`, once made (read without the once)
  std::atomic<int64_t> hits{0}, misses{0}, corrupt{0}, evicted{0}, write_failures{0};
  std::atomic<int64_t> foreign{0}, forged{0}, lookup_opens{0};
  std::mutex mutex; // one store operation at a time per process (flock is per open file)
  // The database's problem a read warned about: a write failing for the same reason adds no
  // second warning for the one fault.
  std::mutex warned_mutex;
  std::string warned_open_problem;

  // What a damaged database's warning adds: the command that recovers it.
  std::string repairAdvice() const {
    return ". `torchneuron-cache --dir " + db_path.substr(0, db_path.rfind('/')) +
           " repair` recovers what it can";
  }

  // Opens the database read-only under a shared lock; nullptr when it does not exist or fails
  // (`open_problem` says why; warned unless the caller reports it itself).
  std::unique_ptr<rocksdb::DB> openReader(bool warn) {
    struct stat info;
    open_problem.clear();
    if (stat((db_path + "/CURRENT").c_str(), &info) != 0) return nullptr; // nothing stored yet
    if (std::string special = specialFileProblem(db_path); !special.empty()) {
      open_problem = special;
      if (warn)
        warnCacheOnce("open", "cannot read the compile cache at " + db_path + " (" + special +
                                  "); it is bypassed, kernels compile as usual");
      return nullptr;
    }
    rocksdb::Options options = baseOptions();
    // A reader may stay open for the process's life: it schedules no periodic work (no thread),
    // and keeps at most 64 table files open (opened as reads need them), not all of them, so a
    // store of many tables does not hold many of the program's descriptors.
    options.stats_dump_period_sec = 0;
    options.stats_persist_period_sec = 0;
    options.max_open_files = 64;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status = rocksdb::DB::OpenForReadOnly(options, db_path, &db);
    if (!status.ok()) {
      open_problem = status.ToString();
      if (warn) {
        warnCacheOnce("open", "cannot read the compile cache at " + db_path + " (" +
                                  status.ToString() +
                                  "); it is bypassed, kernels compile as usual" +
                                  (status.IsCorruption() ? repairAdvice() : ""));
        std::lock_guard<std::mutex> lock(warned_mutex);
        warned_open_problem = status.ToString();
      }
      return nullptr;
    }
    return std::unique_ptr<rocksdb::DB>(db);
  }

  std::unique_ptr<rocksdb::DB> openWriter() {
    if (std::string special = specialFileProblem(db_path); !special.empty()) {
      warnCacheOnce("write", "cannot write the compile cache at " + db_path + " (" + special +
                                 "); compiled kernels are not kept for later runs");
      write_failures.fetch_add(1);
      return nullptr;
    }
    rocksdb::Options options = baseOptions();
    options.create_if_missing = true;
    options.max_open_files = 64;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status = rocksdb::DB::Open(options, db_path, &db);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(warned_mutex);
      if (status.ToString() != warned_open_problem) // else said once already, as a read's fault
        warnCacheOnce("write", "cannot write the compile cache at " + db_path + " (" +
                                   status.ToString() +
                                   "); compiled kernels are not kept for later runs");
      write_failures.fetch_add(1);
      return nullptr;
    }
    return std::unique_ptr<rocksdb::DB>(db);
  }

  // Writes what `fill` puts in one batch, synced and flushed, under the exclusive lock. The
  // snapshot follows it (store_snapshot.h): `keys` and `failures` are the entries and failures
  // the batch stores: every entry `fill` puts must be named in `keys`.
  bool write(const std::function<void(rocksdb::DB&, rocksdb::WriteBatch&)>& fill,
             const std::vector<std::string>& keys,
             const std::unordered_map<std::string, std::string>& failures = {}) {
    FileLock lock(lock_path, LOCK_EX);
    if (!lock.held()) {
      warnCacheOnce("lock", "cannot lock " + lock_path + " (" + std::strerror(errno) +
                                "); compiled kernels are not kept for later runs");
      write_failures.fetch_add(1);
      return false;
    }
    const StoreGeneration before = readGeneration(db_path);
    snapshot.beginWrite(before);
    bool written = false;
    try {
      written = writeHoldingLock(fill);
    } catch (const std::exception&) { // a warning's text out of memory: the write failed
      write_failures.fetch_add(1);
    }
    const StoreGeneration after = readGeneration(db_path);
    snapshot.endWrite(written, after, keys, failures);
    // A reader current before this write is opened again now, still under the exclusive lock
    // (so on the writer's thread, not at the next hit, and without a scan: the snapshot knows
    // what this write stored). After a failed write (which may still have stored some of it:
    // a synced log whose flush failed) the reader stays behind, so the next lookup scans again.
    if (written && reader && reader_generation == before) {
      try {
        openReaderAt(after);
      } catch (const std::exception&) { // out of memory: the next lookup opens it
        reader.reset();
      }
    }
    return written;
  }

  bool writeHoldingLock(const std::function<void(rocksdb::DB&, rocksdb::WriteBatch&)>& fill) {
    rocksdb::Status status;
    try { // RocksDB and the batch allocate: out of memory is a failed write, not an abort
      std::unique_ptr<rocksdb::DB> db = openWriter();
      if (!db) return false;
      rocksdb::WriteBatch batch;
      fill(*db, batch);
      rocksdb::WriteOptions options;
      options.sync = true;
      status = db->Write(options, &batch);
      // Flushed to a table file so the log is empty: readers open without replaying it.
      if (status.ok()) status = db->Flush(rocksdb::FlushOptions());
    } catch (const std::exception& error) {
      status = rocksdb::Status::Aborted(error.what());
    }
    if (!status.ok()) {
      warnCacheOnce("write", "writing the compile cache failed (" + status.ToString() + ")");
      write_failures.fetch_add(1);
      return false;
    }
    return true;
  }

  // Runs `fn` on the database opened for reading (null when there is none); a fault (RocksDB or
  // `fn` out of memory) warns once and gives what `fn` gives for no database.
  template <typename Fn>
  auto read(Fn&& fn, bool warn = true) -> decltype(fn(std::declval<rocksdb::DB*>())) {
    FileLock lock(lock_path, LOCK_SH);
    if (!lock.held()) { // `fn` reports it (list, verify and stats exit 1 rather than say 0 entries)
      open_problem = "cannot lock " + lock_path + " (" + std::strerror(errno) + ")";
      return fn(nullptr);
    }
    try {
      std::unique_ptr<rocksdb::DB> db = openReader(warn);
      return fn(db.get());
    } catch (const std::exception& error) {
      warnCacheOnce("read", std::string("reading the compile cache failed (") + error.what() +
                                "); it is bypassed, kernels compile as usual");
    }
    return fn(nullptr);
  }

  // Runs `fn` on the held reader under the shared lock (null when there is no database, it
  // cannot be read, or the lock cannot be taken). A reader of an older generation is closed and
  // the database opened again, and the snapshot is taken again from it. Called under `mutex`.
  template <typename Fn> auto readCurrent(Fn&& fn) -> decltype(fn(std::declval<rocksdb::DB*>())) {
    FileLock lock(lock_path, LOCK_SH);
    if (!lock.held()) return fn(nullptr);
    try {
      const StoreGeneration now = readGeneration(db_path);
      if (!reader || !(reader_generation == now)) reopenReader(now);
      return fn(reader.get());
    } catch (const std::exception& error) {
      reader.reset();
      warnCacheOnce("read", std::string("reading the compile cache failed (") + error.what() +
                                "); it is bypassed, kernels compile as usual");
    }
    return fn(nullptr);
  }

  // Closes the reader and opens the database again, at generation `now` (under the store's
  // lock, shared or exclusive); null when it cannot be read.
  void openReaderAt(const StoreGeneration& now) {
    reader.reset();
    reader = openReader(/*warn=*/true);
    reader_generation = now;
  }

  // Opens the reader at generation `now` (held under the shared lock) and takes the snapshot
  // from it: the keys of the last-use records and the failures, not the entries.
  void reopenReader(const StoreGeneration& now) {
    openReaderAt(now);
    StoreSnapshot::Contents contents;
    contents.generation = now;
    if (!reader) {
      contents.complete = now.current.empty(); // none yet, or unreadable
    } else {
      lookup_opens.fetch_add(1);
      std::unique_ptr<rocksdb::Iterator> it(reader->NewIterator(rocksdb::ReadOptions()));
      for (it->Seek(kUse); it->Valid() && it->key().starts_with(kUse); it->Next())
        contents.keys.insert(it->key().ToString().substr(kUse.size()));
      const bool keys_read = it->status().ok(); // the next Seek clears an error of this scan
      for (it->Seek(kFailure); it->Valid() && it->key().starts_with(kFailure); it->Next())
        contents.failures[it->key().ToString().substr(kFailure.size())] = it->value().ToString();
      contents.complete = keys_read && it->status().ok();
    }
    snapshot.replace(std::move(contents));
  }

  // Closes the reader (before the database is destroyed or repaired) and forgets the snapshot.
  void forgetReader() {
    reader.reset();
    snapshot.clear();
  }

  // Deletes least recently used entries until the total, with the entries `incoming` (key ->
  // size) that the batch then stores, is at most `max_bytes`. A key being stored again counts
  // once, at its new size, and is not evicted. Reads the last-use and size records, not the
  // entries: an entry without a size record (stored by an engine before 2026-12-06), or with an
  // impossible one, is read once and its size recorded in `batch`; a last-use record whose
  // entry is gone is deleted.
  int64_t evict(rocksdb::DB& db, rocksdb::WriteBatch& batch, int64_t max_bytes,
                const std::unordered_map<std::string, int64_t>& incoming) {
    struct Item {
      int64_t used, bytes;
      std::string key;
    };
    std::unordered_map<std::string, int64_t> sizes;
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(kSize); it->Valid() && it->key().starts_with(kSize); it->Next())
      if (std::optional<int64_t> bytes = decodeNumber(it->value()); bytes && *bytes > 0)
        sizes[it->key().ToString().substr(kSize.size())] = *bytes;
    std::vector<Item> items;
    int64_t total = 0;
    for (const auto& entry : incoming)
      total += entry.second;
    for (it->Seek(kUse); it->Valid() && it->key().starts_with(kUse); it->Next()) {
      const std::string key = it->key().ToString().substr(kUse.size());
      if (incoming.count(key) != 0) continue; // replaced by this batch
      int64_t bytes = 0;
      if (auto known = sizes.find(key); known != sizes.end()) {
        bytes = known->second;
      } else {
        std::string value;
        if (!db.Get(rocksdb::ReadOptions(), kEntry + key, &value).ok()) {
          batch.Delete(kUse + key); // its entry is gone
          continue;
        }
        bytes = static_cast<int64_t>(value.size());
        batch.Put(kSize + key, encodeNumber(bytes));
      }
      items.push_back({decodeNumber(it->value()).value_or(0), bytes, key});
      total += bytes;
    }
    std::sort(items.begin(), items.end(),
              [](const Item& a, const Item& b) { return a.used < b.used; });
    int64_t removed = 0;
    for (const Item& item : items) {
      if (total <= max_bytes) break;
      batch.Delete(kEntry + item.key);
      batch.Delete(kUse + item.key);
      batch.Delete(kSize + item.key);
      total -= item.bytes;
      ++removed;
    }
    evicted.fetch_add(removed);
    return removed;
  }
};

PersistentStore::PersistentStore(std::string directory, int64_t max_bytes)
    : directory_(std::move(directory)), max_bytes_(max_bytes), impl_(std::make_unique<Impl>()) {
  registerForkHandler();
  impl_->problem = openTrusted();
  impl_->db_path = directory_ + "/db";
  impl_->lock_path = directory_ + "/store.lock";
  impl_->locks_dir = directory_ + "/locks";
}

std::string PersistentStore::openTrusted() {
  std::string resolved;
  std::string problem = preparePrivateDirectory(directory_, &resolved);
  if (!problem.empty()) return problem;
  directory_ = resolved; // from here on, no link in the path is followed again
  if (problem = claimCacheDirectory(directory_); !problem.empty()) return problem;
  for (const char* sub : {"/locks", "/db"})
    if (problem = preparePrivateSubdirectory(directory_ + sub); !problem.empty()) return problem;
  impl_->authenticator = EntryAuthenticator::forCacheDirectory(directory_, &problem);
  if (!impl_->authenticator) return problem;
  const char* key_file = std::getenv("NEURON_CACHE_KEY_FILE");
  impl_->key_source = key_file != nullptr && *key_file
                          ? std::string("NEURON_CACHE_KEY_FILE ") + key_file
                          : directory_ + "/" + kUserKeyFileName;
  return "";
}

const std::string& PersistentStore::problem() const { return impl_->problem; }

std::string PersistentStore::keyId() const {
  return impl_->authenticator ? keyIdHex(impl_->authenticator->keyId()) : "";
}

std::string PersistentStore::keySource() const { return impl_->key_source; }

bool PersistentStore::off() const { return !impl_->problem.empty() || in_forked_child.load(); }

PersistentStore::~PersistentStore() {
  if (StoreWriter* w = impl_->writer_made_ptr.load())
    w->stop(); // its batches use this store: written before it goes
}

namespace {

// The store the environment asks for, or null (warned) when it is off.
PersistentStore* openFromEnvironment() {
  const Settings& settings = cacheSettings();
  if (!settings.cache_enabled) return nullptr;
  const std::string directory = defaultCacheDirectory();
  if (directory.empty()) {
    warnCacheOnce("trust", "the persistent compile cache is off: HOME is unset and this user has "
                           "no home directory (set NEURON_CACHE_DIR); kernels compile as usual");
    return nullptr;
  }
  auto candidate = std::make_unique<PersistentStore>(directory, settings.cache_max_bytes);
  if (candidate->problem().empty()) {
    warnIfNetworkFilesystem(candidate->directory());
    return candidate.release();
  }
  constexpr const char* kKeyFile = "NEURON_CACHE_KEY_FILE: ";
  if (candidate->problem().rfind(kKeyFile, 0) == 0) {
    warnKeyFileRefused(candidate->problem().substr(std::strlen(kKeyFile)));
    return nullptr;
  }
  warnCacheOnce("trust", "the persistent compile cache is off: " + candidate->problem() +
                             "; kernels compile as usual");
  return nullptr;
}

} // namespace

PersistentStore* PersistentStore::fromEnvironment() {
  // Fork-safe (made_once.h): opening takes locks and time. A child forked while its parent's
  // thread opened the store opens none once the store's fork handler exists (the store is off
  // in a forked child anyway); forked before that, it opens one as a fresh process would.
  static MadeOnce<PersistentStore*> store;
  return store.get([]() -> PersistentStore** {
    return new PersistentStore*(in_forked_child.load() ? nullptr : openFromEnvironment());
  });
}

namespace {

// Removes the compile-lock files under `locks_dir` that nobody holds (left by a process killed
// while it held them); one held by a compiling process stays. Safe against a process that opened
// a file just before it goes: having locked it, that process finds it unlinked and takes the one
// at the path (lockKey). Returns how many it removed.
int64_t removeUnheldLockFiles(const std::string& locks_dir) {
  int64_t removed = 0;
  if (DIR* dir = opendir(locks_dir.c_str())) {
    while (dirent* item = readdir(dir)) {
      const std::string name = item->d_name, path = locks_dir + "/" + name;
      if (!isStoreKey(name)) continue;
      const int fd = openLockFile(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC); // fork-safe
      if (fd < 0) continue;
      if (flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(path.c_str()) == 0) ++removed;
      closeLockFile(fd);
    }
    closedir(dir);
  }
  return removed;
}

} // namespace

// The first lookup of the process: opens the reader, takes the snapshot, and removes stale
// lock files.
void PersistentStore::takeSnapshot() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->snapshot.taken()) return;
  impl_->readCurrent([](rocksdb::DB*) { return 0; });
  if (!impl_->snapshot.taken()) // the shared lock could not be taken: nothing is known
    impl_->snapshot.replace(StoreSnapshot::Contents{StoreGeneration{}, false, {}, {}});
  removeUnheldLockFiles(impl_->locks_dir);
}

std::optional<std::vector<char>> PersistentStore::get(const std::string& key, StoreRead* read) {
  if (read) *read = StoreRead::kAbsent;
  if (off()) return std::nullopt;
  if (!impl_->snapshot.taken()) takeSnapshot();
  std::optional<std::vector<char>> found;
  bool stale_use = false;
  if (impl_->snapshot.knownAbsent(key, readGeneration(impl_->db_path))) {
    impl_->misses.fetch_add(1);
    return std::nullopt; // nothing was written since the snapshot, which does not hold it
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    found = impl_->readCurrent([&](rocksdb::DB* db) -> std::optional<std::vector<char>> {
      std::string value, used;
      if (db == nullptr) return std::nullopt;
      const rocksdb::Status status = db->Get(rocksdb::ReadOptions(), kEntry + key, &value);
      if (!status.ok()) {
        // A damaged table file (or an I/O error) reads as a miss: the kernel is recompiled and
        // written again, but the damage stays until repaired, so it is said once.
        if (!status.IsNotFound())
          warnCacheOnce("damaged", "the compile cache at " + impl_->db_path +
                                       " could not read an entry (" + status.ToString() +
                                       "); its kernel is recompiled" + impl_->repairAdvice());
        return std::nullopt;
      }
      stale_use = !db->Get(rocksdb::ReadOptions(), kUse + key, &used).ok() ||
                  nowMs() - decodeTime(used) > kUseGranularityMs;
      return std::vector<char>(value.begin(), value.end());
    });
  }
  if (found) {
    const StoreRead verdict = authenticate(key, *found);
    if (read) *read = verdict;
    if (verdict != StoreRead::kFound) found.reset();
  }
  // Last use is kept to the hour (what LRU eviction needs), so a warm run writes nothing; a
  // stale one is refreshed by the background writer, off this thread.
  if (found && stale_use) {
    PendingWrite touch;
    touch.key = key;
    touch.touch_only = true;
    writer().enqueue(std::move(touch));
  }
  (found ? impl_->hits : impl_->misses).fetch_add(1);
  return found;
}

StoreWriter& PersistentStore::writer() {
  std::call_once(impl_->writer_made, [this] {
    // The writer's exit handler (registered when the first writer is made) must run before
    // the statics a write uses are destroyed, so they are made first: exit handlers and static
    // destructors run in the reverse order of their registration.
    baseOptions();
    rocksdb::Env::Default();
    makeOpenStatics();
    impl_->writer =
        std::make_unique<StoreWriter>([this](std::vector<PendingWrite>& batch) { commit(batch); });
    impl_->writer_made_ptr.store(impl_->writer.get());
  });
  return *impl_->writer;
}

void PersistentStore::putLater(const std::string& key, std::vector<char> value,
                               std::unique_ptr<KeyLock> lock, bool sealed) {
  if (off()) return;
  PendingWrite write;
  write.key = key;
  write.value = std::move(value);
  if (!sealed && !seal(write.value)) return;
  write.hold = std::shared_ptr<KeyLock>(std::move(lock));
  writer().enqueue(std::move(write));
}

void PersistentStore::flushWrites() {
  if (StoreWriter* w = impl_->writer_made_ptr.load()) w->flush();
}

StoreWriterStats PersistentStore::writerStats() {
  StoreWriter* w = impl_->writer_made_ptr.load();
  return w ? w->stats() : StoreWriterStats();
}

// On the writer's thread: one write for the whole batch (entries, last-use refreshes, and the
// eviction the entries need). Its warnings are queued for a thread that can show them.
void PersistentStore::commit(std::vector<PendingWrite>& batch) {
  QueueCacheWarningsHere queue_warnings;
  try {
    commitBatch(batch);
  } catch (const std::exception& error) { // out of memory: a failed write, not an abort
    impl_->write_failures.fetch_add(1);
    warnCacheOnce("write", std::string("writing the compile cache failed (") + error.what() + ")");
  }
}

void PersistentStore::commitBatch(std::vector<PendingWrite>& batch) {
  std::vector<std::string> keys;
  std::unordered_map<std::string, int64_t> incoming; // key -> size; the last write of a key wins
  for (const PendingWrite& w : batch)
    if (!w.touch_only) {
      keys.push_back(w.key);
      incoming[w.key] = static_cast<int64_t>(w.value.size());
    }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->write(
      [&](rocksdb::DB& db, rocksdb::WriteBatch& out) {
        if (max_bytes_ > 0 && !incoming.empty()) impl_->evict(db, out, max_bytes_, incoming);
        const std::string now = encodeNumber(nowMs());
        for (const PendingWrite& w : batch) {
          if (!w.touch_only) {
            out.Put(kEntry + w.key, rocksdb::Slice(w.value.data(), w.value.size()));
            out.Put(kSize + w.key, encodeNumber(static_cast<int64_t>(w.value.size())));
            out.Delete(kFailure + w.key);
          }
          out.Put(kUse + w.key, now);
        }
      },
      keys);
}

StoreRead PersistentStore::authenticate(const std::string& key, const std::vector<char>& bytes) {
  std::string why;
  switch (checkSeal(bytes, *impl_->authenticator, &why)) {
  case SealStatus::kAuthentic:
    return StoreRead::kFound;
  case SealStatus::kOtherFormat:
  case SealStatus::kOtherKey:
    impl_->foreign.fetch_add(1);
    return StoreRead::kForeign;
  case SealStatus::kDamaged:
    noteCorrupt(key, why);
    return StoreRead::kRejected;
  case SealStatus::kForged:
    impl_->forged.fetch_add(1);
    warnCacheOnce("forged", "a cached kernel failed authentication (" + why +
                                "): it was forged or damaged after it was written; it was not "
                                "loaded and will be recompiled");
    return StoreRead::kRejected;
  }
  return StoreRead::kRejected;
}

bool PersistentStore::seal(std::vector<char>& value) {
  if (sealContainer(value, *impl_->authenticator)) return true;
  impl_->write_failures.fetch_add(1);
  warnCacheOnce("seal", "refused to store an entry that is not an intact container");
  return false;
}

bool PersistentStore::put(const std::string& key, const std::vector<char>& value) {
  if (off()) return false;
  std::vector<char> sealed = value;
  return seal(sealed) && putVerbatim(key, sealed);
}

bool PersistentStore::putVerbatim(const std::string& key, const std::vector<char>& value) {
  if (off()) return false;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->write(
      [&](rocksdb::DB& db, rocksdb::WriteBatch& batch) {
        if (max_bytes_ > 0)
          impl_->evict(db, batch, max_bytes_, {{key, static_cast<int64_t>(value.size())}});
        batch.Put(kEntry + key, rocksdb::Slice(value.data(), value.size()));
        batch.Put(kUse + key, encodeNumber(nowMs()));
        batch.Put(kSize + key, encodeNumber(static_cast<int64_t>(value.size())));
        batch.Delete(kFailure + key);
      },
      {key});
}

void PersistentStore::noteCorrupt(const std::string& key, const std::string& why) {
  impl_->corrupt.fetch_add(1);
  warnCacheOnce("corrupt", "a cached kernel failed verification (" + why +
                               "); it was ignored and will be recompiled");
}

std::optional<std::string> PersistentStore::failure(const std::string& key,
                                                    const std::string& engine_version) {
  const std::string version = engine_version.empty() ? kEngineVersion : engine_version;
  if (off()) return std::nullopt;
  if (!impl_->snapshot.taken()) takeSnapshot();
  bool known = false;
  std::optional<std::string> value =
      impl_->snapshot.failure(key, readGeneration(impl_->db_path), &known);
  if (!known) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    value = impl_->readCurrent([&](rocksdb::DB* db) -> std::optional<std::string> {
      std::string stored;
      if (db == nullptr || !db->Get(rocksdb::ReadOptions(), kFailure + key, &stored).ok())
        return std::nullopt;
      return stored;
    });
  }
  if (!value) return std::nullopt;
  const size_t split = value->find('\n'); // "<engine version>\n<reason>"
  if (split == std::string::npos || value->substr(0, split) != version) return std::nullopt;
  return value->substr(split + 1);
}

void PersistentStore::recordFailure(const std::string& key, const std::string& reason,
                                    const std::string& engine_version) {
  const std::string version = engine_version.empty() ? kEngineVersion : engine_version;
  if (off()) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string value = version + "\n" + reason;
  impl_->write([&](rocksdb::DB&, rocksdb::WriteBatch& batch) { batch.Put(kFailure + key, value); },
               {}, {{key, value}});
}

PersistentStore::KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  unlink(path_.c_str()); // a read-only directory keeps it: harmless, the next holder reuses it
  closeLockFile(fd_);    // closing releases the lock
}

namespace {

// True when `fd` is the file linked at `path` now (not one a previous holder unlinked).
bool isLinkedAt(int fd, const std::string& path) {
  struct stat held{};
  struct stat linked{};
  return fstat(fd, &held) == 0 && lstat(path.c_str(), &linked) == 0 &&
         held.st_dev == linked.st_dev && held.st_ino == linked.st_ino;
}

} // namespace

std::unique_ptr<PersistentStore::KeyLock>
PersistentStore::lockKey(const std::string& key, std::chrono::milliseconds deadline) {
  if (off()) return nullptr;
  const std::string path = impl_->locks_dir + "/" + key;
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (true) {
    const int fd = openLockFile(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return nullptr;
    if (!flockWithin(fd, LOCK_EX, until - std::chrono::steady_clock::now())) {
      closeLockFile(fd);
      warnCacheOnce("deadline", "waited past the deadline for another process compiling the same "
                                "kernel; compiling here too");
      return nullptr;
    }
    if (isLinkedAt(fd, path)) return std::make_unique<KeyLock>(fd, path);
    closeLockFile(fd); // its holder finished and removed it: lock the file there now
  }
}

std::vector<StoredEntryInfo> PersistentStore::list(std::string* database_problem) {
  std::vector<StoredEntryInfo> entries;
  if (off()) {
    if (database_problem) *database_problem = impl_->problem;
    return entries;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string problem = impl_->read(
      [&](rocksdb::DB* db) -> std::string {
        if (db == nullptr) return impl_->open_problem;
        std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
        for (it->Seek(kEntry); it->Valid() && it->key().starts_with(kEntry); it->Next()) {
          StoredEntryInfo info;
          info.key = it->key().ToString().substr(kEntry.size());
          const std::vector<char> bytes(it->value().data(),
                                        it->value().data() + it->value().size());
          info.bytes = static_cast<int64_t>(bytes.size());
          info.format_version = containerFormatVersion(bytes).value_or(0);
          if (auto id = sealKeyId(bytes)) info.key_id = keyIdHex(*id);
          std::string why;
          const SealStatus seal = checkSeal(bytes, *impl_->authenticator, &why);
          std::optional<ExecutableContainer> container = parseContainer(bytes, &why);
          switch (seal) {
          case SealStatus::kAuthentic:
            info.seal = "authentic";
            break;
          case SealStatus::kOtherKey:
            info.seal = "other key";
            break;
          case SealStatus::kOtherFormat:
            info.seal = "other format";
            break;
          case SealStatus::kDamaged:
            info.seal = "damaged";
            break;
          case SealStatus::kForged:
            info.seal = "FORGED";
            break;
          }
          if (seal == SealStatus::kForged)
            info.problem = "its MAC does not verify (forged?)";
          else if (seal != SealStatus::kOtherFormat && !container)
            info.problem = why;
          else if (container)
            info.problem = misfiledProblem(info.key, *container);
          if (container) {
            info.kernels = static_cast<int64_t>(container->kernels.size());
            info.program = describeProgram(container->program);
          }
          std::string use;
          if (db->Get(rocksdb::ReadOptions(), kUse + info.key, &use).ok())
            info.last_use_unix_ms = decodeTime(use);
          entries.push_back(std::move(info));
        }
        return it->status().ok() ? "" : it->status().ToString();
      },
      /*warn=*/false);
  if (database_problem) *database_problem = problem;
  return entries;
}

PersistentStoreStats PersistentStore::stats() {
  PersistentStoreStats s;
  for (const StoredEntryInfo& e : list(&s.database_problem)) {
    ++s.entries;
    s.bytes += e.bytes;
  }
  s.hits = impl_->hits.load();
  s.misses = impl_->misses.load();
  s.corrupt = impl_->corrupt.load();
  s.evicted = impl_->evicted.load();
  s.write_failures = impl_->write_failures.load();
  s.foreign = impl_->foreign.load();
  s.forged = impl_->forged.load();
  s.lookup_opens = impl_->lookup_opens.load();
  return s;
}

int64_t PersistentStore::writeFailures() const { return impl_->write_failures.load(); }

int64_t PersistentStore::prune(int64_t max_bytes) {
  if (off()) return 0;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->forgetReader();
  int64_t removed = 0;
  impl_->write(
      [&](rocksdb::DB& db, rocksdb::WriteBatch& batch) {
        removed = impl_->evict(db, batch, max_bytes, {});
      },
      {});
  return removed;
}

ClearReport PersistentStore::clear() {
  ClearReport report;
  if (off()) {
    report.problem = impl_->problem;
    return report;
  }
  report.profiles = removeProfiles(directory_); // they name entries that are about to go
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->forgetReader();
  FileLock store_lock(impl_->lock_path, LOCK_EX);
  if (!store_lock.held()) {
    report.problem = "cannot lock " + impl_->lock_path + " (" + std::strerror(errno) + ")";
    return report;
  }
  // DestroyDB removes RocksDB's own files only (and the directory once it is empty).
  const rocksdb::Status status = rocksdb::DestroyDB(impl_->db_path, baseOptions());
  if (!status.ok()) {
    report.problem =
        "cannot remove the database " + impl_->db_path + " (" + status.ToString() + ")";
    return report;
  }
  report.lock_files = removeUnheldLockFiles(impl_->locks_dir);
  if (impl_->key_source == directory_ + "/" + kUserKeyFileName) report.kept_key = impl_->key_source;
  report.cleared = true;
  return report;
}

std::string PersistentStore::repair() {
  if (off()) return impl_->problem;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->forgetReader();
  FileLock store_lock(impl_->lock_path, LOCK_EX);
  if (!store_lock.held())
    return "cannot lock " + impl_->lock_path + " (" + std::strerror(errno) + ")";
  if (std::string special = specialFileProblem(impl_->db_path); !special.empty())
    return special + " (remove it, or `torchneuron-cache clear` to start over)";
  const rocksdb::Status status = rocksdb::RepairDB(impl_->db_path, baseOptions());
  return status.ok() ? "" : status.ToString();
}

ExportReport PersistentStore::exportTo(const std::string& file) {
  ExportReport report;
  if (off()) {
    report.problem = impl_->problem;
    return report;
  }
  if (resolvesInside(file, directory_)) {
    report.problem = file + " lies inside the cache directory " + directory_ +
                     " (an export is written elsewhere)";
    return report;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  ArchiveWriter out(file);
  const std::string problem = impl_->read(
      [&](rocksdb::DB* db) -> std::string {
        if (db == nullptr) return impl_->open_problem;
        std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
        for (it->Seek(kEntry); it->Valid() && it->key().starts_with(kEntry); it->Next()) {
          const std::vector<char> bytes(it->value().data(),
                                        it->value().data() + it->value().size());
          if (checkSeal(bytes, *impl_->authenticator) != SealStatus::kAuthentic) {
            ++report.skipped;
            continue;
          }
          out.add(it->key().ToString().substr(kEntry.size()), bytes.data(), bytes.size());
          ++report.exported;
        }
        return it->status().ok() ? "" : it->status().ToString();
      },
      /*warn=*/false);
  if (!problem.empty())
    report.problem = "cannot read the cache (" + problem + ")";
  else if (!out.finish())
    report.problem = out.problem();
  return report;
}

ImportReport PersistentStore::importFrom(const std::string& file, bool trust) {
  ImportReport report;
  if (off()) {
    report.problem = impl_->problem;
    return report;
  }
  ArchiveEntries entries;
  report.problem = readArchive(file, &entries);
  if (!report.problem.empty()) return report;
  ArchiveEntries accepted;
  for (auto& [key, value] : entries) {
    const SealStatus seal = checkSeal(value, *impl_->authenticator);
    const bool readable = seal != SealStatus::kOtherFormat && seal != SealStatus::kDamaged;
    std::optional<ExecutableContainer> container =
        readable ? parseContainer(value, nullptr) : std::nullopt;
    if (!container || !misfiledProblem(key, *container).empty()) {
      ++report.damaged; // unreadable, or filed under another entry's key
      continue;
    }
    switch (seal) {
    case SealStatus::kAuthentic:
      break;
    case SealStatus::kOtherFormat:
    case SealStatus::kDamaged:
      continue; // counted above
    case SealStatus::kOtherKey:
    case SealStatus::kForged:
      if (!trust) {
        ++report.untrusted;
        continue;
      }
      sealContainer(value, *impl_->authenticator); // intact: checkSeal said so
      ++report.resigned;
      break;
    }
    accepted.emplace_back(std::move(key), std::move(value));
  }
  std::vector<std::string> keys;
  for (const auto& item : accepted)
    keys.push_back(item.first);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const bool ok = accepted.empty() ||
                  impl_->write(
                      [&](rocksdb::DB&, rocksdb::WriteBatch& batch) {
                        for (const auto& [key, value] : accepted) {
                          batch.Put(kEntry + key, rocksdb::Slice(value.data(), value.size()));
                          batch.Put(kUse + key, encodeNumber(nowMs()));
                          batch.Put(kSize + key, encodeNumber(static_cast<int64_t>(value.size())));
                        }
                      },
                      keys);
  if (!ok)
    report.problem = "cannot write the cache at " + directory_ + " (see the warning)";
  else
    report.imported = static_cast<int64_t>(accepted.size());
  return report;
}

} // namespace torchneuron

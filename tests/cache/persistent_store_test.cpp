// The persistent store under faults: concurrent writers, a writer killed mid-write, a damaged
// database, an unusable directory, remembered failures across engine versions, export/import,
// and the kernel cache failing open over a corrupt entry.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/entry_authenticator.h"
#include "cache/entry_verification.h"
#include "cache/executable_container.h"
#include "cache/kernel_cache.h"
#include "cache/persistent_store.h"
#include "common/test_directory.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"

namespace torchneuron {
namespace {

// Runs the writer helper as a separate process (fork alone would copy RocksDB's thread pool
// state into the child). With `progress`, the child's standard output (a line per write) is the
// read end returned there; otherwise it is discarded.
pid_t startWriter(const std::string& dir, const std::string& key, int rounds, size_t bytes,
                  char fill, int* progress = nullptr) {
  int pipe_ends[2] = {-1, -1};
  if (progress != nullptr && pipe(pipe_ends) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = progress != nullptr ? pipe_ends[1] : open("/dev/null", O_WRONLY);
    dup2(out, STDOUT_FILENO);
    const std::string rounds_text = std::to_string(rounds), bytes_text = std::to_string(bytes);
    const std::string fill_text(1, fill);
    execl(NEURON_STORE_WRITER, NEURON_STORE_WRITER, dir.c_str(), key.c_str(), rounds_text.c_str(),
          bytes_text.c_str(), fill_text.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (progress != nullptr) {
    close(pipe_ends[1]);
    *progress = pipe_ends[0];
  }
  return pid;
}

// Reads `lines` lines from `fd`; false at end of file first.
bool readLines(int fd, int lines) {
  char c;
  while (lines > 0) {
    const ssize_t got = read(fd, &c, 1);
    if (got == 1 && c == '\n') --lines;
    if (got == 0 || (got < 0 && errno != EINTR)) return false;
  }
  return true;
}

std::string freshDirectory() { return testing::makeTestDirectory("neuron-store-test-"); }

std::vector<char> containerBytes(char fill, size_t size = 2048) {
  ExecutableContainer c;
  c.engine_version = kEngineVersion;
  c.key_material = std::string(1, fill);
  c.kernels = {{"k", "slots-v1"}};
  c.object.assign(size, fill);
  return c.serialize();
}

std::vector<char> objectOf(const std::vector<char>& container) {
  std::optional<ExecutableContainer> parsed = parseContainer(container, nullptr);
  return parsed ? parsed->object : std::vector<char>();
}

// Warnings are collected instead of printed.
std::vector<std::string>& warnings() {
  static std::vector<std::string> seen;
  return seen;
}

class PersistentStoreTest : public ::testing::Test {
protected:
  void SetUp() override {
    setCacheWarningHandler([](const std::string& text) { warnings().push_back(text); });
  }
};

TEST_F(PersistentStoreTest, PutGetAndAbsentKeys) {
  PersistentStore store(freshDirectory(), 0);
  EXPECT_FALSE(store.get("missing"));
  ASSERT_TRUE(store.put("a", containerBytes('a')));
  ASSERT_TRUE(store.get("a"));
  EXPECT_EQ(objectOf(*store.get("a")), objectOf(containerBytes('a'))); // stored sealed
  EXPECT_EQ(store.stats().entries, 1);
}

TEST_F(PersistentStoreTest, EightProcessesWritingOneKeyAtOnce) {
  const std::string dir = freshDirectory();
  std::vector<pid_t> writers;
  for (int i = 0; i < 8; ++i)
    writers.push_back(startWriter(dir, "same", 5, 2048, 's'));
  for (pid_t pid : writers) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed (a LOCK error?)";
  }
  PersistentStore store(dir, 0);
  const auto value = store.get("same");
  ASSERT_TRUE(value);
  const auto parsed = parseContainer(*value, nullptr);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->object, std::vector<char>(2048, 's'));
}

TEST_F(PersistentStoreTest, WriterKilledMidWriteLeavesOldValueOrNoneAndNoStaleLock) {
  const std::string dir = freshDirectory();
  {
    PersistentStore store(dir, 0);
    ASSERT_TRUE(store.put("k", containerBytes('o')));
  }
  int progress = -1;
  const pid_t writer = startWriter(dir, "k", 0, 1 << 20, 'w', &progress); // writes until killed
  ASSERT_GT(writer, 0);
  // Killed after its third write, while it goes on writing, whatever the machine's speed.
  const bool wrote = readLines(progress, 3);
  kill(writer, SIGKILL);
  waitpid(writer, nullptr, 0);
  close(progress);
  ASSERT_TRUE(wrote) << "the writer stopped before its third write";
  PersistentStore store(dir, 0);
  const auto value = store.get("k");
  ASSERT_TRUE(value); // the old value or a newer complete one
  EXPECT_TRUE(parseContainer(*value, nullptr)) << "a torn value survived the kill";
  EXPECT_TRUE(store.put("k", containerBytes('n'))); // no stale lock
  EXPECT_EQ(objectOf(*store.get("k")), objectOf(containerBytes('n')));
}

// A compile lock's file is removed by its holder; a process that waited on the removed file takes
// the new one, and two holders never coexist.
TEST_F(PersistentStoreTest, KeyLocksRemoveTheirFilesAndStayExclusive) {
  const std::string dir = freshDirectory();
  PersistentStore store(dir, 0);
  const std::string lock_file = dir + "/locks/k";
  auto first = store.lockKey("k", std::chrono::milliseconds(1000));
  ASSERT_TRUE(first);
  EXPECT_EQ(access(lock_file.c_str(), F_OK), 0);
  // A waiter opens the same file now and blocks on it until `first` lets go.
  std::atomic<bool> second_held{false};
  std::unique_ptr<PersistentStore::KeyLock> second;
  std::thread waiter([&] {
    second = store.lockKey("k", std::chrono::milliseconds(20000));
    second_held.store(second != nullptr);
  });
  std::this_thread::sleep_for(
      std::chrono::milliseconds(50)); // let it open the file: any order is correct
  first.reset();
  waiter.join();
  ASSERT_TRUE(second_held.load());
  EXPECT_EQ(access(lock_file.c_str(), F_OK), 0) << "the holder's lock file is linked";
  warnings().clear();
  EXPECT_FALSE(store.lockKey("k", std::chrono::milliseconds(100))) << "two holders at once";
  second.reset();
  EXPECT_NE(access(lock_file.c_str(), F_OK), 0) << "a released lock left its file";
  EXPECT_TRUE(store.lockKey("k", std::chrono::milliseconds(100)));
}

TEST_F(PersistentStoreTest, DamagedDatabaseIsBypassedWithAWarning) {
  const std::string dir = freshDirectory();
  {
    PersistentStore store(dir, 0);
    ASSERT_TRUE(store.put("k", containerBytes('k')));
  }
  std::ofstream(dir + "/db/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
  warnings().clear();
  PersistentStore store(dir, 0);
  EXPECT_FALSE(store.get("k")); // a miss, not a crash
  EXPECT_FALSE(store.put("k", containerBytes('k')));
  EXPECT_FALSE(warnings().empty());
}

TEST_F(PersistentStoreTest, UnusableDirectoryRunsWithoutTheCache) {
  // Tests run as root, for whom mode bits do not make a directory read-only: a directory path
  // that runs through a regular file is unusable for anyone.
  const std::string file = freshDirectory() + "/not-a-directory";
  std::ofstream(file) << "x";
  warnings().clear();
  PersistentStore store(file + "/cache", 0);
  EXPECT_FALSE(store.put("k", containerBytes('k')));
  EXPECT_FALSE(store.get("k"));
  EXPECT_NE(store.problem().find("cannot create " + file + "/cache (Not a directory)"),
            std::string::npos)
      << store.problem();
}

TEST_F(PersistentStoreTest, FailuresAreRememberedPerEngineVersion) {
  PersistentStore store(freshDirectory(), 0);
  store.recordFailure("bad", "LLVM ran out of registers", "torchneuron-engine-0");
  EXPECT_FALSE(store.failure("bad")); // another engine version: retried
  EXPECT_EQ(store.failure("bad", "torchneuron-engine-0").value_or(""), "LLVM ran out of registers");
  store.recordFailure("bad", "still bad");
  EXPECT_EQ(store.failure("bad").value_or(""), "still bad");
  ASSERT_TRUE(store.put("bad", containerBytes('b'))); // a later success clears it
  EXPECT_FALSE(store.failure("bad"));
}

TEST_F(PersistentStoreTest, SizeCapEvictsLeastRecentlyUsed) {
  PersistentStore store(freshDirectory(), 5000); // two entries fit, three do not
  ASSERT_TRUE(store.put("first", containerBytes('1')));
  usleep(2000);
  ASSERT_TRUE(store.put("second", containerBytes('2')));
  usleep(2000);
  ASSERT_TRUE(store.put("third", containerBytes('3'))); // over the cap: "first" goes
  EXPECT_FALSE(store.get("first"));
  EXPECT_TRUE(store.get("third"));
  EXPECT_GE(store.stats().evicted, 1);
  EXPECT_EQ(store.prune(0), 2);
  EXPECT_EQ(store.stats().entries, 0);
}

// A key stored again counts once, at its new size: rewriting one of two entries that fit, or
// queuing it twice in one batch, evicts nothing.
TEST_F(PersistentStoreTest, StoringAKeyAgainCountsItOnce) {
  PersistentStore store(freshDirectory(), 5000); // two entries fit, three do not
  ASSERT_TRUE(store.put("first", containerBytes('1')));
  usleep(2000);
  ASSERT_TRUE(store.put("second", containerBytes('2')));
  ASSERT_TRUE(store.put("second", containerBytes('3')));
  store.putLater("second", containerBytes('4'), nullptr);
  store.putLater("second", containerBytes('5'), nullptr);
  store.flushWrites();
  EXPECT_EQ(store.stats().evicted, 0);
  EXPECT_TRUE(store.get("first"));
  EXPECT_EQ(objectOf(store.get("second").value_or(std::vector<char>())),
            objectOf(containerBytes('5')));
}

// A store written before entries had size records (2026-12-06): eviction reads those entries'
// sizes once, evicts by them, and records them.
TEST_F(PersistentStoreTest, EvictionCountsEntriesStoredWithoutASizeRecord) {
  const std::string directory = freshDirectory();
  {
    PersistentStore store(directory, 0);
    ASSERT_TRUE(store.put("first", containerBytes('1')));
    usleep(2000);
    ASSERT_TRUE(store.put("second", containerBytes('2')));
  }
  auto sizeRecords = [&](std::function<void(rocksdb::DB&)> fn) {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), directory + "/db", &db).ok());
    fn(*db);
    delete db;
  };
  sizeRecords([](rocksdb::DB& db) {
    for (const char* key : {"s/first", "s/second"})
      ASSERT_TRUE(db.Delete(rocksdb::WriteOptions(), key).ok());
  });
  usleep(2000);
  PersistentStore capped(directory, 5000); // two entries fit, three do not
  ASSERT_TRUE(capped.put("third", containerBytes('3')));
  EXPECT_FALSE(capped.get("first"));
  EXPECT_TRUE(capped.get("second"));
  EXPECT_TRUE(capped.get("third"));
  EXPECT_EQ(capped.stats().evicted, 1);
  sizeRecords([](rocksdb::DB& db) {
    std::string size;
    EXPECT_TRUE(db.Get(rocksdb::ReadOptions(), "s/second", &size).ok()); // recorded now
    EXPECT_FALSE(db.Get(rocksdb::ReadOptions(), "s/first", &size).ok()); // evicted with it
  });
}

// Store keys as the kernel cache makes them (32 hex digits): the only keys an export carries.
// The key the container of `c` belongs under (its compile inputs hashed): the key the cache
// files it under, which import and list check.
std::string storeKey(char c) { return ownStoreKey(*parseContainer(containerBytes(c), nullptr)); }

TEST_F(PersistentStoreTest, ExportThenImportUnderOneKeyGivesByteIdenticalEntries) {
  // Two caches of one cluster share a key file.
  const std::string key_file = freshDirectory() + "/cluster.key";
  ASSERT_EQ(writeNewKeyFile(key_file), "");
  setenv("NEURON_CACHE_KEY_FILE", key_file.c_str(), 1);
  PersistentStore source(freshDirectory(), 0);
  for (char c : {'a', 'b', 'c'})
    ASSERT_TRUE(source.put(storeKey(c), containerBytes(c)));
  const std::string file = freshDirectory() + "/cache.export";
  const ExportReport exported = source.exportTo(file);
  ASSERT_EQ(exported.problem, "");
  ASSERT_EQ(exported.exported, 3);
  PersistentStore target(freshDirectory(), 0);
  ImportReport imported = target.importFrom(file, false);
  ASSERT_EQ(imported.problem, "");
  EXPECT_EQ(imported.imported, 3);
  EXPECT_EQ(imported.damaged + imported.untrusted + imported.resigned, 0);
  for (char c : {'a', 'b', 'c'})
    EXPECT_EQ(*target.get(storeKey(c)), *source.get(storeKey(c)));
  // A damaged export: the entry with a flipped byte is rejected, the others import.
  std::fstream damaged(file, std::ios::in | std::ios::out | std::ios::binary);
  damaged.seekp(200);
  damaged.put('\x01');
  damaged.close();
  PersistentStore third(freshDirectory(), 0);
  imported = third.importFrom(file, false);
  EXPECT_EQ(imported.imported, 2);
  EXPECT_EQ(imported.damaged, 1);
  unsetenv("NEURON_CACHE_KEY_FILE");
}

// Two instances on one directory behave as two processes: each has its own snapshot, and their
// file locks conflict. A miss is answered without opening the database until another one writes.
TEST_F(PersistentStoreTest, AMissOpensTheDatabaseOnlyAfterAnotherProcessWrote) {
  const std::string directory = freshDirectory();
  PersistentStore mine(directory, 0), other(directory, 0);
  ASSERT_TRUE(mine.put(storeKey('a'), containerBytes('a')));
  EXPECT_TRUE(mine.get(storeKey('a'))); // the first lookup reads everything once
  const int64_t opens = mine.stats().lookup_opens;
  EXPECT_FALSE(mine.get(storeKey('b')));
  EXPECT_FALSE(mine.failure(storeKey('b')));
  mine.putLater(storeKey('c'), containerBytes('c'), nullptr);
  mine.flushWrites();
  EXPECT_FALSE(mine.get(storeKey('b'))); // its own background write kept the snapshot current
  EXPECT_EQ(mine.stats().lookup_opens, opens);
  EXPECT_TRUE(mine.get(storeKey('c'))); // what it wrote is read back from the database
  ASSERT_TRUE(other.put(storeKey('b'), containerBytes('b')));
  const int64_t before_other = mine.stats().lookup_opens;
  EXPECT_TRUE(mine.get(storeKey('b'))); // another writer changed the generation: read, found
  EXPECT_EQ(mine.stats().lookup_opens, before_other + 1);
  other.recordFailure(storeKey('d'), "rejected by LLVM");
  EXPECT_EQ(mine.failure(storeKey('d')).value_or(""), "rejected by LLVM");
}

// A warm process opens the database once for all its lookups, whatever it holds (its own writes
// open the reader again at the write); the reader it keeps open is reopened at a lookup once
// another process has written (and compacted: eight flushes make
// more level-0 tables than RocksDB keeps before it merges them), and sees every entry.
TEST_F(PersistentStoreTest, AWarmProcessOpensOnceAndReopensOnlyAfterAnotherProcessWrote) {
  const std::string directory = freshDirectory();
  {
    PersistentStore writer(directory, 0);
    for (char c : {'a', 'b', 'c'})
      ASSERT_TRUE(writer.put(storeKey(c), containerBytes(c)));
  }
  PersistentStore mine(directory, 0), other(directory, 0);
  for (char c : {'a', 'b', 'c', 'a'})
    EXPECT_EQ(objectOf(mine.get(storeKey(c)).value_or(std::vector<char>())),
              objectOf(containerBytes(c)));
  EXPECT_FALSE(mine.get(storeKey('z')));
  EXPECT_EQ(mine.stats().lookup_opens, 1);
  ASSERT_TRUE(mine.put(storeKey('m'), containerBytes('m')));
  EXPECT_TRUE(mine.get(storeKey('m'))); // its own write opened the reader again, not a lookup
  EXPECT_TRUE(mine.get(storeKey('b')));
  EXPECT_EQ(mine.stats().lookup_opens, 1);
  for (char c : {'d', 'e', 'f', 'g', 'h', 'i', 'j', 'k'})
    ASSERT_TRUE(other.put(storeKey(c), containerBytes(c, 4096)));
  for (char c : {'k', 'a', 'd', 'c'})
    EXPECT_TRUE(mine.get(storeKey(c))) << c;
  EXPECT_FALSE(mine.get(storeKey('z')));
  EXPECT_EQ(mine.stats().lookup_opens, 2);
}

TEST_F(PersistentStoreTest, ForeignEntriesImportOnlyWhenTrustedAndAreThenResigned) {
  PersistentStore source(freshDirectory(), 0); // its own per-user key
  for (char c : {'a', 'b'})
    ASSERT_TRUE(source.put(storeKey(c), containerBytes(c)));
  const std::string file = freshDirectory() + "/foreign.export";
  ASSERT_EQ(source.exportTo(file).exported, 2);
  PersistentStore target(freshDirectory(), 0);
  ASSERT_NE(target.keyId(), source.keyId());
  ImportReport refused = target.importFrom(file, false);
  EXPECT_EQ(refused.imported, 0);
  EXPECT_EQ(refused.untrusted, 2);
  EXPECT_FALSE(target.get(storeKey('a')));
  ImportReport trusted = target.importFrom(file, true);
  EXPECT_EQ(trusted.imported, 2);
  EXPECT_EQ(trusted.resigned, 2);
  const auto entry = target.get(storeKey('a'));
  ASSERT_TRUE(entry);
  EXPECT_EQ(keyIdHex(*sealKeyId(*entry)), target.keyId());
}

// Writes an archive by hand: the header, then one record with the given key and claimed size.
std::string archiveWith(const std::string& key, uint64_t claimed_size, size_t actual_size) {
  const std::string file = freshDirectory() + "/crafted.export";
  std::ofstream out(file, std::ios::binary);
  out << "NEFF-ARCHIVE 2\n";
  const uint64_t key_size = key.size();
  out.write(reinterpret_cast<const char*>(&key_size), 8).write(key.data(), key.size());
  out.write(reinterpret_cast<const char*>(&claimed_size), 8);
  out << std::string(actual_size, 'v');
  return file;
}

TEST_F(PersistentStoreTest, ImportRejectsBadKeysAndImpossibleSizesWithoutAllocatingThem) {
  PersistentStore target(freshDirectory(), 0);
  const ImportReport huge =
      target.importFrom(archiveWith(storeKey('a'), uint64_t{1} << 31, 64), false);
  EXPECT_NE(huge.problem.find("claims 2147483648 bytes, but 64 remain"), std::string::npos)
      << huge.problem;
  const ImportReport escape =
      target.importFrom(archiveWith("\x1b[2J../../etc/passwd-0123456789a", 8, 8), false);
  EXPECT_NE(escape.problem.find("not 32 lowercase hex digits"), std::string::npos)
      << escape.problem;
  const ImportReport long_key = target.importFrom(archiveWith(std::string(5000, 'a'), 8, 8), false);
  EXPECT_NE(long_key.problem.find("a key of 5000 bytes"), std::string::npos) << long_key.problem;
  EXPECT_NE(target.importFrom("/nonexistent", false).problem.find("cannot read /nonexistent"),
            std::string::npos);
  EXPECT_EQ(target.stats().entries, 0);
}

TEST_F(PersistentStoreTest, ExportIntoTheCacheDirectoryIsRefused) {
  const std::string dir = freshDirectory();
  PersistentStore store(dir, 0);
  ASSERT_TRUE(store.put(storeKey('a'), containerBytes('a')));
  for (const std::string& inside : {dir + "/db/CURRENT", dir + "/export", dir + "/db/../x", dir})
    EXPECT_NE(store.exportTo(inside).problem.find("inside the cache directory"), std::string::npos)
        << inside;
  EXPECT_TRUE(store.get(storeKey('a'))); // the database is intact
}

TEST_F(PersistentStoreTest, KernelCacheFailsOpenOverACorruptEntry) {
  // The process's store comes from the environment at its first use.
  const std::string dir = freshDirectory();
  setenv("NEURON_CACHE_DIR", dir.c_str(), 1);
  unsetenv("NEURON_CACHE");
  PersistentStore* store = PersistentStore::fromEnvironment();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->directory(), dir);
  fusion::ElementwiseSignature s;
  s.op = fusion::findElementwiseOp("hypot");
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.inner.assign(3, fusion::InnerStride::kContiguous);
  const std::string mlir = fusion::buildElementwiseKernel(s);
  // A damaged entry sits where this kernel's entry belongs: a valid container, one bit flipped.
  std::vector<char> damaged = containerBytes('d');
  damaged[damaged.size() / 2] ^= 0x10;
  ASSERT_TRUE(store->putVerbatim(persistentKeyFor(s.key(), mlir), damaged));
  resetKernelCacheCounters();
  warnings().clear();
  const KernelHandle kernel = kernelFor(s.key(), [&] { return mlir; });
  EXPECT_NE(kernel->function, nullptr); // compiled instead, correct
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.persistent_rejected, 1);
  EXPECT_EQ(stats.compiles, 1);
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find("failed verification"), std::string::npos) << warnings()[0];
  // The entry was overwritten with the good one (by the background writer: durable once flushed).
  flushPersistentWrites();
  const auto stored = store->get(persistentKeyFor(s.key(), mlir));
  ASSERT_TRUE(stored);
  EXPECT_TRUE(parseContainer(*stored, nullptr));
}

} // namespace
} // namespace torchneuron

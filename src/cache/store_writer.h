#pragma once
// The persistent store's background writer: a compile hands its entry over and goes on, and
// one thread writes what has accumulated as one batch (one exclusive lock, one synced write,
// one flush: about 70 ms here, whether it holds one entry or thirty). So no dispatching thread
// waits for the disk, and a cold pass writes a few batches instead of one synced write per
// kernel.
//
// Durability: everything enqueued is written by flush() (torchneuron.synchronize() calls it)
// and at process exit (an atexit handler flushes and stops the thread). A crash loses at most
// the batches not yet written, never corrupts: each batch is one atomic RocksDB write. What an
// item holds (`hold`: the key's cross-process compile lock) is released only after its batch
// is durable, so a process waiting for that key finds the entry once it gets the lock.
//
// Fork: the thread does not exist in a child, nor does the store (persistent_store.h); a child
// forgets the queue without releasing what its items hold (those belong to the parent).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace torchneuron {

struct PendingWrite {
  std::string key;
  std::vector<char> value;    // a sealed container; empty for `touch_only`
  bool touch_only = false;    // refreshes the entry's last-use time only
  std::shared_ptr<void> hold; // released once the batch holding this write is durable
};

struct StoreWriterStats {
  int64_t batches = 0;
  int64_t writes = 0;
  int64_t pending = 0; // enqueued, not yet written
};

class StoreWriter {
public:
  // `commit` writes one batch durably, or counts and warns its failure; it runs on the writer's
  // thread and must not throw. A batch starts with the first write enqueued after the previous
  // one and closes `coalesce` later (at once when a flush or stop is waiting, or at kMaxBatch
  // writes): a cold pass compiling a kernel every 10-50 ms writes a few batches, not one per
  // kernel, and a waiting process gets a key's lock at most that much later.
  using Commit = std::function<void(std::vector<PendingWrite>&)>;
  static constexpr std::chrono::milliseconds kDefaultCoalesce{100};
  static constexpr size_t kMaxBatch = 256;
  explicit StoreWriter(Commit commit, std::chrono::milliseconds coalesce = kDefaultCoalesce);
  ~StoreWriter(); // flushes and stops the thread
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  void enqueue(PendingWrite write); // starts the thread at the first call
  // Returns once every write enqueued before the call has been committed.
  void flush();
  StoreWriterStats stats() const;
  // Writes what is queued and stops the thread; a write enqueued later waits for the next
  // flush(), which then commits on its caller's thread.
  void stop();

private:
  void run();
  // Commits what is queued as one batch (`lock` holds mutex_; released during the commit).
  void commitQueue(std::unique_lock<std::mutex>& lock);
  void forgetInChild();
  friend void registerWriterForFork(StoreWriter*);

  Commit commit_;
  const std::chrono::milliseconds coalesce_;
  // Locking: `mutex_` guards every field below; held across fork() (ForkRank::kStoreWriter),
  // never while a batch is committed.
  mutable std::mutex mutex_;
  std::condition_variable work_, committed_;
  std::vector<PendingWrite> queue_;
  uint64_t enqueued_ = 0, done_ = 0; // sequence numbers: writes enqueued, writes committed
  uint64_t flush_target_ = 0;        // the latest write a flush() waits for
  bool stopping_ = false;
  std::thread thread_;
  StoreWriterStats stats_;
};

} // namespace torchneuron

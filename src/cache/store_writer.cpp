#include "cache/store_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>

#include "cache/cache_warnings.h"
#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

// The live writers. Locking: `writers_mutex` guards `writers`; it may be held while a writer's
// own mutex is taken (ForkRank::kStoreWriter covers both), never the reverse.
std::mutex writers_mutex;
std::vector<StoreWriter*>* writers = nullptr;

} // namespace

void registerWriterForFork(StoreWriter* writer) {
  static std::once_flag registered;
  std::call_once(registered, [] {
    registerForkHandlers(ForkRank::kStoreWriter, {[] {
                                                    writers_mutex.lock();
                                                    if (writers)
                                                      for (StoreWriter* w : *writers)
                                                        w->mutex_.lock();
                                                  },
                                                  [] {
                                                    if (writers)
                                                      for (StoreWriter* w : *writers)
                                                        w->mutex_.unlock();
                                                    writers_mutex.unlock();
                                                  },
                                                  [] {
                                                    if (writers)
                                                      for (StoreWriter* w : *writers)
                                                        w->forgetInChild();
                                                    writers_mutex.unlock();
                                                  }});
    // At exit every write is made durable and the threads stop before static destructors run
    // (registered after the libraries' statics were made, so it runs before they go).
    std::atexit([] {
      std::vector<StoreWriter*> live;
      {
        std::lock_guard<std::mutex> lock(writers_mutex);
        if (writers) live = *writers;
      }
      for (StoreWriter* w : live)
        w->stop();
      // A batch written only now (the last compiles' entries) warns on the writer's thread,
      // which queues its warnings for a Python thread; there is none any more, so they go to
      // stderr here or nobody ever hears of a failed write.
      for (const std::string& text : takeQueuedCacheWarnings())
        std::fprintf(stderr, "torchneuron: %s\n", text.c_str());
    });
  });
  std::lock_guard<std::mutex> lock(writers_mutex);
  if (writers == nullptr) writers = new std::vector<StoreWriter*>();
  writers->push_back(writer);
}

StoreWriter::StoreWriter(Commit commit, std::chrono::milliseconds coalesce)
    : commit_(std::move(commit)), coalesce_(coalesce) {
  registerWriterForFork(this);
}

StoreWriter::~StoreWriter() {
  stop();
  std::lock_guard<std::mutex> lock(writers_mutex);
  if (writers) writers->erase(std::remove(writers->begin(), writers->end(), this), writers->end());
}

void StoreWriter::enqueue(PendingWrite write) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(write));
    ++enqueued_;
    ++stats_.pending;
    if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run(); });
  }
  work_.notify_one();
}

void StoreWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return; // stopping, and everything is written
    // Lets more writes join the batch (each commit costs a synced write and some CPU, whatever
    // its size), unless a flush or stop wants them now or the batch is full.
    work_.wait_for(lock, coalesce_, [&] {
      return stopping_ || flush_target_ > done_ || queue_.size() >= kMaxBatch;
    });
    commitQueue(lock);
  }
}

void StoreWriter::commitQueue(std::unique_lock<std::mutex>& lock) {
  std::vector<PendingWrite> batch;
  batch.swap(queue_);
  lock.unlock();
  commit_(batch);
  const size_t written = batch.size();
  batch.clear(); // releases what the writes held (their keys' compile locks), now durable
  lock.lock();
  done_ += written;
  stats_.pending -= static_cast<int64_t>(written);
  stats_.writes += static_cast<int64_t>(written);
  ++stats_.batches;
  committed_.notify_all();
}

void StoreWriter::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = enqueued_;
  if (done_ >= target) return;
  if (!thread_.joinable()) { // stopped (at exit): the caller commits what is left itself
    commitQueue(lock);
    return;
  }
  flush_target_ = std::max(flush_target_, target);
  work_.notify_one(); // ends the writer's wait for more writes
  committed_.wait(lock, [&] { return done_ >= target; });
}

void StoreWriter::stop() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    thread.swap(thread_);
  }
  work_.notify_one();
  if (thread.joinable()) thread.join(); // it writes what is queued before it returns
  flush();                              // anything enqueued after it stopped
}

StoreWriterStats StoreWriter::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// In a forked child (mutex_ held by the forking thread): the thread and its waiters stayed in
// the parent, and what the queued writes hold (flock descriptors, already closed here by the
// store's own child handler) is the parent's to release: the queue is leaked, not destroyed.
void StoreWriter::forgetInChild() {
  new std::vector<PendingWrite>(std::move(queue_)); // leaves queue_ empty
  new (&thread_) std::thread(); // the old object names a thread that does not exist here
  new (&work_) std::condition_variable();
  new (&committed_) std::condition_variable();
  done_ = enqueued_;
  stats_.pending = 0;
  stopping_ = true; // the store is off in a child: nothing is enqueued here
  mutex_.unlock();
}

} // namespace torchneuron

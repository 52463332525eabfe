// The persistent store's background writer (src/cache/store_writer.h): writes that arrive while
// a batch is being written go together in the next one; what a write holds is released only
// after its batch is committed; flush() and stop() leave nothing unwritten; a forked child
// forgets the queue without releasing the parent's holds.

#include "cache/store_writer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torchneuron {
namespace {

using Released = std::shared_ptr<std::atomic<bool>>; // set when a write's hold is let go

// A commit that records each batch's keys and can be held at its start until released.
class RecordingCommit {
public:
  void operator()(std::vector<PendingWrite>& batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++started_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !blocked_; });
    std::vector<std::string> keys;
    for (PendingWrite& w : batch) {
      keys.push_back(w.key);
      // Nothing this batch holds has been released while it is being committed.
      if (w.hold) {
        EXPECT_FALSE((*std::static_pointer_cast<Released>(w.hold))->load()) << w.key;
      }
    }
    batches_.push_back(keys);
  }
  void block() {
    std::lock_guard<std::mutex> lock(mutex_);
    blocked_ = true;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    blocked_ = false;
    changed_.notify_all();
  }
  void waitForStarts(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return started_ >= n; });
  }
  std::vector<std::vector<std::string>> batches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool blocked_ = false;
  int started_ = 0;
  std::vector<std::vector<std::string>> batches_;
};

// A write whose hold sets `*released` when the writer lets it go.
PendingWrite writeOf(const std::string& key, Released released) {
  PendingWrite w;
  w.key = key;
  w.value = {'x'};
  w.hold = std::shared_ptr<Released>(new Released(released), [](Released* r) {
    (*r)->store(true);
    delete r;
  });
  return w;
}

TEST(StoreWriter, WritesArrivingDuringACommitGoTogetherInTheNextBatch) {
  RecordingCommit recording;
  StoreWriter writer([&](std::vector<PendingWrite>& batch) { recording(batch); });
  recording.block();
  auto released = std::make_shared<std::atomic<bool>>(false);
  writer.enqueue(writeOf("first", released));
  recording.waitForStarts(1); // the first batch is being written, alone
  std::vector<std::shared_ptr<std::atomic<bool>>> later;
  for (int i = 0; i < 5; ++i) {
    later.push_back(std::make_shared<std::atomic<bool>>(false));
    writer.enqueue(writeOf("later" + std::to_string(i), later.back()));
  }
  EXPECT_FALSE(released->load()); // held until its batch is committed
  recording.release();
  writer.flush();
  EXPECT_TRUE(released->load());
  for (const auto& flag : later)
    EXPECT_TRUE(flag->load());
  const auto batches = recording.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], std::vector<std::string>({"first"}));
  EXPECT_EQ(batches[1].size(), 5u);
  const StoreWriterStats stats = writer.stats();
  EXPECT_EQ(stats.batches, 2);
  EXPECT_EQ(stats.writes, 6);
  EXPECT_EQ(stats.pending, 0);
}

TEST(StoreWriter, WritesWithinTheCoalescingWindowGoInOneBatchAndFlushClosesIt) {
  RecordingCommit recording;
  // A window no test run outlasts: only flush() can close the batch.
  StoreWriter writer([&](std::vector<PendingWrite>& batch) { recording(batch); },
                     std::chrono::hours(1));
  for (int i = 0; i < 5; ++i)
    writer.enqueue(writeOf("k" + std::to_string(i), std::make_shared<std::atomic<bool>>()));
  EXPECT_EQ(writer.stats().batches, 0);
  writer.flush();
  ASSERT_EQ(recording.batches().size(), 1u);
  EXPECT_EQ(recording.batches()[0].size(), 5u);
}

TEST(StoreWriter, StopWritesWhatIsQueuedAndALaterWriteWaitsForFlush) {
  RecordingCommit recording;
  StoreWriter writer([&](std::vector<PendingWrite>& batch) { recording(batch); });
  for (int i = 0; i < 3; ++i)
    writer.enqueue(writeOf("k" + std::to_string(i), std::make_shared<std::atomic<bool>>()));
  writer.stop();
  size_t written = 0;
  for (const auto& batch : recording.batches())
    written += batch.size();
  EXPECT_EQ(written, 3u);
  auto released = std::make_shared<std::atomic<bool>>(false);
  writer.enqueue(writeOf("after-stop", released));
  EXPECT_EQ(writer.stats().pending, 1);
  writer.flush(); // commits on this thread: the writer's thread is gone
  EXPECT_TRUE(released->load());
  EXPECT_EQ(recording.batches().back(), std::vector<std::string>({"after-stop"}));
}

TEST(StoreWriter, AForkedChildForgetsTheQueueAndReleasesNothing) {
  RecordingCommit recording;
  StoreWriter writer([&](std::vector<PendingWrite>& batch) { recording(batch); });
  recording.block();
  auto first = std::make_shared<std::atomic<bool>>(false);
  auto queued = std::make_shared<std::atomic<bool>>(false);
  writer.enqueue(writeOf("first", first));
  recording.waitForStarts(1);
  writer.enqueue(writeOf("queued", queued));
  const pid_t pid = fork();
  if (pid == 0) {
    writer.flush(); // nothing to wait for here: the thread and the queue are the parent's
    const bool clean = writer.stats().pending == 0 && !queued->load();
    _exit(clean ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  recording.release();
  writer.flush();
  EXPECT_TRUE(queued->load()); // the parent still wrote and released it
}

} // namespace
} // namespace torchneuron

#include "cache/cache_warnings.h"

#include <atomic>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <mutex>
#include <pthread.h>
#include <set>

#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

// Locking: `warning_mutex` guards the delivery, the warned kinds and the queue; delivery itself
// runs outside it. A leaf (callers may hold the store's or the kernel cache's locks); held
// across fork() (ForkRank::kCacheWarnings). Constant-initialized globals: no static guard for a
// fork to interrupt.
std::mutex warning_mutex;
std::function<bool(const std::string&)>* delivery = nullptr;
std::set<std::string>* warned = nullptr;
std::deque<std::string>* queue = nullptr;
std::atomic<size_t> queued{0};
thread_local int queue_here = 0;

// Takes `warning_mutex` for the caller, making the state at first use.
std::unique_lock<std::mutex> lockState() {
  holdAcrossFork<warning_mutex>(ForkRank::kCacheWarnings);
  std::unique_lock<std::mutex> lock(warning_mutex);
  if (delivery == nullptr) {
    delivery = new std::function<bool(const std::string&)>([](const std::string& text) {
      std::cerr << "torchneuron: " << text << "\n";
      return true;
    });
    warned = new std::set<std::string>();
    queue = new std::deque<std::string>();
    // A forked child starts with an empty queue: what the parent queued is the parent's to
    // show (at exit the queue goes to stderr, store_writer.cpp). The child is single-threaded
    // when this runs, so it needs no lock.
    pthread_atfork(nullptr, nullptr, [] {
      queue->clear();
      queued.store(0);
    });
  }
  return lock;
}

// Delivers queued texts from the front while the delivery accepts them.
void deliverQueued() {
  while (queued.load() > 0) {
    std::string text;
    std::function<bool(const std::string&)> deliver;
    {
      std::unique_lock<std::mutex> lock = lockState();
      if (queue->empty()) return;
      text = queue->front();
      queue->pop_front();
      queued.store(queue->size());
      deliver = *delivery;
    }
    if (!deliver(text)) {
      std::unique_lock<std::mutex> lock = lockState();
      queue->push_front(std::move(text));
      queued.store(queue->size());
      return;
    }
  }
}

void send(const std::string& text, const std::function<bool(std::set<std::string>&)>& admit) {
  const std::string message = "[cache] " + text;
  std::function<bool(const std::string&)> deliver;
  {
    std::unique_lock<std::mutex> lock = lockState();
    if (!admit(*warned)) return;
    if (queue_here > 0) {
      queue->push_back(message);
      queued.store(queue->size());
      return;
    }
    deliver = *delivery;
  }
  deliverQueued(); // earlier warnings first
  if (queued.load() == 0 && deliver(message)) return;
  std::unique_lock<std::mutex> lock = lockState();
  queue->push_back(message);
  queued.store(queue->size());
}

} // namespace

void setCacheWarningDelivery(std::function<bool(const std::string&)> deliver) {
  std::unique_lock<std::mutex> lock = lockState();
  *delivery = std::move(deliver);
}

void setCacheWarningHandler(std::function<void(const std::string&)> handler) {
  setCacheWarningDelivery([handler = std::move(handler)](const std::string& text) {
    handler(text);
    return true;
  });
}

void warnCacheOnce(const std::string& kind, const std::string& text) {
  send(text, [&](std::set<std::string>& kinds) { return kinds.insert(kind).second; });
}

void warnCacheIfFirst(const std::string& kind, const std::string& text) {
  send(text, [&](std::set<std::string>& kinds) {
    if (!kinds.empty()) return false;
    kinds.insert(kind);
    return true;
  });
}

void warnKeyFileRefused(const std::string& problem) {
  warnCacheOnce("key-file", "the persistent compile cache is off (local and remote tiers): "
                            "NEURON_CACHE_KEY_FILE: " +
                                problem + "; kernels compile as usual");
}

QueueCacheWarningsHere::QueueCacheWarningsHere() { ++queue_here; }
QueueCacheWarningsHere::~QueueCacheWarningsHere() { --queue_here; }

void flushCacheWarnings() {
  if (queued.load(std::memory_order_relaxed) == 0 || queue_here > 0) return;
  deliverQueued();
}

std::vector<std::string> takeQueuedCacheWarnings() {
  std::unique_lock<std::mutex> lock = lockState();
  std::vector<std::string> texts(queue->begin(), queue->end());
  queue->clear();
  queued.store(0);
  return texts;
}

const Settings& cacheSettings() {
  const Settings& s = settings();
  static std::once_flag reported;
  std::call_once(reported, [&s] {
    for (const std::string& line : s.warnings)
      warnCacheOnce("setting:" + line.substr(0, line.find('=')), line);
  });
  return s;
}

} // namespace torchneuron

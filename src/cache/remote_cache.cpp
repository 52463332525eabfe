#include "cache/remote_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "cache/cache_warnings.h"
#include "cache/executable_container.h"
#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

// The live remote caches, for the fork handlers and the exit handler. Locking: `live_mutex`
// guards `live`; held across fork() before each cache's own mutex (same rank, always in this
// order).
std::mutex live_mutex;
std::vector<RemoteCache*>* live = nullptr;

// A lease token: 128 random bits and the pid, so a lease names its holder.
std::string newToken() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char text[64];
  std::snprintf(text, sizeof text, "%016llx%016llx-%d", static_cast<unsigned long long>(random()),
                static_cast<unsigned long long>(random()), static_cast<int>(getpid()));
  return text;
}

bool allZero(const EntryAuthenticator::KeyId& id) {
  return std::all_of(id.begin(), id.end(), [](unsigned char b) { return b == 0; });
}

} // namespace

class RemoteCache::Lease {
public:
  Lease(RemoteCache* owner, std::string key, std::string token)
      : owner_(owner), key_(std::move(key)), token_(std::move(token)), pid_(getpid()) {
    owner_->track(this);
  }
  // Releases the lease, unless the tier is being skipped (the lease then expires by itself).
  ~Lease() {
    if (getpid() != pid_) return; // a forked child's copy: the lease is the parent's
    owner_->untrack(this);
    if (!owner_->admit()) return;
    RemoteResult released = owner_->backend_->releaseLease(key_, token_);
    if (released.outcome == RemoteOutcome::kFault)
      owner_->noteFault(released.detail);
    else
      owner_->noteAnswered();
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  const std::string& key() const { return key_; }
  const std::string& token() const { return token_; }

private:
  RemoteCache* owner_;
  const std::string key_, token_;
  const pid_t pid_;
};

void registerRemoteCacheForFork(RemoteCache* cache) {
  static std::once_flag registered;
  std::call_once(registered, [] {
    registerForkHandlers(ForkRank::kRemoteCache, {[] {
                                                    live_mutex.lock();
                                                    if (live)
                                                      for (RemoteCache* c : *live) {
                                                        c->mutex_.lock();
                                                        c->backend_->prepareFork();
                                                      }
                                                  },
                                                  [] {
                                                    if (live)
                                                      for (RemoteCache* c : *live) {
                                                        c->backend_->afterForkInParent();
                                                        c->mutex_.unlock();
                                                      }
                                                    live_mutex.unlock();
                                                  },
                                                  [] {
                                                    if (live)
                                                      for (RemoteCache* c : *live)
                                                        c->forgetInChild();
                                                    live_mutex.unlock();
                                                  }});
    // At exit, before the statics they use go: what is queued is published, lease renewal
    // stops, and the process's counters are added to the tier's usage counters.
    std::atexit([] {
      std::vector<RemoteCache*> caches;
      {
        std::lock_guard<std::mutex> lock(live_mutex);
        if (live) caches = *live;
      }
      for (RemoteCache* c : caches) {
        if (StoreWriter* w = c->writer_ptr_.load()) w->stop();
        c->stopKeeper();
        c->recordUsage();
      }
    });
  });
  std::lock_guard<std::mutex> lock(live_mutex);
  if (live == nullptr) live = new std::vector<RemoteCache*>();
  live->push_back(cache);
}

RemoteCache::RemoteCache(std::unique_ptr<RemoteBackend> backend,
                         std::unique_ptr<EntryAuthenticator> key, Options options)
    : backend_(std::move(backend)), key_(std::move(key)), options_(options),
      location_(backend_->location()),
      breaker_(options.breaker_threshold, options.breaker_cooldown) {
  counters_.location = location_;
  registerRemoteCacheForFork(this);
}

RemoteCache::~RemoteCache() {
  if (StoreWriter* w = writer_ptr_.load()) w->stop();
  stopKeeper();
  std::lock_guard<std::mutex> lock(live_mutex);
  if (live) live->erase(std::remove(live->begin(), live->end(), this), live->end());
}

std::unique_ptr<RemoteCache> RemoteCache::open(const std::string& url, std::string* why) {
  std::string problem;
  std::optional<RemoteLocation> where = parseRemoteLocation(url, &problem);
  if (!where) {
    *why = "NEURON_CACHE_REMOTE=" + url + " is not a remote cache address: " + problem;
    return nullptr;
  }
  const char* key_file = std::getenv("NEURON_CACHE_KEY_FILE");
  if (key_file == nullptr || *key_file == '\0') {
    *why = "the remote compile cache " + where->describe() +
           " needs the cluster's key: make one with `torchneuron-cache keygen FILE`, copy it "
           "(mode 0600) to every node and set NEURON_CACHE_KEY_FILE to it";
    return nullptr;
  }
  std::unique_ptr<EntryAuthenticator> key = EntryAuthenticator::fromKeyFile(key_file, &problem);
  if (!key) {
    *why = "NEURON_CACHE_KEY_FILE: " + problem;
    return nullptr;
  }
  const Settings& settings = cacheSettings();
  Options options;
  options.lease_ttl = std::chrono::milliseconds(settings.cache_remote_lease_ms);
  options.wait_limit = 12 * options.lease_ttl;
  const std::string name_space = remoteNamespace(keyIdHex(key->keyId()));
  std::unique_ptr<RemoteBackend> backend =
      where->kind == RemoteLocation::Kind::kRedis
          ? makeRedisBackend(*where, name_space,
                             std::chrono::milliseconds(settings.cache_remote_timeout_ms))
          : makeSharedDirectoryBackend(*where, name_space);
  return std::make_unique<RemoteCache>(std::move(backend), std::move(key), options);
}

RemoteCache* RemoteCache::fromEnvironment() {
  // std::call_once is pthread_once: a child forked while another thread makes the tier makes it
  // again (a function-local static's guard would stay taken in the child forever).
  static std::once_flag made;
  static RemoteCache* cache = nullptr; // never destroyed: in use until the process ends
  std::call_once(made, [] {
    const char* url = std::getenv("NEURON_CACHE_REMOTE");
    if (url == nullptr || *url == '\0' || !cacheSettings().cache_enabled) return;
    std::string why;
    cache = open(url, &why).release();
    if (cache) return;
    constexpr const char* kKeyFile = "NEURON_CACHE_KEY_FILE: ";
    if (why.rfind(kKeyFile, 0) == 0)
      warnKeyFileRefused(why.substr(std::strlen(kKeyFile)));
    else
      warnCacheOnce("remote-config", "the remote compile cache is off: " + why +
                                         "; kernels come from the local tiers or compile");
  });
  return cache;
}

std::string RemoteCache::location() const { return location_; }
std::string RemoteCache::keyId() const { return keyIdHex(key_->keyId()); }

bool RemoteCache::admit() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (breaker_.allow(CircuitBreaker::Clock::now())) return true;
  ++counters_.skipped;
  return false;
}

void RemoteCache::noteAnswered() {
  std::lock_guard<std::mutex> lock(mutex_);
  breaker_.succeeded();
}

void RemoteCache::noteFault(const std::string& detail) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.faults;
    if (breaker_.failed(CircuitBreaker::Clock::now())) ++counters_.breaker_trips;
  }
  warnCacheOnce("remote-unavailable",
                "the remote compile cache " + location_ + " failed (" + detail +
                    "): its lookups are misses and compiled kernels stay local; after " +
                    std::to_string(options_.breaker_threshold) +
                    " faults in a row it is skipped for " +
                    std::to_string(options_.breaker_cooldown.count() / 1000) + " s at a time");
}

// A full server or a read-only directory refuses leases and entries alike: one warning for both.
void RemoteCache::warnRefusedWrite(const std::string& detail) {
  warnCacheOnce("remote-write", "the remote compile cache " + location_ + " refused a write (" +
                                    detail +
                                    "): compiled kernels stay in this node's tiers, and compiles "
                                    "are not coordinated across nodes");
}

void RemoteCache::reject(const std::string& key, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.rejected;
    ++caller_rejects_;
  }
  warnCacheOnce("remote-mismatch", "an entry of the remote compile cache " + location_ +
                                       " failed verification (" + why +
                                       "); it was not loaded, the kernel compiles here");
}

RemoteCache::Verdict RemoteCache::check(const std::string& key, RemoteResult& result) {
  switch (result.outcome) {
  case RemoteOutcome::kFault:
    noteFault(result.detail);
    return Verdict::kUnavailable;
  case RemoteOutcome::kRefused:
    noteAnswered();
    warnCacheOnce("remote-refused", "the remote compile cache " + location_ + " refused a read (" +
                                        result.detail + "): its lookups are misses");
    return Verdict::kUnavailable;
  case RemoteOutcome::kAbsent:
  case RemoteOutcome::kHeld:
    noteAnswered();
    return Verdict::kAbsent;
  case RemoteOutcome::kBadValue: {
    noteAnswered();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.rejected;
    }
    warnCacheOnce("remote-damaged", "an entry of the remote compile cache " + location_ +
                                        " is unusable (" + result.detail +
                                        "); it was not loaded, the kernel compiles here");
    return Verdict::kRejected;
  }
  case RemoteOutcome::kOk:
    break;
  }
  noteAnswered();
  std::string why;
  const SealStatus seal = checkSeal(result.value, *key_, &why);
  std::string kind, text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.bytes_fetched += static_cast<int64_t>(result.value.size());
    if (seal == SealStatus::kAuthentic) {
      ++counters_.fetched;
      return Verdict::kFound;
    }
    ++counters_.rejected;
    if (seal == SealStatus::kForged) ++counters_.forged;
    if (seal == SealStatus::kOtherKey) ++counters_.foreign;
  }
  if (seal == SealStatus::kForged) {
    kind = "remote-forged";
    text = "failed authentication under the cluster key (" + why +
           "): it was forged, or damaged after it was signed";
  } else if (seal == SealStatus::kOtherKey) {
    const std::optional<EntryAuthenticator::KeyId> id = sealKeyId(result.value);
    kind = "remote-foreign";
    text = id && allZero(*id)
               ? "is not signed"
               : "is signed with another key (id " + (id ? keyIdHex(*id) : std::string("?")) +
                     "): whoever wrote it does not hold the cluster key";
  } else {
    kind = "remote-damaged";
    text = "is damaged (" + why + ")";
  }
  warnCacheOnce(kind, "an entry of the remote compile cache " + location_ + " " + text +
                          "; it was not loaded, the kernel compiles here");
  return Verdict::kRejected;
}

std::optional<std::vector<char>> RemoteCache::read(const std::string& key, RemoteRead* out,
                                                   bool count_miss) {
  RemoteRead verdict = RemoteRead::kUnavailable;
  std::optional<std::vector<char>> value;
  if (admit()) {
    RemoteResult result = backend_->get(key, options_.max_value_bytes);
    switch (check(key, result)) {
    case Verdict::kFound:
      verdict = RemoteRead::kFound;
      value = std::move(result.value);
      break;
    case Verdict::kAbsent:
      verdict = RemoteRead::kAbsent;
      if (count_miss) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.misses;
      }
      break;
    case Verdict::kRejected:
      verdict = RemoteRead::kRejected;
      break;
    case Verdict::kUnavailable:
      break;
    }
  }
  if (out) *out = verdict;
  return value;
}

std::optional<std::vector<char>> RemoteCache::fetch(const std::string& key, RemoteRead* read) {
  return this->read(key, read, /*count_miss=*/true);
}

RemoteCache::Claim RemoteCache::claim(const std::string& key, bool recheck) {
  Claim claim;
  const auto give_up = std::chrono::steady_clock::now() + options_.wait_limit;
  bool waited = false;
  auto poll = std::chrono::milliseconds(2);
  while (true) {
    if (!admit()) return claim;
    const std::string token = newToken();
    RemoteResult taken = backend_->acquireLease(key, token, options_.lease_ttl);
    if (taken.outcome == RemoteOutcome::kFault) {
      noteFault(taken.detail);
      return claim;
    }
    noteAnswered();
    if (taken.outcome == RemoteOutcome::kOk) {
      claim.lease = std::make_shared<Lease>(this, key, token);
      // A holder may have published the entry between the caller's miss and this lease.
      if (recheck) claim.entry = read(key, nullptr, /*count_miss=*/false);
      if (claim.entry) claim.lease.reset();
      return claim;
    }
    if (taken.outcome != RemoteOutcome::kHeld) { // leases refused (a read-only directory)
      warnRefusedWrite(taken.detail);
      return claim;
    }
    if (!waited) {
      waited = true;
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.lease_waits;
    }
    // Another holder compiles it: wait for its entry while its lease lives.
    while (true) {
      if (std::chrono::steady_clock::now() >= give_up) {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          ++counters_.wait_timeouts;
        }
        warnCacheOnce("remote-wait", "waited " +
                                         std::to_string(options_.wait_limit.count() / 1000) +
                                         " s for another node compiling the same kernel (" +
                                         location_ + "); compiling here too");
        return claim;
      }
      std::this_thread::sleep_for(poll);
      poll = std::min(poll * 2, std::chrono::milliseconds(50));
      RemoteRead found = RemoteRead::kAbsent;
      claim.entry = read(key, &found, /*count_miss=*/false);
      if (claim.entry) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.waited_hits;
        return claim;
      }
      if (found != RemoteRead::kAbsent) return claim; // unavailable or a rejected entry
      if (!admit()) return claim;
      RemoteResult held = backend_->leaseHeld(key);
      if (held.outcome == RemoteOutcome::kFault) {
        noteFault(held.detail);
        return claim;
      }
      noteAnswered();
      if (held.outcome != RemoteOutcome::kOk) break; // released or expired: try to take it
    }
  }
}

void RemoteCache::track(Lease* lease) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_.insert(lease);
  if (!keeper_.joinable() && !keeper_stopping_) keeper_ = std::thread([this] { keepLeases(); });
}

void RemoteCache::untrack(Lease* lease) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_.erase(lease);
}

// The keeper thread: renews every held lease each third of the lease time.
void RemoteCache::keepLeases() {
  QueueCacheWarningsHere queue_warnings;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!keeper_stopping_) {
    keeper_wake_.wait_for(lock, options_.lease_ttl / 3);
    if (keeper_stopping_) return;
    std::vector<std::pair<std::string, std::string>> leases;
    for (const Lease* lease : held_)
      leases.emplace_back(lease->key(), lease->token());
    lock.unlock();
    // A lease released meanwhile is not extended: the backend renews only a token that holds.
    for (const auto& [key, token] : leases) {
      if (!admit()) break;
      RemoteResult renewed = backend_->renewLease(key, token, options_.lease_ttl);
      if (renewed.outcome == RemoteOutcome::kFault) {
        noteFault(renewed.detail);
        continue;
      }
      noteAnswered();
      if (renewed.outcome == RemoteOutcome::kAbsent) {
        std::lock_guard<std::mutex> relock(mutex_);
        bool still_held = false;
        for (const Lease* lease : held_)
          still_held |= lease->token() == token;
        if (still_held) ++counters_.leases_lost;
      }
    }
    lock.lock();
  }
}

void RemoteCache::stopKeeper() {
  std::thread keeper;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    keeper_stopping_ = true;
    keeper.swap(keeper_);
  }
  keeper_wake_.notify_all();
  if (keeper.joinable()) keeper.join();
}

// In a forked child (mutex_ held by the forking thread): the keeper thread and the leases are the
// parent's; the backend drops the parent's connections.
void RemoteCache::forgetInChild() {
  backend_->afterForkInChild();
  held_.clear();
  new (&keeper_) std::thread(); // the old object names a thread that does not exist here
  new (&keeper_wake_) std::condition_variable();
  mutex_.unlock();
}

StoreWriter& RemoteCache::writer() {
  std::call_once(writer_made_, [this] {
    writer_ = std::make_unique<StoreWriter>(
        [this](std::vector<PendingWrite>& batch) { commit(batch); },
        std::chrono::milliseconds(0)); // waiting nodes poll for it: publish at once
    writer_ptr_.store(writer_.get());
  });
  return *writer_;
}

void RemoteCache::publishLater(const std::string& key, std::vector<char> value,
                               std::shared_ptr<void> hold) {
  if (value.size() > options_.max_value_bytes || !sealContainer(value, *key_)) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.publish_failures;
    }
    warnCacheOnce("remote-publish", "an entry of " + std::to_string(value.size()) +
                                        " bytes was not published to " + location_ +
                                        " (over the bound of " +
                                        std::to_string(options_.max_value_bytes) +
                                        " bytes, or not an intact container)");
    return;
  }
  PendingWrite write;
  write.key = key;
  write.value = std::move(value);
  write.hold = std::move(hold);
  writer().enqueue(std::move(write));
  if (inForkedChild()) writer().flush(); // the writer's thread may be the parent's: publish here
}

std::string RemoteCache::publishNow(const std::string& key, const std::vector<char>& sealed) {
  std::string detail;
  publish(key, sealed, &detail);
  return detail;
}

RemoteOutcome RemoteCache::publish(const std::string& key, const std::vector<char>& sealed,
                                   std::string* detail) {
  if (!admit()) {
    *detail = location_ + " is skipped after repeated faults";
    return RemoteOutcome::kFault;
  }
  RemoteResult result = backend_->put(key, sealed);
  if (result.outcome == RemoteOutcome::kFault) {
    noteFault(result.detail);
    *detail = result.detail;
    return result.outcome;
  }
  noteAnswered();
  std::lock_guard<std::mutex> lock(mutex_);
  if (result.outcome != RemoteOutcome::kOk) {
    ++counters_.publish_failures;
    *detail = result.detail.empty() ? "refused" : result.detail;
    return result.outcome;
  }
  ++counters_.published;
  counters_.bytes_published += static_cast<int64_t>(sealed.size());
  return RemoteOutcome::kOk;
}

// On the writer's thread; its warnings are queued for a thread that can show them. A fault was
// warned about by noteFault(); a refusal (a full server, a read-only directory) is warned here.
void RemoteCache::commit(std::vector<PendingWrite>& batch) {
  QueueCacheWarningsHere queue_warnings;
  for (const PendingWrite& write : batch) {
    std::string detail;
    if (publish(write.key, write.value, &detail) == RemoteOutcome::kRefused)
      warnRefusedWrite(detail);
  }
}

void RemoteCache::flushPublishes() {
  if (StoreWriter* w = writer_ptr_.load()) w->flush();
}

std::vector<std::string> RemoteCache::list(std::string* problem) {
  std::vector<std::string> keys;
  RemoteResult result = backend_->list(&keys);
  if (result.outcome != RemoteOutcome::kOk && problem) *problem = result.detail;
  return keys;
}

RemoteCacheStats RemoteCache::stats() const {
  const StoreWriter* w = writer_ptr_.load(); // its lock ranks below mutex_: taken first
  const int64_t pending = w ? w->stats().pending : 0;
  std::lock_guard<std::mutex> lock(mutex_);
  RemoteCacheStats stats = counters_;
  stats.publishes_pending = pending;
  return stats;
}

void RemoteCache::resetCounters() {
  recordUsage(); // what the reset would lose
  std::lock_guard<std::mutex> lock(mutex_);
  counters_ = RemoteCacheStats();
  counters_.location = location_;
  caller_rejects_ = 0;
  recorded_.clear();
}

std::map<std::string, int64_t> RemoteCache::usage(std::string* problem) {
  std::map<std::string, int64_t> sums;
  RemoteResult result = backend_->readUsage(&sums);
  if (result.outcome != RemoteOutcome::kOk && problem) *problem = result.detail;
  return sums;
}

void RemoteCache::recordUsage() {
  std::map<std::string, int64_t> increments;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::map<std::string, int64_t> now = {{"hits", counters_.fetched - caller_rejects_},
                                                {"misses", counters_.misses},
                                                {"rejected", counters_.rejected},
                                                {"published", counters_.published}};
    for (const auto& [name, value] : now)
      if (value != recorded_[name]) increments[name] = value - recorded_[name];
    if (increments.empty()) return;
    recorded_ = now;
  }
  if (!admit()) return;
  RemoteResult added = backend_->addUsage(increments);
  if (added.outcome == RemoteOutcome::kFault)
    noteFault(added.detail);
  else
    noteAnswered(); // (a probe of the breaker must report either way)
}

} // namespace torchneuron

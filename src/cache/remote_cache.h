#pragma once
// The remote tier of the compile cache, shared by the nodes of a cluster (NEURON_CACHE_REMOTE:
// redis://... or file:///...; remote_tier.h has the backends). The kernel cache asks it after a
// local miss and publishes every compile to it; the trust model and the set-up are in
// docs/persistent-cache.md.
//
// Trust: a remote tier is writable by others (every node, whoever can reach the Redis server or
// write the shared directory), so its entries are trusted for their MAC under the cluster key
// (NEURON_CACHE_KEY_FILE) alone. fetch() returns only values whose seal verifies under that key;
// an unsigned value, one signed with another key, one whose MAC or checksum fails, one over the
// size bound: never returned, counted in `rejected`, one warning per kind. The caller verifies
// the rest (key material, host) before it maps any code, and reports a failure with reject().
// Without a key file the tier is off, with one warning saying how to make one.
//
// Single flight across the cluster: claim() takes the key's lease (Redis SET NX PX; a lease file)
// for the caller to compile under, or waits while another holder's lease lives for the entry to
// appear, up to 12 lease times, then lets the caller compile anyway. Held leases are renewed by a
// background thread every third of the lease time (NEURON_CACHE_REMOTE_LEASE_MS), so a slow
// compile keeps its lease and a dead holder's lease expires.
//
// Fail open: every fault (unreachable, timeout, refused write, full server) is a miss, a counter
// and at most one warning per kind; a circuit breaker skips the tier for 30 s after 3 faults in a
// row. Publishing runs on a background writer (store_writer.h), never on the caller's thread
// (in a forked child, whose writer thread stayed in the parent, on the caller's).
//
// Locking: `mutex_` guards the counters, the breaker and the held leases; it is never held during
// I/O. A leaf (ForkRank::kRemoteCache), held across fork(); the child drops the parent's
// connections and leases (remote_tier.h) and opens its own.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/circuit_breaker.h"
#include "cache/entry_authenticator.h"
#include "cache/remote_tier.h"
#include "cache/store_writer.h"

namespace torchneuron {

struct RemoteCacheStats {
  std::string location; // the tier's URL without a password; "" when there is none
  int64_t fetched = 0;  // authentic values read
  int64_t misses = 0;   // keys the tier did not have
  int64_t rejected = 0; // values never returned or failed the caller's checks (below)
  int64_t forged = 0;   //   of which: a MAC that does not verify
  int64_t foreign = 0;  //   of which: unsigned, or signed with another key
  int64_t faults = 0;   // calls that failed (unreachable, timeout, I/O error)
  int64_t skipped = 0;  // calls not made: the breaker was open
  int64_t breaker_trips = 0;
  int64_t published = 0;        // entries written
  int64_t publish_failures = 0; // writes the tier refused (full, read-only) or that failed
  int64_t publishes_pending = 0;
  int64_t lease_waits = 0;   // claims that found another holder's lease and waited
  int64_t waited_hits = 0;   // ... and got the entry
  int64_t wait_timeouts = 0; // ... and gave up after the bound
  int64_t leases_lost = 0;   // renewals that found the lease gone
  int64_t bytes_fetched = 0;
  int64_t bytes_published = 0;
};

// What fetch() found.
enum class RemoteRead { kFound, kAbsent, kRejected, kUnavailable };

class RemoteCache {
public:
  struct Options {
    std::chrono::milliseconds lease_ttl{10000};
    std::chrono::milliseconds wait_limit{120000}; // 12 lease times
    int breaker_threshold = 3;
    std::chrono::milliseconds breaker_cooldown{30000};
    size_t max_value_bytes = size_t{64} << 20;
  };

  RemoteCache(std::unique_ptr<RemoteBackend> backend, std::unique_ptr<EntryAuthenticator> key,
              Options options);
  ~RemoteCache(); // publishes what is queued first
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  // The process's remote tier: NEURON_CACHE_REMOTE under the key in NEURON_CACHE_KEY_FILE, with
  // NEURON_CACHE_REMOTE_TIMEOUT_MS and NEURON_CACHE_REMOTE_LEASE_MS; null when unset, when
  // NEURON_CACHE=0, or when the address or the key is refused (one warning naming the problem).
  static RemoteCache* fromEnvironment();
  // The tier at `url` under the key in NEURON_CACHE_KEY_FILE (the CLI); null with `why`.
  static std::unique_ptr<RemoteCache> open(const std::string& url, std::string* why);

  std::string location() const;
  std::string keyId() const;

  // The value of `key` if its seal verifies under the cluster key; `read` says why not.
  std::optional<std::vector<char>> fetch(const std::string& key, RemoteRead* read = nullptr);
  // A value fetch() returned failed the caller's checks (`why`): counted as rejected, warned once.
  void reject(const std::string& key, const std::string& why);

  // A held lease; released (and no longer renewed) when the last reference goes.
  class Lease;
  // The caller's right to compile `key`: a lease (compile, then publish with it), the entry that
  // another holder published while this one waited, or neither (the tier is unavailable, refuses
  // leases, or the wait passed its bound: compile without a lease). With the lease, the entry is
  // looked up once more (published since the caller's miss) unless `recheck` is false (the
  // caller's lookup was rejected: the caller overwrites that entry).
  struct Claim {
    std::shared_ptr<Lease> lease;
    std::optional<std::vector<char>> entry;
  };
  Claim claim(const std::string& key, bool recheck = true);

  // Seals `value` (a serialized container) with the cluster key and publishes it off the calling
  // thread; `hold` (the key's lease) is released once the write is done or has failed.
  void publishLater(const std::string& key, std::vector<char> value, std::shared_ptr<void> hold);
  // Publishes a sealed value now (the CLI's push): "" or the problem.
  std::string publishNow(const std::string& key, const std::vector<char>& sealed);
  // Returns once every publishLater() before the call is written (or has failed).
  void flushPublishes();
  // Every key in the tier's namespace; `problem` says why the list is incomplete.
  std::vector<std::string> list(std::string* problem);

  RemoteCacheStats stats() const;
  void resetCounters();
  // The tier's usage counters summed over every process that used it ("hits", "misses",
  // "rejected", "published"), each process adding its own at exit; `problem` when unreadable.
  std::map<std::string, int64_t> usage(std::string* problem);
  // Adds this process's counters since the last call to the tier's usage counters.
  void recordUsage();

private:
  friend class Lease;
  friend void registerRemoteCacheForFork(RemoteCache*);
  enum class Verdict { kFound, kAbsent, kRejected, kUnavailable };
  bool admit();
  void noteFault(const std::string& detail);
  void noteAnswered();
  void warnRefusedWrite(const std::string& detail);
  Verdict check(const std::string& key, RemoteResult& result);
  std::optional<std::vector<char>> read(const std::string& key, RemoteRead* out, bool count_miss);
  RemoteOutcome publish(const std::string& key, const std::vector<char>& sealed,
                        std::string* detail);
  void commit(std::vector<PendingWrite>& batch);
  void keepLeases();
  void track(Lease* lease);
  void untrack(Lease* lease);
  StoreWriter& writer();
  void stopKeeper();
  void forgetInChild();

  const std::unique_ptr<RemoteBackend> backend_;
  const std::unique_ptr<EntryAuthenticator> key_;
  const Options options_;
  const std::string location_;

  mutable std::mutex mutex_;
  CircuitBreaker breaker_;
  RemoteCacheStats counters_;
  int64_t caller_rejects_ = 0;              // reject() calls: values fetched, then refused
  std::map<std::string, int64_t> recorded_; // what recordUsage() added already
  std::set<Lease*> held_;
  std::condition_variable keeper_wake_;
  std::thread keeper_;
  bool keeper_stopping_ = false;

  std::once_flag writer_made_;
  std::unique_ptr<StoreWriter> writer_;
  std::atomic<StoreWriter*> writer_ptr_{nullptr}; // `writer_`, once made (read without the once)
};

} // namespace torchneuron

#pragma once
// Where the remote tier of the compile cache keeps entries and leases: a Redis server or a
// shared directory (NEURON_CACHE_REMOTE). A backend stores bytes by key inside one namespace (the
// container format, the engine version and the cluster key's id: remoteNamespace) and holds
// leases for the cluster-wide single flight; it knows nothing of containers or MACs (remote_cache.h
// checks every value before anything uses it). Every call returns within the backend's timeouts
// (Redis: NEURON_CACHE_REMOTE_TIMEOUT_MS per connect and per reply) and never throws.
//
// Locking: each backend is thread-safe (a Redis backend hands each call a connection of its pool,
// a shared-directory backend guards its lease table); its lock is a leaf, held across fork()
// through prepareFork()/afterForkInParent()/afterForkInChild(), which its owner calls.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torchneuron {

// A parsed NEURON_CACHE_REMOTE: redis://[:password@]host[:port][/db] or file:///path.
struct RemoteLocation {
  enum class Kind { kRedis, kSharedDirectory };
  Kind kind = Kind::kRedis;
  std::string host; // redis: a name, an IPv4 address or a bracketed IPv6 address (unbracketed)
  int port = 6379;
  std::string password; // "" when none (percent-decoded)
  int database = 0;
  std::string path; // file: an absolute path (percent-decoded)

  // The URL without the password (what warnings and the CLI show).
  std::string describe() const;
};

// Parses a NEURON_CACHE_REMOTE value; nullopt with `why` naming the problem otherwise.
std::optional<RemoteLocation> parseRemoteLocation(const std::string& url, std::string* why);

// What a backend call did. kFault: the tier could not be reached or answered out of protocol (a
// connection refused or reset, a timeout, an I/O error): it counts toward the circuit breaker.
// kRefused: the tier answered but would not do it (a full Redis, a read-only directory).
// kBadValue: a value is there but unusable (over the size bound, not a regular file).
enum class RemoteOutcome { kOk, kAbsent, kHeld, kBadValue, kRefused, kFault };

struct RemoteResult {
  RemoteOutcome outcome = RemoteOutcome::kFault;
  std::string detail;      // what failed, for warnings ("" on success)
  std::vector<char> value; // get(): the value
};

class RemoteBackend {
public:
  virtual ~RemoteBackend() = default;
  // The tier's URL, without a password.
  virtual std::string location() const = 0;

  // The value of `key`: kOk with the bytes, kAbsent, or kBadValue when it exceeds `max_bytes`
  // (never read past that bound).
  virtual RemoteResult get(const std::string& key, size_t max_bytes) = 0;
  // Stores `value` under `key` whole (readers see the old value, none, or the new one; many
  // writers on many hosts may race: one of them wins).
  virtual RemoteResult put(const std::string& key, const std::vector<char>& value) = 0;
  // Every key stored in the namespace (the CLI's push, pull and stats).
  virtual RemoteResult list(std::vector<std::string>* keys) = 0;

  // Leases: the single flight of one key across the cluster. acquire: kOk (this token holds it
  // for `ttl`) or kHeld (another holder's has not expired). renew: kOk, or kAbsent when this
  // token no longer holds it. release: drops it if this token holds it. held: kOk while some
  // holder's lease has not expired, else kAbsent.
  virtual RemoteResult acquireLease(const std::string& key, const std::string& token,
                                    std::chrono::milliseconds ttl) = 0;
  virtual RemoteResult renewLease(const std::string& key, const std::string& token,
                                  std::chrono::milliseconds ttl) = 0;
  virtual RemoteResult releaseLease(const std::string& key, const std::string& token) = 0;
  virtual RemoteResult leaseHeld(const std::string& key) = 0;

  // The tier's usage counters, summed over every process that used it (the CLI's stats): adds
  // `counts` (name -> increment) atomically, and reads the sums.
  virtual RemoteResult addUsage(const std::map<std::string, int64_t>& counts) = 0;
  virtual RemoteResult readUsage(std::map<std::string, int64_t>* sums) = 0;

  // fork(): the owner calls these from its handlers. A child never uses its parent's connections
  // or leases: it opens its own.
  virtual void prepareFork() {}
  virtual void afterForkInParent() {}
  virtual void afterForkInChild() {}
};

// The namespace of a cluster's entries: the container format, the engine version and the key id
// ("v2/<16 hex digits of the engine>/<key id>"). Entries of another engine or key are never seen.
std::string remoteNamespace(const std::string& key_id_hex);

// Redis through hiredis: keys "torchneuron/<namespace>/e/<key>", ".../l/<key>" (leases) and the
// hash ".../usage", a small pool of connections made on demand, each with `timeout` to connect
// and per reply.
std::unique_ptr<RemoteBackend> makeRedisBackend(const RemoteLocation& location,
                                                const std::string& name_space,
                                                std::chrono::milliseconds timeout);

// A shared directory: <path>/torchneuron/<namespace>/entries/<key> (one file per entry, written
// to a temporary file and renamed), .../leases/<key> (a lease file holding its expiry) and
// .../usage/<host> (each host's usage counters, rewritten under an flock by that host only).
std::unique_ptr<RemoteBackend> makeSharedDirectoryBackend(const RemoteLocation& location,
                                                          const std::string& name_space);

} // namespace torchneuron

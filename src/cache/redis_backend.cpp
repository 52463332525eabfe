// The remote tier in Redis (remote_tier.h), through hiredis: entries are plain strings, read with
// GETRANGE so that no value larger than the bound is ever transferred; leases are
// SET key token NX PX ttl, renewed and released by scripts that act only while the token matches.

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

#include "cache/remote_tier.h"

namespace torchneuron {
namespace {

// Extends the lease only while `token` holds it.
constexpr const char* kRenewScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
constexpr const char* kReleaseScript = "if redis.call('get', KEYS[1]) == ARGV[1] then "
                                       "return redis.call('del', KEYS[1]) else return 0 end";

// At most this many idle connections are kept (the dispatching threads, the publisher, the
// lease keeper).
constexpr size_t kMaxIdleConnections = 4;

timeval toTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// While one lives, a SIGPIPE raised on this thread (a write to a connection Redis closed) is held
// and discarded, never delivered: the write fails with EPIPE instead, and the process keeps going
// whatever its SIGPIPE disposition.
class SigpipeHeld {
public:
  SigpipeHeld() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeHeld() {
    if (!blocked_) return;
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeHeld(const SigpipeHeld&) = delete;
  SigpipeHeld& operator=(const SigpipeHeld&) = delete;

private:
  sigset_t pipe_, old_;
  bool was_pending_ = false, blocked_ = false;
};

struct ReplyFree {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

class RedisBackend : public RemoteBackend {
public:
  RedisBackend(RemoteLocation where, const std::string& name_space,
               std::chrono::milliseconds timeout)
      : where_(std::move(where)), prefix_("torchneuron/" + name_space + "/"),
        timeout_(toTimeval(timeout)) {}

  ~RedisBackend() override {
    for (redisContext* c : all_)
      redisFree(c);
  }

  std::string location() const override { return where_.describe(); }

  RemoteResult get(const std::string& key, size_t max_bytes) override {
    // GETRANGE returns at most max_bytes + 1 bytes ("" for a missing key): more means too large.
    const std::string last = std::to_string(max_bytes);
    RemoteResult result;
    Reply reply = run({"GETRANGE", entryKey(key), "0", last}, &result);
    if (!reply) return result;
    if (reply->type != REDIS_REPLY_STRING) return outOfProtocol(reply.get());
    if (reply->len == 0) return {RemoteOutcome::kAbsent, "", {}};
    if (static_cast<size_t>(reply->len) > max_bytes)
      return {RemoteOutcome::kBadValue,
              "the value is larger than the bound of " + std::to_string(max_bytes) + " bytes",
              {}};
    result.outcome = RemoteOutcome::kOk;
    result.value.assign(reply->str, reply->str + reply->len);
    return result;
  }

  RemoteResult put(const std::string& key, const std::vector<char>& value) override {
    RemoteResult result;
    Reply reply =
        run({"SET", entryKey(key), std::string_view(value.data(), value.size())}, &result);
    if (!reply) return result;
    if (reply->type == REDIS_REPLY_STATUS) return {RemoteOutcome::kOk, "", {}};
    return outOfProtocol(reply.get());
  }

  RemoteResult list(std::vector<std::string>* keys) override {
    const std::string pattern = prefix_ + "e/*";
    std::string cursor = "0";
    do {
      RemoteResult result;
      Reply reply = run({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, &result);
      if (!reply) return result;
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
          reply->element[0]->type != REDIS_REPLY_STRING ||
          reply->element[1]->type != REDIS_REPLY_ARRAY)
        return outOfProtocol(reply.get());
      cursor.assign(reply->element[0]->str, reply->element[0]->len);
      const redisReply* names = reply->element[1];
      for (size_t i = 0; i < names->elements; ++i) {
        const std::string name(names->element[i]->str, names->element[i]->len);
        keys->push_back(name.substr(prefix_.size() + 2));
      }
    } while (cursor != "0");
    return {RemoteOutcome::kOk, "", {}};
  }

  RemoteResult acquireLease(const std::string& key, const std::string& token,
                            std::chrono::milliseconds ttl) override {
    RemoteResult result;
    Reply reply =
        run({"SET", leaseKey(key), token, "NX", "PX", std::to_string(ttl.count())}, &result);
    if (!reply) return result;
    if (reply->type == REDIS_REPLY_STATUS) return {RemoteOutcome::kOk, "", {}};
    if (reply->type == REDIS_REPLY_NIL) return {RemoteOutcome::kHeld, "", {}};
    return outOfProtocol(reply.get());
  }

  RemoteResult renewLease(const std::string& key, const std::string& token,
                          std::chrono::milliseconds ttl) override {
    return script(kRenewScript, key, {token, std::to_string(ttl.count())});
  }

  RemoteResult releaseLease(const std::string& key, const std::string& token) override {
    RemoteResult result = script(kReleaseScript, key, {token});
    if (result.outcome == RemoteOutcome::kAbsent) result.outcome = RemoteOutcome::kOk;
    return result;
  }

  RemoteResult leaseHeld(const std::string& key) override {
    RemoteResult result;
    Reply reply = run({"EXISTS", leaseKey(key)}, &result);
    if (!reply) return result;
    if (reply->type != REDIS_REPLY_INTEGER) return outOfProtocol(reply.get());
    return {reply->integer > 0 ? RemoteOutcome::kOk : RemoteOutcome::kAbsent, "", {}};
  }

  RemoteResult addUsage(const std::map<std::string, int64_t>& counts) override {
    for (const auto& [name, count] : counts) {
      RemoteResult result;
      Reply reply = run({"HINCRBY", prefix_ + "usage", name, std::to_string(count)}, &result);
      if (!reply) return result;
      if (reply->type != REDIS_REPLY_INTEGER) return outOfProtocol(reply.get());
    }
    return {RemoteOutcome::kOk, "", {}};
  }

  RemoteResult readUsage(std::map<std::string, int64_t>* sums) override {
    RemoteResult result;
    Reply reply = run({"HGETALL", prefix_ + "usage"}, &result);
    if (!reply) return result;
    if (reply->type != REDIS_REPLY_ARRAY) return outOfProtocol(reply.get());
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
      const redisReply* name = reply->element[i];
      const redisReply* value = reply->element[i + 1];
      if (name->type == REDIS_REPLY_STRING && value->type == REDIS_REPLY_STRING)
        (*sums)[std::string(name->str, name->len)] +=
            std::strtoll(std::string(value->str, value->len).c_str(), nullptr, 10);
    }
    return {RemoteOutcome::kOk, "", {}};
  }

  void prepareFork() override { mutex_.lock(); }
  void afterForkInParent() override { mutex_.unlock(); }
  // The child's copies of the connections share their sockets with the parent's: a command sent
  // on one would interleave with the parent's. They are closed here (the parent's stay open) and
  // the child connects anew.
  void afterForkInChild() override {
    for (redisContext* c : all_)
      redisFree(c);
    all_.clear();
    idle_.clear();
    mutex_.unlock();
  }

private:
  std::string entryKey(const std::string& key) const { return prefix_ + "e/" + key; }
  std::string leaseKey(const std::string& key) const { return prefix_ + "l/" + key; }

  // An error reply from the server: the server is there, so it is a refusal (a full Redis: OOM;
  // a replica: READONLY; a wrong password: NOAUTH), not a fault of the connection.
  static RemoteResult outOfProtocol(const redisReply* reply) {
    if (reply->type == REDIS_REPLY_ERROR)
      return {RemoteOutcome::kRefused, std::string(reply->str, reply->len), {}};
    return {RemoteOutcome::kFault, "unexpected reply type " + std::to_string(reply->type), {}};
  }

  RemoteResult script(const char* body, const std::string& key,
                      std::initializer_list<std::string> args) {
    std::vector<std::string_view> argv = {"EVAL", body, "1"};
    const std::string lease = leaseKey(key);
    argv.push_back(lease);
    for (const std::string& a : args)
      argv.push_back(a);
    RemoteResult result;
    Reply reply = run(argv, &result);
    if (!reply) return result;
    if (reply->type != REDIS_REPLY_INTEGER) return outOfProtocol(reply.get());
    return {reply->integer > 0 ? RemoteOutcome::kOk : RemoteOutcome::kAbsent, "", {}};
  }

  // A connection from the pool, or a new one (AUTH and SELECT done); null with `why`.
  redisContext* checkOut(std::string* why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        redisContext* c = idle_.back();
        idle_.pop_back();
        return c;
      }
    }
    redisContext* c = redisConnectWithTimeout(where_.host.c_str(), where_.port, timeout_);
    if (c == nullptr) {
      *why = "cannot allocate a connection";
      return nullptr;
    }
    if (c->err != 0 || redisSetTimeout(c, timeout_) != REDIS_OK) {
      *why = "cannot connect to " + where_.describe() + " (" + c->errstr + ")";
      redisFree(c);
      return nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all_.insert(c);
    }
    std::vector<std::vector<std::string_view>> setup;
    const std::string database = std::to_string(where_.database);
    if (!where_.password.empty()) setup.push_back({"AUTH", where_.password});
    if (where_.database != 0) setup.push_back({"SELECT", database});
    for (const auto& command : setup) {
      Reply reply = send(c, command, why);
      if (!reply || reply->type == REDIS_REPLY_ERROR) {
        if (reply) *why = std::string(command[0]) + " failed: " + reply->str;
        discard(c);
        return nullptr;
      }
    }
    return c;
  }

  void checkIn(redisContext* c) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < kMaxIdleConnections && all_.count(c)) {
      idle_.push_back(c);
      return;
    }
    all_.erase(c);
    redisFree(c);
  }

  void discard(redisContext* c) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (all_.erase(c)) redisFree(c);
  }

  static Reply send(redisContext* c, const std::vector<std::string_view>& argv, std::string* why) {
    std::vector<const char*> pointers;
    std::vector<size_t> lengths;
    for (std::string_view a : argv) {
      pointers.push_back(a.data());
      lengths.push_back(a.size());
    }
    SigpipeHeld held;
    Reply reply(static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), pointers.data(), lengths.data())));
    if (!reply) *why = c->err != 0 ? c->errstr : "no reply";
    return reply;
  }

  // Runs one command on a pooled connection; null (with `result` a fault) when the connection
  // failed, which is then closed: after a timeout its reply may still arrive.
  Reply run(const std::vector<std::string_view>& argv, RemoteResult* result) {
    std::string why;
    redisContext* c = checkOut(&why);
    if (c == nullptr) {
      *result = {RemoteOutcome::kFault, why, {}};
      return nullptr;
    }
    Reply reply = send(c, argv, &why);
    if (!reply || c->err != 0) {
      *result = {RemoteOutcome::kFault, where_.describe() + ": " + why, {}};
      discard(c);
      return nullptr;
    }
    checkIn(c);
    return reply;
  }

  const RemoteLocation where_;
  const std::string prefix_;
  const timeval timeout_;
  // Locking: `mutex_` guards `idle_` and `all_` (every connection this backend made, idle or in
  // use); it is never held during I/O. A leaf, held across fork() (see afterForkInChild).
  std::mutex mutex_;
  std::vector<redisContext*> idle_;
  std::set<redisContext*> all_;
};

} // namespace

std::unique_ptr<RemoteBackend> makeRedisBackend(const RemoteLocation& location,
                                                const std::string& name_space,
                                                std::chrono::milliseconds timeout) {
  return std::make_unique<RedisBackend>(location, name_space, timeout);
}

} // namespace torchneuron

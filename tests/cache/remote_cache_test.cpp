// The remote tier's pieces in one process: addresses, the circuit breaker, the shared-directory
// and Redis backends (a real redis-server, tests/common/redis_process.h), what fetch() returns
// and rejects, the cluster-wide single flight between two tier objects, and push/pull between a
// node's store and the tier. The cluster itself (processes, faults, forgeries through kernels)
// is tests/cache/test_remote_cache.py. Each test runs in its own process (gtest_discover_tests):
// cache warnings are once per kind per process.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_warnings.h"
#include "cache/circuit_breaker.h"
#include "cache/directory_trust.h"
#include "cache/entry_verification.h"
#include "cache/executable_container.h"
#include "cache/persistent_store.h"
#include "cache/remote_cache.h"
#include "cache/remote_tier.h"
#include "cache/remote_transfer.h"
#include "common/redis_process.h"
#include "common/test_directory.h"

namespace torchneuron {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

std::vector<std::string>& warnings() {
  static std::vector<std::string> seen;
  return seen;
}

void collectWarnings() {
  warnings().clear();
  setCacheWarningHandler([](const std::string& text) { warnings().push_back(text); });
}

int warningsContaining(const std::string& text) {
  int count = 0;
  for (const std::string& w : warnings())
    count += w.find(text) != std::string::npos;
  return count;
}

EntryAuthenticator::Key keyOf(unsigned char fill) {
  EntryAuthenticator::Key key;
  key.fill(fill);
  return key;
}

// A container that may be loaded on this host, with key material `material`; its store key in
// `*key`. Unsealed.
std::vector<char> hostContainer(const std::string& material, std::string* key,
                                const std::string& cpu_features = "") {
  LoadRequirements required = hostRequirements();
  required.key_material = material;
  if (!cpu_features.empty()) required.cpu_features = cpu_features;
  ExecutableContainer c;
  c.engine_version = required.engine_version;
  c.llvm_version = required.llvm_version;
  c.target_triple = required.target_triple;
  c.cpu_features = required.cpu_features;
  c.compile_options = required.compile_options;
  c.key_material = material;
  c.kernels = {{"k", "slots-v1"}};
  c.object.assign(512, static_cast<char>(material.size()));
  *key = storeKeyFor(required);
  return c.serialize();
}

std::vector<char> sealedWith(std::vector<char> bytes, const EntryAuthenticator& key) {
  EXPECT_TRUE(sealContainer(bytes, key));
  return bytes;
}

RemoteLocation directoryAt(const std::string& path) {
  RemoteLocation where;
  where.kind = RemoteLocation::Kind::kSharedDirectory;
  where.path = path;
  return where;
}

std::unique_ptr<RemoteCache> cacheOn(std::unique_ptr<RemoteBackend> backend, unsigned char key,
                                     RemoteCache::Options options = {}) {
  return std::make_unique<RemoteCache>(std::move(backend),
                                       std::make_unique<EntryAuthenticator>(keyOf(key)), options);
}

std::unique_ptr<RemoteBackend> sharedDirectory(const std::string& path) {
  return makeSharedDirectoryBackend(directoryAt(path), "v2/test/namespace");
}

// --- addresses, breaker, filesystems ---------------------------------------------------------

TEST(RemoteLocation, ParsesRedisAndFileAddresses) {
  std::string why;
  std::optional<RemoteLocation> r =
      parseRemoteLocation("redis://:s%40cret@cache.local:7000/3", &why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->kind, RemoteLocation::Kind::kRedis);
  EXPECT_EQ(r->host, "cache.local");
  EXPECT_EQ(r->port, 7000);
  EXPECT_EQ(r->password, "s@cret");
  EXPECT_EQ(r->database, 3);
  EXPECT_EQ(r->describe(), "redis://cache.local:7000/3"); // never the password
  r = parseRemoteLocation("redis://[::1]", &why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->host, "::1");
  EXPECT_EQ(r->port, 6379);
  r = parseRemoteLocation("file:///mnt/shared%20cache/", &why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->kind, RemoteLocation::Kind::kSharedDirectory);
  EXPECT_EQ(r->path, "/mnt/shared cache");
}

TEST(RemoteLocation, BadAddressesNameTheirProblem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"http://x", "neither redis://"},
      {"redis://", "no host"},
      {"redis://host:99999", "port '99999'"},
      {"redis://host:", "port '-'"},
      {"redis://host/abc", "database 'abc'"},
      {"redis://user:pw@host", "':password@'"},
      {"redis://:@host", "password is empty"},
      {"redis://[::1", "closing ']'"},
      {"redis://ho st", "character ' '"},
      {"file://relative/path", "file:///absolute/path"},
      {"file:///bad%zzescape", "malformed %-escape"},
  };
  for (const auto& [url, expected] : bad) {
    std::string why;
    EXPECT_FALSE(parseRemoteLocation(url, &why)) << url;
    EXPECT_NE(why.find(expected), std::string::npos) << url << ": " << why;
  }
}

TEST(CircuitBreaker, OpensAfterRepeatedFaultsProbesAfterTheCooldownClosesOnSuccess) {
  CircuitBreaker breaker(3, milliseconds(1000));
  const auto t0 = CircuitBreaker::Clock::now();
  EXPECT_TRUE(breaker.allow(t0));
  EXPECT_FALSE(breaker.failed(t0));
  breaker.succeeded(); // a success between faults resets the count
  EXPECT_FALSE(breaker.failed(t0));
  EXPECT_FALSE(breaker.failed(t0));
  EXPECT_TRUE(breaker.failed(t0)); // the third in a row opens it
  EXPECT_EQ(breaker.trips(), 1);
  EXPECT_FALSE(breaker.allow(t0 + milliseconds(999)));
  const auto later = t0 + milliseconds(1000);
  EXPECT_TRUE(breaker.allow(later));   // the probe
  EXPECT_FALSE(breaker.allow(later));  // one probe at a time
  EXPECT_FALSE(breaker.failed(later)); // the probe failed: open for another cooldown
  EXPECT_FALSE(breaker.allow(later + milliseconds(999)));
  EXPECT_TRUE(breaker.allow(later + milliseconds(1000)));
  breaker.succeeded();
  EXPECT_TRUE(breaker.allow(later + milliseconds(1000)));
  EXPECT_EQ(breaker.trips(), 1);
}

TEST(NetworkFilesystem, KnownTypesAreNamedLocalOnesAreNot) {
  EXPECT_STREQ(networkFilesystemName(0x6969), "nfs");
  EXPECT_STREQ(networkFilesystemName(static_cast<long>(0xFF534D42)), "cifs");
  EXPECT_STREQ(networkFilesystemName(0x0BD00BD0), "lustre");
  EXPECT_EQ(networkFilesystemName(0xEF53), nullptr);     // ext4
  EXPECT_EQ(networkFilesystemName(0x01021994), nullptr); // tmpfs
  EXPECT_EQ(networkFilesystemOf(testing::makeTestDirectory("neuron-local-")), "");
}

// --- the shared-directory backend --------------------------------------------------------------

TEST(SharedDirectoryTier, EntriesRoundTripMissingOnesAreAbsentLargeOnesAreNeverRead) {
  const std::string root = testing::makeTestDirectory("neuron-shared-");
  auto tier = sharedDirectory(root);
  EXPECT_EQ(tier->get("0123456789abcdef0123456789abcdef", 1 << 20).outcome, RemoteOutcome::kAbsent);
  const std::vector<char> value(3000, 'v');
  ASSERT_EQ(tier->put("0123456789abcdef0123456789abcdef", value).outcome, RemoteOutcome::kOk);
  RemoteResult read = tier->get("0123456789abcdef0123456789abcdef", 1 << 20);
  ASSERT_EQ(read.outcome, RemoteOutcome::kOk) << read.detail;
  EXPECT_EQ(read.value, value);
  read = tier->get("0123456789abcdef0123456789abcdef", 2999);
  EXPECT_EQ(read.outcome, RemoteOutcome::kBadValue);
  EXPECT_TRUE(read.value.empty());
  std::vector<std::string> keys;
  ASSERT_EQ(tier->list(&keys).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(keys, std::vector<std::string>{"0123456789abcdef0123456789abcdef"});
  // Laid out as documented, the directories with the root's permission bits.
  const fs::path entries = fs::path(root) / "torchneuron/v2/test/namespace/entries";
  EXPECT_TRUE(fs::is_regular_file(entries / "0123456789abcdef0123456789abcdef"));
  struct stat made{}, top{};
  ASSERT_EQ(stat(entries.c_str(), &made), 0);
  ASSERT_EQ(stat(root.c_str(), &top), 0);
  EXPECT_EQ(made.st_mode & 07777, top.st_mode & 07777);
}

TEST(SharedDirectoryTier, ManyWritingProcessesNeverShowAPartialEntry) {
  const std::string root = testing::makeTestDirectory("neuron-shared-writers-");
  const std::string key = "00000000000000000000000000000001";
  constexpr size_t kBytes = 256 << 10;
  std::vector<pid_t> writers;
  for (char fill : {'a', 'b', 'c', 'd'}) {
    const pid_t pid = fork();
    if (pid == 0) {
      auto tier = sharedDirectory(root);
      const std::vector<char> value(kBytes, fill);
      bool ok = true;
      for (int i = 0; i < 40; ++i)
        ok &= tier->put(key, value).outcome == RemoteOutcome::kOk;
      _exit(ok ? 0 : 1);
    }
    writers.push_back(pid);
  }
  // Reads while they write, then once more after: every value seen is one writer's, whole.
  auto reader = sharedDirectory(root);
  int whole = 0;
  size_t running = writers.size();
  for (bool last = false; !last;) {
    last = running == 0;
    RemoteResult read = reader->get(key, kBytes);
    if (read.outcome != RemoteOutcome::kAbsent) {
      ASSERT_EQ(read.outcome, RemoteOutcome::kOk) << read.detail;
      ASSERT_EQ(read.value.size(), kBytes);
      ASSERT_EQ(std::count(read.value.begin(), read.value.end(), read.value[0]),
                static_cast<long>(kBytes));
      ++whole;
    }
    for (pid_t& pid : writers) {
      int status = 0;
      if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        pid = -1;
        --running;
      }
    }
  }
  EXPECT_GT(whole, 1);
  // Every temporary file was renamed: the directory holds the entry alone.
  const fs::path entries = fs::path(root) / "torchneuron/v2/test/namespace/entries";
  EXPECT_EQ(std::distance(fs::directory_iterator(entries), fs::directory_iterator()), 1);
}

TEST(SharedDirectoryTier, ALinkPlantedInTheSharedDirectoryIsNeverFollowed) {
  const std::string root = testing::makeTestDirectory("neuron-shared-planted-");
  const std::string elsewhere = testing::makeTestDirectory("neuron-victim-");
  fs::create_symlink(elsewhere, fs::path(root) / "torchneuron");
  auto tier = sharedDirectory(root);
  RemoteResult put = tier->put("00000000000000000000000000000002", std::vector<char>(10, 'x'));
  EXPECT_EQ(put.outcome, RemoteOutcome::kFault);
  EXPECT_NE(put.detail.find("not a directory"), std::string::npos) << put.detail;
  EXPECT_TRUE(fs::is_empty(elsewhere)); // nothing was made through the link
}

// Lease checks that do not depend on timing: "held" is checked well inside a lease's time (10 s
// or more), "expired" after sleeping past it (sleeping longer changes nothing).
void checkLeases(RemoteBackend& a, RemoteBackend& b, const std::string& key) {
  ASSERT_EQ(a.acquireLease(key, "token-a", milliseconds(10000)).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(b.acquireLease(key, "token-b", milliseconds(10000)).outcome, RemoteOutcome::kHeld);
  EXPECT_EQ(b.leaseHeld(key).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(b.renewLease(key, "token-b", milliseconds(10000)).outcome, RemoteOutcome::kAbsent);
  EXPECT_EQ(b.releaseLease(key, "token-b").outcome, RemoteOutcome::kOk); // not b's: kept
  EXPECT_EQ(b.leaseHeld(key).outcome, RemoteOutcome::kOk);
  ASSERT_EQ(a.releaseLease(key, "token-a").outcome, RemoteOutcome::kOk);
  EXPECT_EQ(b.leaseHeld(key).outcome, RemoteOutcome::kAbsent);

  // Renewed: a lease of 1 s renewed for 10 s outlives its first second (the renewal must come
  // within that second: a margin for a loaded machine, where 300 ms had been the lease).
  ASSERT_EQ(a.acquireLease(key, "token-a", milliseconds(1000)).outcome, RemoteOutcome::kOk);
  ASSERT_EQ(a.renewLease(key, "token-a", milliseconds(10000)).outcome, RemoteOutcome::kOk);
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_EQ(b.acquireLease(key, "token-b", milliseconds(10000)).outcome, RemoteOutcome::kHeld);
  ASSERT_EQ(a.releaseLease(key, "token-a").outcome, RemoteOutcome::kOk);

  // Not renewed (a dead holder): it expires, and another holder takes it over.
  ASSERT_EQ(a.acquireLease(key, "token-a", milliseconds(100)).outcome, RemoteOutcome::kOk);
  std::this_thread::sleep_for(milliseconds(250));
  EXPECT_EQ(b.leaseHeld(key).outcome, RemoteOutcome::kAbsent);
  ASSERT_EQ(b.acquireLease(key, "token-b", milliseconds(10000)).outcome, RemoteOutcome::kOk);
  // The old holder's lease is gone: its renewal says so, and its release leaves b's alone.
  EXPECT_EQ(a.renewLease(key, "token-a", milliseconds(10000)).outcome, RemoteOutcome::kAbsent);
  EXPECT_EQ(a.releaseLease(key, "token-a").outcome, RemoteOutcome::kOk);
  EXPECT_EQ(a.leaseHeld(key).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(b.releaseLease(key, "token-b").outcome, RemoteOutcome::kOk);
  EXPECT_EQ(a.leaseHeld(key).outcome, RemoteOutcome::kAbsent);
}

TEST(SharedDirectoryTier, LeasesExcludeOthersAreRenewedExpireAndAreTakenOver) {
  const std::string root = testing::makeTestDirectory("neuron-shared-leases-");
  auto a = sharedDirectory(root), b = sharedDirectory(root);
  checkLeases(*a, *b, "00000000000000000000000000000003");
  const fs::path leases = fs::path(root) / "torchneuron/v2/test/namespace/leases";
  EXPECT_TRUE(fs::is_empty(leases)); // no lease file and no set-aside file left
}

TEST(SharedDirectoryTier, ALeaseFileWithoutItsExpiryExpiresByItsAge) {
  const std::string root = testing::makeTestDirectory("neuron-shared-torn-lease-");
  auto tier = sharedDirectory(root);
  const std::string key = "00000000000000000000000000000004";
  ASSERT_EQ(tier->acquireLease(key, "t", milliseconds(1000)).outcome, RemoteOutcome::kOk);
  ASSERT_EQ(tier->releaseLease(key, "t").outcome, RemoteOutcome::kOk);
  // A holder killed between creating its lease file and writing it leaves an empty file.
  const fs::path lease = fs::path(root) / "torchneuron/v2/test/namespace/leases" / key;
  std::ofstream(lease.string()).close();
  auto other = sharedDirectory(root);
  EXPECT_EQ(other->acquireLease(key, "u", milliseconds(10000)).outcome, RemoteOutcome::kHeld);
  fs::last_write_time(lease, fs::file_time_type::clock::now() - std::chrono::seconds(20));
  EXPECT_EQ(other->acquireLease(key, "u", milliseconds(10000)).outcome, RemoteOutcome::kOk);
}

// --- what the tier returns ---------------------------------------------------------------------

TEST(RemoteCacheTrust, OnlyValuesSealedWithTheClusterKeyAreReturned) {
  collectWarnings();
  const std::string root = testing::makeTestDirectory("neuron-remote-trust-");
  RemoteCache::Options options;
  options.max_value_bytes = 64 << 10;
  auto cache = cacheOn(sharedDirectory(root), 7, options);
  auto planter = sharedDirectory(root);
  const EntryAuthenticator cluster(keyOf(7)), other(keyOf(8));
  std::string key;
  const std::vector<char> plain = hostContainer("kernel", &key);
  const std::vector<char> authentic = sealedWith(plain, cluster);

  ASSERT_EQ(planter->put(key, authentic).outcome, RemoteOutcome::kOk);
  RemoteRead read = RemoteRead::kAbsent;
  std::optional<std::vector<char>> got = cache->fetch(key, &read);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, authentic);
  EXPECT_EQ(read, RemoteRead::kFound);

  // Forged: the authentic MAC slot over changed code, with a fresh checksum (what someone
  // without the key, but with write access to the tier, can make).
  ExecutableContainer changed = *parseContainer(authentic, nullptr);
  changed.object.assign(512, 'X');
  const std::vector<char> forged = changed.serialize();
  std::vector<char> flipped = authentic;
  flipped[flipped.size() / 2] ^= 0x20; // its checksum fails
  std::vector<char> truncated(authentic.begin(), authentic.begin() + authentic.size() / 2);
  // Each is rejected; the first of each kind of rejection warns, naming it.
  const std::vector<std::pair<std::vector<char>, std::string>> bad = {
      {plain, "is not signed"},
      {sealedWith(plain, other), ""}, // another key: the same kind as unsigned, warned already
      {forged, "failed authentication under the cluster key"},
      {forged, ""},
      {flipped, "is damaged"},
      {truncated, ""},
      {std::vector<char>(65 << 10, 'z'), ""}, // over the bound: never read whole
  };
  for (const auto& [bytes, why] : bad) {
    ASSERT_EQ(planter->put(key, bytes).outcome, RemoteOutcome::kOk);
    EXPECT_FALSE(cache->fetch(key, &read)) << why;
    EXPECT_EQ(read, RemoteRead::kRejected) << why;
    if (!why.empty()) {
      EXPECT_EQ(warningsContaining(why), 1) << why;
    }
  }
  const RemoteCacheStats stats = cache->stats();
  EXPECT_EQ(stats.fetched, 1);
  EXPECT_EQ(stats.rejected, 7);
  EXPECT_EQ(stats.forged, 2);
  EXPECT_EQ(stats.foreign, 2);
  // One warning per kind: not signed and another key share one, forged one, damage one (the
  // truncated, flipped and oversized values).
  EXPECT_EQ(warnings().size(), 3u);
  for (const std::string& w : warnings())
    EXPECT_NE(w.find("it was not loaded"), std::string::npos) << w;
}

// --- single flight -------------------------------------------------------------------------------

TEST(RemoteCacheSingleFlight, AWaiterGetsTheEntryItsHolderPublishes) {
  collectWarnings();
  const std::string root = testing::makeTestDirectory("neuron-remote-flight-");
  auto holder = cacheOn(sharedDirectory(root), 7), waiter = cacheOn(sharedDirectory(root), 7);
  std::string key;
  const std::vector<char> value = hostContainer("flight", &key);
  RemoteCache::Claim first = holder->claim(key);
  ASSERT_TRUE(first.lease);
  std::optional<std::vector<char>> seen;
  std::thread waiting([&] { seen = waiter->claim(key).entry; });
  // Published only once the waiter found the lease held: after a fixed sleep instead, a waiter
  // thread that started late on a loaded machine would claim after the publish, never waiting.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waiter->stats().lease_waits == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(waiter->stats().lease_waits, 1) << "the waiter never found the lease held";
  holder->publishLater(key, value, std::move(first.lease));
  waiting.join();
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen, sealedWith(value, EntryAuthenticator(keyOf(7))));
  EXPECT_EQ(waiter->stats().lease_waits, 1);
  EXPECT_EQ(waiter->stats().waited_hits, 1);
  EXPECT_EQ(holder->stats().published, 1);
  // Published and released: a later claim finds the entry at once, with no lease.
  RemoteCache::Claim later = waiter->claim(key);
  EXPECT_TRUE(later.entry);
  EXPECT_FALSE(later.lease);
  EXPECT_TRUE(warnings().empty());
}

TEST(RemoteCacheSingleFlight, ARenewedLeaseOutlivesItsTimeAndAWaiterGivesUpAtItsBound) {
  collectWarnings();
  const std::string root = testing::makeTestDirectory("neuron-remote-bound-");
  // The holder's keeper renews every second a lease of 3 s (a stall of its thread under 2 s
  // changes nothing), for twice that long.
  RemoteCache::Options short_lease;
  short_lease.lease_ttl = milliseconds(3000);
  short_lease.wait_limit = milliseconds(6000);
  auto holder = cacheOn(sharedDirectory(root), 7, short_lease);
  auto waiter = cacheOn(sharedDirectory(root), 7, short_lease);
  const std::string key = "00000000000000000000000000000005";
  RemoteCache::Claim held = holder->claim(key);
  ASSERT_TRUE(held.lease);
  const auto start = std::chrono::steady_clock::now();
  RemoteCache::Claim claim = waiter->claim(key); // the holder renews past 2 lease times
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(claim.lease);
  EXPECT_FALSE(claim.entry);
  EXPECT_GE(waited, milliseconds(6000));
  EXPECT_LT(waited, milliseconds(12000));
  EXPECT_EQ(waiter->stats().wait_timeouts, 1);
  EXPECT_EQ(warningsContaining("compiling here too"), 1);
  held.lease.reset(); // released: the next claim gets the lease at once
  EXPECT_TRUE(waiter->claim(key).lease);
}

TEST(RemoteCacheFaults, AnUnreachableTierTripsTheBreakerAndWarnsOnce) {
  collectWarnings();
  const std::string missing = testing::makeTestDirectory("neuron-remote-gone-") + "/not-there";
  auto cache = cacheOn(sharedDirectory(missing), 7);
  for (int i = 0; i < 10; ++i) {
    RemoteRead read = RemoteRead::kFound;
    EXPECT_FALSE(cache->fetch("00000000000000000000000000000006", &read));
    EXPECT_EQ(read, RemoteRead::kUnavailable);
  }
  EXPECT_FALSE(cache->claim("00000000000000000000000000000006").lease);
  const RemoteCacheStats stats = cache->stats();
  EXPECT_EQ(stats.faults, 3);
  EXPECT_EQ(stats.skipped, 8);
  EXPECT_EQ(stats.breaker_trips, 1);
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find("not-there"), std::string::npos) << warnings()[0];
}

// --- Redis ---------------------------------------------------------------------------------------

std::unique_ptr<RemoteBackend> redisAt(const std::string& url,
                                       milliseconds timeout = milliseconds(50)) {
  std::string why;
  std::optional<RemoteLocation> where = parseRemoteLocation(url, &why);
  EXPECT_TRUE(where) << why;
  return makeRedisBackend(*where, "v2/test/namespace", timeout);
}

TEST(RedisTier, EntriesLeasesAndUsageCountersRoundTrip) {
  testing::RedisProcess redis;
  auto tier = redisAt(redis.url());
  const std::string key = "00000000000000000000000000000007";
  EXPECT_EQ(tier->get(key, 1024).outcome, RemoteOutcome::kAbsent);
  const std::vector<char> value(2048, 'r');
  ASSERT_EQ(tier->put(key, value).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(tier->get(key, 4096).value, value);
  RemoteResult large = tier->get(key, 1024); // GETRANGE: 1025 bytes at most cross the wire
  EXPECT_EQ(large.outcome, RemoteOutcome::kBadValue);
  std::vector<std::string> keys;
  ASSERT_EQ(tier->list(&keys).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(keys, std::vector<std::string>{key});

  auto other = redisAt(redis.url());
  checkLeases(*tier, *other, key);

  ASSERT_EQ(tier->addUsage({{"hits", 3}, {"misses", 1}}).outcome, RemoteOutcome::kOk);
  ASSERT_EQ(other->addUsage({{"hits", 2}}).outcome, RemoteOutcome::kOk);
  std::map<std::string, int64_t> usage;
  ASSERT_EQ(tier->readUsage(&usage).outcome, RemoteOutcome::kOk);
  EXPECT_EQ(usage["hits"], 5);
  EXPECT_EQ(usage["misses"], 1);
}

TEST(RedisTier, PasswordAndDatabaseAreUsedAndAWrongPasswordIsRefused) {
  testing::RedisProcess redis({"--requirepass", "s3cret"});
  const std::string key = "00000000000000000000000000000008";
  auto right = redisAt("redis://:s3cret@127.0.0.1:" + std::to_string(redis.port()) + "/2");
  ASSERT_EQ(right->put(key, std::vector<char>(16, 'p')).outcome, RemoteOutcome::kOk);
  auto db0 = redisAt("redis://:s3cret@127.0.0.1:" + std::to_string(redis.port()) + "/0");
  EXPECT_EQ(db0->get(key, 64).outcome, RemoteOutcome::kAbsent); // another database
  auto wrong = redisAt("redis://:nope@127.0.0.1:" + std::to_string(redis.port()));
  RemoteResult refused = wrong->get(key, 64);
  EXPECT_EQ(refused.outcome, RemoteOutcome::kFault);
  EXPECT_NE(refused.detail.find("AUTH failed"), std::string::npos) << refused.detail;
}

TEST(RedisTier, AHungServerCostsTimeoutsThenIsSkippedAndADeadOneIsAMiss) {
  collectWarnings();
  testing::RedisProcess redis;
  auto cache = cacheOn(redisAt(redis.url(), milliseconds(40)), 7);
  const std::string key = "00000000000000000000000000000009";
  EXPECT_FALSE(cache->fetch(key)); // connected
  redis.pause();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    RemoteRead read = RemoteRead::kFound;
    EXPECT_FALSE(cache->fetch(key, &read));
    EXPECT_EQ(read, RemoteRead::kUnavailable);
  }
  const auto spent = std::chrono::steady_clock::now() - start;
  redis.resume();
  EXPECT_LT(spent, milliseconds(1000)); // three timeouts, then skipped
  EXPECT_EQ(cache->stats().faults, 3);
  EXPECT_EQ(cache->stats().skipped, 17);
  EXPECT_EQ(warningsContaining("skipped for 30 s"), 1);
  EXPECT_EQ(warnings().size(), 1u);

  redis.kill(); // a new tier object: refused connections, same story, no wait
  auto after = cacheOn(redisAt(redis.url()), 7);
  RemoteRead read = RemoteRead::kFound;
  EXPECT_FALSE(after->fetch(key, &read));
  EXPECT_EQ(read, RemoteRead::kUnavailable);
  EXPECT_EQ(after->stats().faults, 1);
}

TEST(RedisTier, AForkedChildUsesConnectionsOfItsOwn) {
  testing::RedisProcess redis;
  auto cache = cacheOn(redisAt(redis.url(), milliseconds(2000)), 7);
  std::string key_a, key_b;
  const EntryAuthenticator cluster(keyOf(7));
  const std::vector<char> a = sealedWith(hostContainer("a", &key_a), cluster);
  const std::vector<char> b = sealedWith(hostContainer("bb", &key_b), cluster);
  ASSERT_EQ(cache->publishNow(key_a, a), "");
  ASSERT_EQ(cache->publishNow(key_b, b), ""); // the parent's connection is open and idle
  const pid_t child = fork();
  // Both read at once, many times: on a shared socket the replies would cross.
  const std::string& mine = child == 0 ? key_a : key_b;
  const std::vector<char>& expected = child == 0 ? a : b;
  bool all_right = true;
  for (int i = 0; i < 300; ++i) {
    std::optional<std::vector<char>> got = cache->fetch(mine);
    all_right &= got && *got == expected;
  }
  if (child == 0) _exit(all_right ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(all_right);
  EXPECT_EQ(cache->stats().faults, 0);
}

// --- push and pull ------------------------------------------------------------------------------

TEST(RemoteTransfer, PushAndPullMoveVerifiedEntriesOnly) {
  collectWarnings();
  const std::string keys = testing::makeTestDirectory("neuron-transfer-key-");
  const std::string key_file = keys + "/cluster.key";
  ASSERT_EQ(writeNewKeyFile(key_file), "");
  setenv("NEURON_CACHE_KEY_FILE", key_file.c_str(), 1);
  std::string why;
  std::unique_ptr<EntryAuthenticator> cluster = EntryAuthenticator::fromKeyFile(key_file, &why);
  ASSERT_TRUE(cluster) << why;
  const std::string root = testing::makeTestDirectory("neuron-transfer-shared-");
  RemoteCache remote(sharedDirectory(root), EntryAuthenticator::fromKeyFile(key_file, &why), {});

  PersistentStore builder(testing::makeTestDirectory("neuron-transfer-builder-"), 0);
  ASSERT_EQ(builder.problem(), "");
  std::string key_1, key_2, key_other;
  const std::vector<char> one = hostContainer("one", &key_1), two = hostContainer("two", &key_2);
  ASSERT_TRUE(builder.put(key_1, one));
  ASSERT_TRUE(builder.put(key_2, two));
  const TransferReport pushed = pushEntries(builder, remote);
  EXPECT_EQ(pushed.problem, "");
  EXPECT_EQ(pushed.copied, 2);
  EXPECT_EQ(pushEntries(builder, remote).present, 2); // already there: nothing copied again

  // In the tier besides: an entry for another kind of host, and a misfiled one.
  auto planter = sharedDirectory(root);
  std::vector<char> elsewhere = hostContainer("three", &key_other, "+other-feature");
  ASSERT_EQ(planter->put(key_other, sealedWith(elsewhere, *cluster)).outcome, RemoteOutcome::kOk);
  const std::string misfiled = "ffffffffffffffffffffffffffffffff";
  std::string ignored;
  ASSERT_EQ(planter->put(misfiled, sealedWith(hostContainer("four", &ignored), *cluster)).outcome,
            RemoteOutcome::kOk);

  PersistentStore node(testing::makeTestDirectory("neuron-transfer-node-"), 0);
  const TransferReport pulled = pullEntries(node, remote);
  EXPECT_EQ(pulled.problem, "");
  EXPECT_EQ(pulled.copied, 2);
  EXPECT_EQ(pulled.other_hosts, 1);
  EXPECT_EQ(pulled.rejected, 1);
  EXPECT_TRUE(node.get(key_1));
  EXPECT_TRUE(node.get(key_2));
  EXPECT_FALSE(node.get(key_other));
  EXPECT_FALSE(node.get(misfiled));
  EXPECT_EQ(pullEntries(node, remote).present, 2);
  unsetenv("NEURON_CACHE_KEY_FILE");
}

} // namespace
} // namespace torchneuron

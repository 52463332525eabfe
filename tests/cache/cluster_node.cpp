// One node of a simulated cluster, for tests/cache/test_remote_cache.py: a process that gets its
// kernels through the compile cache exactly as the device does (kernelFor: memory, the node's
// store, the remote tier, a compile), configured by the environment (NEURON_CACHE_DIR,
// NEURON_CACHE_REMOTE, NEURON_CACHE_KEY_FILE, ...), without the cost of starting PyTorch.
//
//   neuron_cluster_node run [--step] OP...   gets and runs each OP's float kernel (add, sub, mul,
//                                            maximum, minimum, hypot), checks it against the
//                                            scalar reference, and prints one JSON line: whether
//                                            all were right, a digest of each output, its
//                                            counters and the cache warnings it got. --step: after
//                                            each OP prints "done OP" and waits for a line on
//                                            stdin (a test acts between kernels).
//   neuron_cluster_node hold OP              takes OP's lease through the remote tier's claim()
//                                            (renewed by its keeper thread), prints "leased" and
//                                            sleeps until killed: a node that dies mid-compile.
//   neuron_cluster_node key OP               prints OP's store key.

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cache/cache_warnings.h"
#include "cache/kernel_cache.h"
#include "cache/remote_cache.h"
#include "common/binary_kernel_cases.h"

using namespace torchneuron;

namespace {

std::vector<std::string> warnings;

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

const test::BinaryCase* findCase(const std::string& op) {
  for (const test::BinaryCase& c : test::cases())
    if (op == c.op) return &c;
  return nullptr;
}

// Runs `kernel` over 64 fixed elements: the output's FNV-1a digest, and whether it matches.
uint64_t digestOfRun(const KernelHandle& kernel, const test::BinaryCase& c,
                     const fusion::ElementwiseSignature& s, bool* correct) {
  *correct = kernel->function != nullptr && test::computesCorrectly(kernel, c, s);
  if (kernel->function == nullptr) return 0;
  const int64_t n = 64, unit = 1;
  std::vector<float> a(n), b(n), out(n, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    a[i] = 0.25f * i - 3.0f, b[i] = 2.0f - 0.5f * i;
  KernelArguments arguments;
  for (float* data : {out.data(), a.data(), b.data()})
    arguments.memref(data, &n, &unit, 1);
  while (arguments.size() < fusion::kernelArgumentSlots(s))
    arguments.word(floatSlot(1.0));
  kernel->function(arguments.slots(), 0, n);
  uint64_t digest = 1469598103934665603ull;
  for (unsigned char byte : std::string(reinterpret_cast<const char*>(out.data()), n * 4))
    digest = (digest ^ byte) * 1099511628211ull;
  return digest;
}

std::string storeKeyOf(const fusion::ElementwiseSignature& s) {
  return persistentKeyFor(s.key(), fusion::buildElementwiseKernel(s));
}

int run(const std::vector<std::string>& ops, bool step) {
  bool ok = true;
  std::string digests;
  for (const std::string& op : ops) {
    const test::BinaryCase* c = findCase(op);
    if (c == nullptr) {
      std::fprintf(stderr, "unknown op %s\n", op.c_str());
      return 2;
    }
    const fusion::ElementwiseSignature s = test::signatureOf(c->op);
    bool correct = false;
    const uint64_t digest = digestOfRun(test::kernelOf(s), *c, s, &correct);
    ok &= correct;
    char item[64];
    std::snprintf(item, sizeof item, "%s\"%s\": \"%016" PRIx64 "\"", digests.empty() ? "" : ", ",
                  c->op, digest);
    digests += item;
    if (step) {
      std::printf("done %s\n", c->op);
      std::fflush(stdout);
      std::string line;
      std::getline(std::cin, line);
    }
  }
  flushPersistentWrites(); // the store's writes and the remote publishes
  const KernelCacheStats k = kernelCacheStats();
  RemoteCacheStats r;
  if (RemoteCache* remote = RemoteCache::fromEnvironment()) r = remote->stats();
  std::string warned;
  for (const std::string& w : warnings)
    warned += (warned.empty() ? "" : ", ") + quoted(w);
  std::printf("{\"ok\": %s, \"digests\": {%s}, \"compiles\": %" PRId64 ", \"local_hits\": %" PRId64
              ", \"local_load_ms\": %.4f, \"remote_hits\": %" PRId64
              ", \"remote_load_ms\": %.4f, \"remote\": {\"location\": "
              "%s, \"fetched\": %" PRId64 ", \"misses\": %" PRId64 ", \"rejected\": %" PRId64
              ", \"forged\": %" PRId64 ", \"foreign\": %" PRId64 ", \"faults\": %" PRId64
              ", \"skipped\": %" PRId64 ", \"published\": %" PRId64
              ", \"publish_failures\": %" PRId64 ", \"lease_waits\": %" PRId64
              ", \"waited_hits\": %" PRId64 ", \"wait_timeouts\": %" PRId64
              ", \"leases_lost\": %" PRId64 "}, \"warnings\": [%s]}\n",
              ok ? "true" : "false", digests.c_str(), k.compiles, k.persistent_hits,
              k.persistent_load_ms_median, k.remote_hits, k.remote_load_ms_median,
              quoted(r.location).c_str(), r.fetched, r.misses, r.rejected, r.forged, r.foreign,
              r.faults, r.skipped, r.published, r.publish_failures, r.lease_waits, r.waited_hits,
              r.wait_timeouts, r.leases_lost, warned.c_str());
  return ok ? 0 : 1;
}

int hold(const std::string& op) {
  const test::BinaryCase* c = findCase(op);
  RemoteCache* remote = RemoteCache::fromEnvironment();
  if (c == nullptr || remote == nullptr) return 2;
  RemoteCache::Claim claim = remote->claim(storeKeyOf(test::signatureOf(c->op)));
  if (!claim.lease) return 1;
  std::printf("leased\n");
  std::fflush(stdout);
  while (true)
    pause();
}

} // namespace

int main(int argc, char** argv) {
  setCacheWarningHandler([](const std::string& text) { warnings.push_back(text); });
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (mode == "run") {
    const bool step = args.front() == "--step";
    if (step) args.erase(args.begin());
    return run(args, step);
  }
  if (mode == "hold") return hold(args.front());
  if (mode == "key") {
    const test::BinaryCase* c = findCase(args.front());
    if (c == nullptr) return 2;
    std::printf("%s\n", storeKeyOf(test::signatureOf(c->op)).c_str());
    return 0;
  }
  return 2;
}

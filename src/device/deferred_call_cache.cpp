#include "device/deferred_call_cache.h"

#include <array>
#include <utility>

#include "device/plan_replay.h"

namespace torchneuron {
namespace {

// Set-associative: a set's ways hold captures whose hashes share the set; the capture of a call
// that misses replaces the set's oldest. (Direct-mapped, two of a loop's 30 captures sharing a
// slot evicted each other at every step.)
constexpr size_t kSets = 128; // a power of two
constexpr size_t kWays = 8;

struct Way {
  const c10::FunctionSchema* schema = nullptr; // the op of `call`
  Hash64 hash = 0;                             // of the fingerprint of `call`
  std::shared_ptr<const CapturedCall> call;
};

struct Set {
  std::array<Way, kWays> ways;
  size_t oldest = 0; // the way the next new capture replaces when none is free
};

// Per thread, created at its first kept capture. Destroyed at the thread's exit, which the
// language orders before static objects (the kernel cache the captures' kernels return to).
thread_local std::unique_ptr<std::array<Set, kSets>> sets;

Set& setFor(const c10::FunctionSchema* schema, Hash64 hash) {
  if (!sets) sets = std::make_unique<std::array<Set, kSets>>();
  return (*sets)[captureTableIndex(schema, hash, kSets)];
}

Way* wayOf(Set& set, const c10::FunctionSchema* schema, Hash64 hash) {
  for (Way& way : set.ways)
    if (way.schema == schema && way.hash == hash) return &way;
  return nullptr;
}

} // namespace

std::shared_ptr<const void> replayKeptDeferredCall(const c10::OperatorHandle& op,
                                                   torch::jit::Stack* stack) {
  if (!sets) return nullptr;
  const c10::FunctionSchema* schema = &op.schema();
  const size_t count = schema->arguments().size();
  CallFingerprint fingerprint;
  if (stack->size() < count || !fingerprintCall(torch::jit::last(*stack, count), fingerprint))
    return nullptr;
  const Hash64 hash = fingerprintHash(fingerprint);
  const Way* way = wayOf(setFor(schema, hash), schema, hash);
  if (way == nullptr || fingerprintOf(*way->call) != fingerprint) return nullptr;
  replayMatchedCall(*way->call, stack, /*deferred=*/true);
  return way->call;
}

void keepDeferredCall(const c10::OperatorHandle& op, std::shared_ptr<const void> captured) {
  if (!captured) return;
  auto call = std::static_pointer_cast<const CapturedCall>(std::move(captured));
  const c10::FunctionSchema* schema = &op.schema();
  const Hash64 hash = fingerprintHash(fingerprintOf(*call));
  Set& set = setFor(schema, hash);
  Way* way = wayOf(set, schema, hash);
  if (way == nullptr) {
    way = &set.ways[set.oldest];
    set.oldest = (set.oldest + 1) % kWays;
  }
  way->schema = schema;
  way->hash = hash;
  way->call = std::move(call);
}

} // namespace torchneuron

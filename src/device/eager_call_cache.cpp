#include "device/eager_call_cache.h"

#include <array>
#include <atomic>
#include <memory>

#include "device/plan_replay.h"
#include "support/hash.h"
#include "support/settings.h"

namespace torchneuron {
namespace {

constexpr size_t kSlots = 2048; // a power of two

struct Slot {
  const c10::FunctionSchema* schema = nullptr; // the op of `call` (or of the uncapturable call)
  Hash64 hash = 0;                             // of the fingerprint of `call`
  std::shared_ptr<const CapturedCall> call;
  bool uncapturable = false; // `hash` ran and could not be captured
  Hash64 seen_once = 0;      // a fingerprint hash seen once here, captured if it comes again
};

struct Counters {
  std::atomic<int64_t> replays{0};
  std::atomic<int64_t> captures{0};
  std::atomic<int64_t> uncapturable{0};
};
Counters counters;

// Per thread, created at its first compiled call. Destroyed at the thread's exit, which the
// language orders before static objects (the kernel cache the captures' kernels return to).
thread_local std::unique_ptr<std::array<Slot, kSlots>> slots;

Slot& slotFor(const c10::FunctionSchema* schema, Hash64 hash) {
  if (!slots) slots = std::make_unique<std::array<Slot, kSlots>>();
  return (*slots)[captureTableIndex(schema, hash, kSlots)];
}

bool sameCall(const Slot& slot, const c10::FunctionSchema* schema, Hash64 hash) {
  return slot.schema == schema && slot.hash == hash;
}

bool runCaptured(Slot& slot, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                 tracer::CompiledKernelFunction kernel, Hash64 hash) {
  beginCallCapture(op, *stack);
  bool ran = false;
  try {
    ran = kernel(op, stack);
  } catch (...) {
    endCallCapture(op, *stack, false);
    throw;
  }
  std::shared_ptr<const CapturedCall> captured = endCallCapture(op, *stack, ran);
  if (!ran) return false; // no kernel yet (it compiles, or cannot): try again next time
  slot.schema = &op.schema();
  slot.hash = hash;
  slot.seen_once = 0;
  slot.uncapturable = captured == nullptr;
  (slot.uncapturable ? counters.uncapturable : counters.captures)
      .fetch_add(1, std::memory_order_relaxed);
  slot.call = std::move(captured);
  return true;
}

} // namespace

bool runWithEagerCallCache(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                           tracer::CompiledKernelFunction kernel) {
  // A call inside another's capture is part of that capture (its plans are captured with it).
  if (!settings().eager_call_cache || callCaptureActive()) return kernel(op, stack);
  const c10::FunctionSchema* schema = &op.schema();
  const size_t count = schema->arguments().size();
  CallFingerprint fingerprint;
  if (stack->size() < count || !fingerprintCall(torch::jit::last(*stack, count), fingerprint))
    return kernel(op, stack);
  const Hash64 hash = fingerprintHash(fingerprint);
  Slot& slot = slotFor(schema, hash);
  if (sameCall(slot, schema, hash)) {
    if (slot.uncapturable) return kernel(op, stack);
    if (fingerprintOf(*slot.call) == fingerprint) {
      replayMatchedCall(*slot.call, stack, /*deferred=*/false);
      counters.replays.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  if (slot.seen_once != hash) {
    slot.seen_once = hash;
    return kernel(op, stack);
  }
  return runCaptured(slot, op, stack, kernel, hash);
}

EagerCallCacheStats eagerCallCacheStats() {
  EagerCallCacheStats stats;
  stats.enabled = settings().eager_call_cache;
  stats.replays = counters.replays.load(std::memory_order_relaxed);
  stats.captures = counters.captures.load(std::memory_order_relaxed);
  stats.uncapturable = counters.uncapturable.load(std::memory_order_relaxed);
  return stats;
}

void resetEagerCallCacheStats() {
  counters.replays = 0;
  counters.captures = 0;
  counters.uncapturable = 0;
}

} // namespace torchneuron

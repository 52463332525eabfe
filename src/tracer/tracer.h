#pragma once
// The adaptive eager tracer (NEURON_ADAPTIVE_EAGER=1; DESIGN.md decisions 4-6): the device's
// interface to it. The routing point (device/op_routing.h) sends every compiled op call through
// traceCompiledCall; the plan executor records launches instead of running them while a call is
// deferred; every path that hands out device memory calls sync() first.
//
// How it adapts: every compiled op call adds its op record (op_record.h) to the current
// window's signature. At each sync point the window's signature is counted (recurrence.h); a
// signature seen NEURON_ADAPTIVE_THRESHOLD times is hot. While the ops of a window match a hot
// window's records, their launches are recorded (deferred) and run back to back when the window
// flushes; cold code runs op by op exactly as eager mode does.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/kernel_signature.h"
#include "launcher/parallel_launch.h"
#include "tracer/sync_cause.h"

namespace torchneuron::tracer {

namespace detail {
extern std::atomic<bool> adaptive_on;       // adaptive mode is on
extern std::atomic<bool> window_open;       // a window has traced ops or recorded launches
extern std::atomic<bool> launches_recorded; // a window has launches not run yet
extern thread_local bool deferring;         // this thread is inside a deferred op call
extern thread_local bool unbacked_results;  // ... of a window that will run fused
extern thread_local bool in_library_step;   // this thread runs a library op traced in a window
extern thread_local bool running_window;    // this thread runs the window's recorded steps
extern std::atomic<bool> debugging;         // NEURON_ADAPTIVE_DEBUG is on
extern thread_local bool in_eager_region;   // this thread is inside an EagerRegion
// Device calls this thread is inside: a kernel that dispatches another device op runs it in its
// own mode (deferred or eager), untraced, so the two stay in order.
extern thread_local int traced_call_depth;
extern std::atomic<int64_t> min_bytes_to_defer; // NEURON_ADAPTIVE_MIN_BYTES, read without a lock
void syncSlow(SyncCause cause, const c10::OperatorHandle* op);
void runRecordedLaunchesSlow();
} // namespace detail

// Adaptive mode is on and this thread is not in an EagerRegion.
inline bool adaptiveEnabled() {
  return detail::adaptive_on.load(std::memory_order_relaxed) && !detail::in_eager_region;
}

// Whether one of the call's arguments (a tensor, or a tensor of a list) holds more than `bytes`.
inline bool touchesTensorOver(c10::ArrayRef<c10::IValue> args, int64_t bytes) {
  auto large = [bytes](const c10::IValue& value) {
    if (!value.isTensor()) return false;
    const at::Tensor& t = value.toTensor();
    return t.defined() && t.numel() * static_cast<int64_t>(t.itemsize()) > bytes;
  };
  for (const c10::IValue& value : args) {
    if (large(value)) return true;
    // isList(), not isTensorList(): a tag test, where isTensorList() is an out-of-line call that
    // cost a small call a fifth of the tracer's share of it.
    if (value.isList())
      for (const c10::IValue& element : value.toListRef())
        if (large(element)) return true;
  }
  return false;
}

// Whether an adaptive-mode device call runs exactly as eager mode runs it without entering the
// tracer at all: this thread is inside no traced call, the window holds no launches waiting to
// run (which the call might read, overwrite or join as an accumulation, traceCompiledCall), and
// none of its tensors holds more than NEURON_ADAPTIVE_MIN_BYTES, so the tracer would not defer
// it. Such a call takes no record and is not counted in metrics()["adaptive"], as the tracer's
// own small calls are not; the routing point runs it under an UntracedCall. Inline, since the
// tracer's entry, lock-free as it is for these calls, cost about 300 instructions of an
// 8-element add's 7,600 (tiny-add-8 at 0.92x eager's speed).
inline bool runsBesideTracer(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (detail::traced_call_depth != 0 || detail::launches_recorded.load(std::memory_order_acquire))
    return false;
  const int64_t min_bytes = detail::min_bytes_to_defer.load(std::memory_order_relaxed);
  return min_bytes != 0 &&
         !touchesTensorOver(torch::jit::last(stack, op.schema().arguments().size()), min_bytes);
}

// While it lives, the device calls this thread makes run untraced (a call that runsBesideTracer
// and whatever device ops its kernel dispatches).
class UntracedCall {
public:
  UntracedCall() { ++detail::traced_call_depth; }
  ~UntracedCall() { --detail::traced_call_depth; }
  UntracedCall(const UntracedCall&) = delete;
  UntracedCall& operator=(const UntracedCall&) = delete;
};

// Device code that launches kernels on memory it reads and writes itself, not through plans a
// window could record (device/lstm_sequence.h): it begins with a sync point (the window runs,
// so the memory it reads is current) and, while it lives, this thread's device calls run
// eagerly, as with adaptive mode off (what they write is current when the code reads it).
// Nested regions join the outermost.
class EagerRegion {
public:
  EagerRegion();
  ~EagerRegion();
  EagerRegion(const EagerRegion&) = delete;
  EagerRegion& operator=(const EagerRegion&) = delete;

private:
  bool outermost_;
};

// Reads NEURON_ADAPTIVE_* (at import); throws std::invalid_argument naming a malformed value.
void configureFromEnvironment();
// Turns adaptive mode on or off for the process; turning it off is a sync point.
void setAdaptive(bool enabled);
// NEURON_ADAPTIVE_DEBUG (debug_check.h): recorded calls remember their Python line, and every
// batch of recorded steps is checked against ATen's CPU kernels. Changing it is a sync point.
void setAdaptiveDebug(bool enabled);
bool adaptiveDebug();
// NEURON_ADAPTIVE_FUSION and NEURON_ADAPTIVE_SYNC: whether hot windows run fused kernels, and
// whether a batch waits for its fused kernels' compiles. Changing them is a sync point.
// `wait_for_compiles` unset keeps the current choice.
void setAdaptiveFusion(bool fuse, std::optional<bool> wait_for_compiles);
// NEURON_ADAPTIVE_MIN_BYTES: the size above which a compiled call is worth deferring (0: every
// call). Changing it is a sync point; hot windows stay hot. Throws std::invalid_argument naming
// the value when it is negative.
void setAdaptiveMinBytes(int64_t bytes);
int64_t adaptiveMinBytes();
// NEURON_ADAPTIVE_UNBACKED: whether results of windows that run fused get memory only when
// something reads them (unbacked_results.h). Changing it is a sync point.
void setAdaptiveUnbacked(bool enabled);
bool adaptiveUnbacked();

using CompiledKernelFunction = bool (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// `t` with its current geometry over its storage, unaffected by later metadata changes of the
// tensor itself (t_(), squeeze_(), as_strided_()): what a recorded step must read and write when
// its window runs.
at::Tensor frozenTensor(const at::Tensor& t);

// The routing point's adaptive branch for a compiled op: traces the call and runs `kernel`
// either eagerly or deferred (its launches recorded). Returns what `kernel` returned: false
// means the call was declined, with the stack untouched (the router falls back).
bool traceCompiledCall(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                       CompiledKernelFunction kernel);

using LibraryKernelFunction = void (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The routing point's adaptive branch for a library op (matmul, convolution, embedding, indexing,
// random): a step of the window, traced like a compiled op. In a hot window a kernel that knows
// its output metadata records a host step (recordHostStep: mm, addmm, bmm, baddbmm); any other
// runs at its place in the window, after the recorded launches it touches (EagerLibraryStep):
// random ops thus draw from the generator at record time, in program order, and enter the window
// as their results. Neither ends the window.
void traceLibraryCall(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      LibraryKernelFunction kernel);

struct AccumulatingProduct;

// Records a library step of the window: `step` runs when the window runs, in order with the
// launches, and may use host views of device memory. It owns (captures by value) the tensors it
// reads and writes; `inputs` and `outputs` name them for the window (held storages, pending
// bytes, which later eager steps must wait for). A matrix product passes `product`, what it needs
// to add itself into a tensor instead (accumulating_products.h).
void recordHostStep(std::function<void()> step, at::ArrayRef<at::Tensor> inputs,
                    at::ArrayRef<at::Tensor> outputs,
                    std::shared_ptr<const AccumulatingProduct> product = nullptr);

// A library kernel that runs eagerly inside a traced library call: nothing is recorded while it
// lives. It reaches device memory only through host views, and each one first runs the recorded
// launches that read or write its storage (beforeHostAccess); launches it does not touch stay
// recorded. Outside a traced library call it does nothing.
class EagerLibraryStep {
public:
  EagerLibraryStep();
  ~EagerLibraryStep();
  EagerLibraryStep(const EagerLibraryStep&) = delete;
  EagerLibraryStep& operator=(const EagerLibraryStep&) = delete;

private:
  bool active_;
  bool was_deferring_;
};

// Before the host reads or writes `storage` through a host view. While the window runs its steps
// the memory is current; in an eager library step the recorded launches touching `storage` run
// first; anywhere else this is a sync point.
void beforeHostAccessSlow(const c10::Storage& storage);
inline void beforeHostAccess(const c10::Storage& storage) {
  if (detail::window_open.load(std::memory_order_acquire)) beforeHostAccessSlow(storage);
}

// A sync point: runs the recorded launches and ends the window. `op` names the op that needs
// it, if any (explain()). Costs one relaxed load when no window is open.
inline void sync(SyncCause cause, const c10::OperatorHandle* op = nullptr) {
  if (detail::window_open.load(std::memory_order_acquire)) detail::syncSlow(cause, op);
}

// The plan executor's branch: whether this call's launches are to be recorded.
inline bool deferringLaunches() { return detail::deferring; }
// Whether the results this deferred call allocates are to be unbacked (unbacked_results.h): its
// window will run fused kernels, all compiled, and NEURON_ADAPTIVE_DEBUG is off (its check
// copies results as they are recorded).
inline bool unbackedResults() { return detail::unbacked_results; }
// Whether NEURON_ADAPTIVE_DEBUG's check reruns recorded calls (without the window lock).
inline bool debugChecking() { return detail::debugging.load(std::memory_order_relaxed); }
// Runs the launches recorded so far without ending the window: before an eager launch, which
// may read or overwrite what they use.
inline void runRecordedLaunches() {
  if (detail::launches_recorded.load(std::memory_order_acquire)) detail::runRecordedLaunchesSlow();
}
// Records one plan's operands (held alive until the window runs) and, for each launch,
// `recordLaunch`. CPU tensors among `inputs` must be copies the caller made for the window.
// `allocated[i]`: outputs[i] was allocated by the call (not a tensor it was given: an in-place
// or out= result), so it counts as memory the window holds pending.
void recordPlanOperands(at::ArrayRef<at::Tensor> inputs, at::ArrayRef<at::Tensor> outputs,
                        c10::ArrayRef<bool> allocated);
// Inside a deferred library call: the call records per-element launches in list order (a
// _foreach_* op: the first element's op over every list element, then the next op), so the
// batch it is in runs regrouped into independent chains (independent_chains.h) for fusion.
void noteListCall();
// What the fusion partitioner (fusion/window_partition.h) needs of a recorded kernel launch.
struct RecordedOperands {
  const fusion::ElementwiseSignature* elementwise = nullptr; // interned; null: not elementwise
  const fusion::ReductionSignature* reduction = nullptr;     // interned; null: not a reduction
  const c10::StorageImpl* output_storage = nullptr;          // of its first memref (the output)
  c10::SmallVector<const void*, 4> storages;                 // every device storage it touches
  // Per memref argument, in order: where it lies, packed as (byte offset << 8) | (index into
  // `storages` + 1), or 0 for host memory (a CPU number). Taken while the storages are in the
  // cache, so the partition memo (partition_memo.h) need not read them again.
  c10::SmallVector<int64_t, 4> memref_places;
  // Per memref argument, in order: the slot of its allocated pointer (the aligned one follows),
  // which moves when the storage it points into is backed (unbacked_results.h).
  c10::SmallVector<uint32_t, 4> pointer_slots;
};
void recordLaunch(KernelHandle kernel, const int64_t* slots, int64_t slot_count,
                  const LaunchShape& shape, std::atomic<int64_t>* counter,
                  const RecordedOperands& operands);

// The device's plan cache for hot windows (device/plan_replay.h): a deferred call is captured
// once (its plans, kernels and where each operand comes from) and kept at its trie node, opaque
// to the tracer; its next occurrences with the same argument metadata replay the capture
// without binding or planning (a node keeps its last capture; a second level keeps earlier
// ones, so sizes that cycle are replayed too). `end_capture` returns nullptr for a call it
// cannot replay; `replay` returns false, touching nothing, when the call's metadata differ from
// the capture's.
struct CallCacheHooks {
  void (*begin_capture)(const c10::OperatorHandle& op, const torch::jit::Stack& stack) = nullptr;
  std::shared_ptr<const void> (*end_capture)(const c10::OperatorHandle& op,
                                             const torch::jit::Stack& stack, bool ran) = nullptr;
  bool (*replay)(const void* captured, const c10::OperatorHandle& op,
                 torch::jit::Stack* stack) = nullptr;
  // The second level (device/deferred_call_cache.h), asked when the node's capture does not
  // match: `replay_kept` replays a capture made earlier for a deferred call with the same
  // metadata at any node and returns it (null, touching nothing, when there is none), and
  // `keep` adds a new capture to it. Both null: the node's capture is the only level.
  std::shared_ptr<const void> (*replay_kept)(const c10::OperatorHandle& op,
                                             torch::jit::Stack* stack) = nullptr;
  void (*keep)(const c10::OperatorHandle& op, std::shared_ptr<const void> captured) = nullptr;
  // Runs a call the tracer does not defer, as eager mode would (the eager call cache); null:
  // the kernel itself.
  bool (*run_eager)(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    CompiledKernelFunction kernel) = nullptr;
};
// Set once, by the device library as it loads.
void setCallCacheHooks(const CallCacheHooks& hooks);

// metrics()["adaptive"].
struct AdaptiveStats {
  bool enabled = false;
  int64_t threshold = 0;
  int64_t windows = 0;                  // windows ended (sync points with traced ops)
  std::map<std::string, int64_t> syncs; // windows ended, by cause
  int64_t signatures_cold = 0;          // distinct signatures not (yet) hot
  int64_t signatures_hot = 0;
  int64_t pinned_sites = 0;
  int64_t replays = 0; // hot windows that ran entirely from recorded launches
  int64_t ops_traced = 0;
  int64_t ops_deferred = 0;          // ops whose launches were recorded
  int64_t ops_replayed = 0;          // ops of replayed windows
  int64_t calls_from_plan_cache = 0; // deferred calls replayed without planning
  int64_t launches_recorded = 0;
  int64_t launches_saved = 0;       // recorded launches fusion replaced or found dead
  int64_t fused_kernel_runs = 0;    // fused kernels run (each replaced 2+ recorded launches)
  int64_t fused_reduction_runs = 0; // those of them that were a reduction with a prologue or
                                    // epilogue
  // Table launches of the fused kernels of independent chains (an optimizer step's parameters:
  // one launch for many), and the fused kernels they ran.
  int64_t fused_table_launches = 0;
  int64_t fused_kernels_in_tables = 0;
  // Matrix products that added into a tensor in place of a later add (accumulating_products.h).
  int64_t accumulating_products = 0;
  int64_t dead_launches = 0; // recorded launches skipped: nothing could read their result
  // Results recorded without memory (unbacked_results.h), those given memory when their window
  // ran, and those unbacked now; the rest died never allocated.
  bool unbacked_results_available = false; // the reserved address range exists
  int64_t unbacked_results = 0;
  int64_t unbacked_results_backed = 0;
  int64_t unbacked_results_live = 0;
  int64_t partitions_computed = 0; // batches the partitioner ran on
  int64_t partitions_reused = 0;   // batches that reused the partition of one of the same structure
  int64_t fused_compiles = 0;      // fused kernels compiled or loaded from the cache
  int64_t fused_compile_failures = 0;
  int64_t fused_compiles_queued = 0; // waiting for or in the background compile
  double tracing_ns_per_op = 0;      // mean tracer bookkeeping per traced op (the kernel excluded)
  double recording_ns_per_op = 0;    // mean whole cost of a deferred op call (planning included)
  bool debug = false;                // NEURON_ADAPTIVE_DEBUG
  int64_t debug_batches = 0;         // batches of recorded steps checked against the CPU
  int64_t debug_mismatches = 0;      // results that differed (each one warned about)
};
AdaptiveStats adaptiveStats();
void resetAdaptiveStats();

// The most frequent window signatures: (hex, occurrences, hot), most frequent first.
struct SignatureSummary {
  std::string hex;
  int64_t occurrences = 0;
  bool hot = false;
};
std::vector<SignatureSummary> frequentSignatures(size_t count);

// What ended the most frequent windows, and why sites were pinned, as text.
std::string explain(size_t windows = 10);

} // namespace torchneuron::tracer

// The tracer's process state: the window, the recurrence table, the settings and the counters,
// all behind one lock.
//
// Locking: `window_mutex` (recursive) guards everything in this file. It is taken by every
// traced op call and sync point, on any thread, and held while a traced call runs its kernel
// (which may compile, and may reach a sync point itself: a resize, a host view, hence
// recursive). It ranks below every other lock of the project (ForkRank::kTracerWindow): held
// across fork(), so a child inherits a consistent window and runs its recorded launches on its
// own copy of memory.

#include "tracer/tracer.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>

#include "support/deterministic_mode.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"
#include "tracer/adaptive_settings.h"
#include "tracer/fused_kernels.h"
#include "tracer/op_window.h"
#include "tracer/unbacked_results.h"
#include "tracer/window_fusion.h"

namespace torchneuron::tracer {

namespace detail {
std::atomic<bool> adaptive_on{false};
std::atomic<bool> window_open{false};
std::atomic<bool> launches_recorded{false};
thread_local bool deferring = false;
thread_local bool unbacked_results = false;
thread_local bool in_library_step = false;
thread_local bool in_eager_region = false;
thread_local bool running_window = false;
std::atomic<bool> debugging{false};
thread_local int traced_call_depth = 0;
// Written with the settings, under the window lock.
std::atomic<int64_t> min_bytes_to_defer{AdaptiveSettings().min_bytes};
} // namespace detail

namespace {

using detail::traced_call_depth;
// The op whose launches this thread is recording.
thread_local const c10::OperatorHandle* deferred_op = nullptr;

std::recursive_mutex window_mutex;

// The token of the backward pass whose end has a sync queued: alive while that pass's callback
// is (a pass that fails drops its callbacks, and the token expires with them). One per pass; two
// concurrent passes share it, and the window then ends at the first one's end. Guarded by
// `window_mutex`.
std::weak_ptr<void> queued_backward_sync;

// A traced op in a backward pass (on the caller's thread, or on autograd's device thread under
// NEURON_BACKWARD_ON_CALLER=0): the window ends when the pass does, so a training step's backward
// is a window of its own, whatever the optimizer does next.
// The caller holds `window_mutex`.
void syncAtEndOfBackward() {
  if (torch::autograd::get_current_graph_task_nodes_in_graph() == nullptr) return;
  if (!queued_backward_sync.expired()) return;
  auto token = std::make_shared<int>(0);
  queued_backward_sync = token;
  torch::autograd::Engine::get_default_engine().queue_callback(
      [token] { sync(SyncCause::kBackward); });
}

struct Counters {
  int64_t windows = 0;
  int64_t syncs[static_cast<size_t>(SyncCause::kCount)] = {};
  int64_t replays = 0;
  int64_t ops_traced = 0;
  int64_t ops_deferred = 0;
  int64_t ops_replayed = 0;
  int64_t launches_recorded = 0;
  int64_t calls_from_plan_cache = 0;
  int64_t timed_ops = 0;
  int64_t tracing_ns = 0;
  int64_t timed_deferred_ops = 0;
  int64_t recording_ns = 0;
  int64_t debug_batches = 0;
  int64_t debug_mismatches = 0;
  int64_t fused_kernel_runs = 0;
  int64_t fused_reduction_runs = 0;
  int64_t fused_table_launches = 0;
  int64_t fused_kernels_in_tables = 0;
  int64_t accumulating_products = 0;
  int64_t launches_saved = 0;
  int64_t dead_launches = 0;
  int64_t partitions_reused = 0;
  int64_t partitions_computed = 0;
};

struct TracerState {
  CallCacheHooks hooks;
  AdaptiveSettings settings;
  OpWindow window;
  Recurrence recurrence{settings.threshold};
  Counters counters;
};

// Made at first use, never destroyed: ops may be traced during static destruction.
TracerState& state() {
  static MadeOnce<TracerState> instance; // fork-safe (made_once.h): the making registers
  return instance.get([] {
    // The child re-creates the lock rather than unlocking it: a recursive mutex records its
    // owner's thread id, which the child's thread does not have, so its unlock() would fail.
    registerForkHandlers(ForkRank::kTracerWindow,
                         {[] { window_mutex.lock(); }, [] { window_mutex.unlock(); },
                          [] { new (&window_mutex) std::recursive_mutex(); }});
    return new TracerState();
  });
}

std::unique_lock<std::recursive_mutex> lockWindow() {
  TracerState& tracer = state(); // registers the fork handlers before the first lock
  (void)tracer;
  return std::unique_lock<std::recursive_mutex>(window_mutex);
}

// Batches of recorded launches run so far: a call that saw it change while it ran had part of its
// window run under it.
int64_t batches_run = 0;

void runRecordedLaunchesLocked(TracerState& tracer) {
  OpWindow& window = tracer.window;
  // A step of the batch this thread is running (a library step's own eager call) finds it
  // running: the window's references stay until the batch is done.
  if (detail::running_window) return;
  if (window.launches.empty() && window.held.empty()) return;
  // Cleared once the batch has run, not before: another thread's untraced call that checks the
  // flag without the lock (runRecordedLaunches) then waits for the batch on the window lock
  // instead of reading results the batch is still writing or giving memory to.
  struct ClearWhenDone {
    ~ClearWhenDone() { detail::launches_recorded.store(false, std::memory_order_release); }
  } clear_when_done;
  ++batches_run;
  const bool fuse = tracer.settings.fusion;
  // Deterministic mode: which batches run fused must not depend on when compiles finish.
  const bool wait = tracer.settings.sync_compiles || deterministicMode();
  // The batch's trie nodes; the vector goes back to the window afterwards, so the next batch
  // records into its capacity instead of growing one from empty.
  std::vector<const TrieNode*> nodes;
  nodes.swap(window.batch_nodes);
  struct GiveBack {
    std::vector<const TrieNode*>& nodes;
    std::vector<const TrieNode*>& to;
    ~GiveBack() {
      nodes.clear();
      if (to.empty()) to.swap(nodes);
    }
  } give_back{nodes, window.batch_nodes};
  BatchFusion fusion;
  window.runLaunches(fuse, fuse && tracer.settings.accumulate, wait, fusion);
  Counters& counters = tracer.counters;
  counters.fused_kernel_runs += fusion.fused_kernels;
  counters.fused_reduction_runs += fusion.fused_reductions;
  counters.launches_saved += fusion.launches_saved;
  counters.dead_launches += fusion.dead_launches;
  counters.partitions_reused += fusion.partitions_reused;
  counters.partitions_computed += fusion.partitions_computed;
  counters.fused_table_launches += fusion.table_launches;
  counters.fused_kernels_in_tables += fusion.tabled_kernels;
  counters.accumulating_products += fusion.accumulating_products;
  if (fuse &&
      std::any_of(nodes.begin(), nodes.end(), [](const TrieNode* node) { return !node->fusion; })) {
    auto status = std::make_shared<const WindowFusionStatus>(
        std::move(fusion.keys), fusion.runs_nothing || fusion.accumulating_products > 0);
    for (const TrieNode* node : nodes)
      if (!node->fusion) node->fusion = status;
  }
  if (window.debug.empty()) return;
  const std::vector<std::string> differences = window.debug.compareAndReset();
  ++tracer.counters.debug_batches;
  tracer.counters.debug_mismatches += static_cast<int64_t>(differences.size());
  for (const std::string& difference : differences)
    TORCH_WARN(difference);
}

// Under NEURON_ADAPTIVE_DEBUG, what the debug check needs of a deferred call: its arguments as
// they are before it runs, then its results and the launches it recorded (which learn its line).
// A call that recorded launches is rerun eagerly on the CPU at once (debug_check.h).
class DebugRecording {
public:
  DebugRecording(TracerState& tracer, bool defer, c10::ArrayRef<c10::IValue> args,
                 std::string where)
      : active_(defer && tracer.settings.debug) {
    if (!active_) return;
    arguments_ = frozenValues(args);
    launches_before_ = tracer.window.launches.size();
    batches_before_ = batches_run;
    where_ = std::move(where);
  }

  void finish(TracerState& tracer, const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
    if (!active_) return;
    std::vector<DeferredLaunch>& launches = tracer.window.launches;
    const size_t first = batches_run == batches_before_ ? launches_before_ : 0;
    if (launches.size() <= first) return; // it ran eagerly: nothing to check
    for (size_t i = first; i < launches.size(); ++i)
      launches[i].where = where_;
    const size_t returns = std::min(op.schema().returns().size(), stack.size());
    tracer.window.debug.rerun(
        {op, std::move(arguments_), frozenValues(torch::jit::last(stack, returns)), where_});
  }

private:
  bool active_;
  std::vector<c10::IValue> arguments_;
  size_t launches_before_ = 0;
  int64_t batches_before_ = 0;
  std::string where_;
};

// Ends the window: runs its recorded launches, counts its signature, starts the next one.
void syncLocked(TracerState& tracer, SyncCause cause, const c10::OperatorHandle* op) {
  OpWindow& window = tracer.window;
  if (fusedCompileWarningsPending())
    for (const std::string& warning : takeFusedCompileWarnings())
      TORCH_WARN(warning);
  const bool replayed = window.open && window.cursor != nullptr && window.cursor->ends_hot_window &&
                        !window.records.empty() &&
                        window.deferred_ops == static_cast<int64_t>(window.records.size());
  runRecordedLaunchesLocked(tracer);
  if (window.open) {
    Counters& counters = tracer.counters;
    ++counters.windows;
    ++counters.syncs[static_cast<size_t>(cause)];
    if (replayed) {
      ++counters.replays;
      counters.ops_replayed += static_cast<int64_t>(window.records.size());
    }
    // A window an interim launch ended (its op's kernel was compiling) is cut where compiles
    // happened to stand: it is not counted, so a cold start neither makes it hot nor pins its
    // site for the signatures it produced while kernels compiled.
    if (!window.pinned && cause != SyncCause::kInterim)
      tracer.recurrence.countWindow(window.signature, window.records, cause,
                                    op != nullptr ? opName(*op) : std::string(), window.first_op);
  }
  window.resetTrace();
  detail::window_open.store(false, std::memory_order_release);
}

// Adds one op record to the window; true when the call is to be deferred (the window so far
// follows a hot window's records).
bool advance(TracerState& tracer, const c10::OperatorHandle& op, Hash64 record) {
  OpWindow& window = tracer.window;
  if (!window.open) {
    window.open = true;
    detail::window_open.store(true, std::memory_order_release);
    window.first_op = opName(op);
    window.cursor = &tracer.recurrence.root();
  }
  const uint64_t chained[3] = {window.signature.low, window.signature.high, record};
  window.signature = hashBytes128(chained, sizeof chained);
  window.records.push_back(record);
  window.kinds.push_back(&op.schema());
  if (window.cursor == nullptr) return false;
  const TrieNode* next = window.cursor->child(record);
  if (next == nullptr) {
    // Diverged from every hot window: what was recorded runs now, the rest eagerly.
    window.cursor = nullptr;
    runRecordedLaunchesLocked(tracer);
    return false;
  }
  window.cursor = next;
  return true;
}

// Whether the window being recorded will run fused (window_fusion.h): its hot window's fused
// kernels are compiled, or its first batch has not run yet (the probe records everything once
// to find out). Then calls on large tensors are recorded too and pending bytes do not end it.
bool recordingFused(const TracerState& tracer) {
  const TrieNode* node = tracer.window.cursor;
  return tracer.settings.fusion && node != nullptr && (!node->fusion || node->fusion->ready());
}

// Whether the window being recorded will run fused kernels that are all compiled (not the
// probe, whose batch may run op by op): its results may be unbacked (unbacked_results.h).
bool fusionReady(const TracerState& tracer) {
  const TrieNode* node = tracer.window.cursor;
  return tracer.settings.fusion && node != nullptr && node->fusion && node->fusion->ready();
}

// Part 1 records launches to save per-op overhead, which matters for small tensors only. A call
// on a large tensor runs eagerly even in a hot window: recording it would keep its result and
// every intermediate after it alive until the window runs, where eager mode reuses one
// cache-warm block (measured: a 9-op GELU chain on 1M elements took 1.7x longer recorded, on 64K
// elements, 256 KiB per tensor, 0.42-0.67x eager's speed in make bench). Fusion (part 2) removes
// those intermediates instead. The window's byte limit (NEURON_ADAPTIVE_WINDOW_BYTES, 256K by
// default) keeps what smaller recorded calls hold pending about the size of a core's L2.
constexpr int64_t kLargeTensorBytes = 64 << 10;

bool touchesLargeTensor(c10::ArrayRef<c10::IValue> args) {
  return touchesTensorOver(args, kLargeTensorBytes);
}

// Since eager mode replays a recurring call from its call cache (about 1.1 us from Python on this
// machine), recording a deferred call (about 1.9 us: outputs, launches, their sources) is repaid
// only where the fused window saves memory traffic: a GELU chain written as ten ops ran at 0.6x
// eager's speed deferred on 256 to 4K elements, at parity on 16K and 1.6x-2.3x on 64K
// (2026-12-04). So a compiled call is deferred only when one of its tensors holds more than
// NEURON_ADAPTIVE_MIN_BYTES (32 KiB by default); a smaller call runs eagerly, untraced
// (traceCompiledCall), after the launches recorded before it.
bool worthDeferring(int64_t min_bytes, c10::ArrayRef<c10::IValue> args) {
  return min_bytes == 0 || touchesTensorOver(args, min_bytes);
}

// Notes the call's results as outputs of this step (their storages' source for later records).
void noteOutputs(OpWindow& window, const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t returns = op.schema().returns().size();
  const int64_t step = static_cast<int64_t>(window.records.size()) - 1;
  for (size_t i = 0; i < returns && i < stack.size(); ++i) {
    const c10::IValue& value = stack[stack.size() - returns + i];
    auto note = [&](const at::Tensor& t, int64_t slot) {
      if (t.defined() && t.has_storage() && !t.device().is_cpu())
        window.sources.noteOutput(t.storage(), step, slot);
    };
    if (value.isTensor()) {
      note(value.toTensor(), static_cast<int64_t>(i));
    } else if (value.isTensorList()) {
      // A _foreach_* op's results. A source word has 8 bits of slot: element e of return i gets
      // slot i + 16 * (e % 16 + 1) (mod 256), so elements share slots and signatures that differ
      // only there merge (a signature names a window for recurrence; what a window computes
      // comes from the recorded launches themselves).
      const c10::List<at::Tensor> list = value.toTensorList();
      for (size_t e = 0; e < list.size(); ++e)
        note(list.get(e), static_cast<int64_t>(i) | static_cast<int64_t>((e & 15) + 1) << 4);
    }
  }
}

// A deferred call: replayed from its trie node's capture when the metadata match, else from the
// second level's (sizes that cycle), else run (recording its launches) and captured for next
// time.
bool runDeferred(TracerState& tracer, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                 CompiledKernelFunction kernel) {
  const TrieNode* node = tracer.window.cursor;
  const CallCacheHooks& hooks = tracer.hooks;
  if (hooks.replay == nullptr) return kernel(op, stack);
  if (node->captured_call && hooks.replay(node->captured_call.get(), op, stack)) {
    ++tracer.counters.calls_from_plan_cache;
    return true;
  }
  if (hooks.replay_kept != nullptr) {
    if (std::shared_ptr<const void> kept = hooks.replay_kept(op, stack)) {
      node->captured_call = std::move(kept);
      ++tracer.counters.calls_from_plan_cache;
      return true;
    }
  }
  hooks.begin_capture(op, *stack);
  bool ran = false;
  try {
    ran = kernel(op, stack);
  } catch (...) {
    hooks.end_capture(op, *stack, false);
    throw;
  }
  node->captured_call = hooks.end_capture(op, *stack, ran);
  if (hooks.keep != nullptr) hooks.keep(op, node->captured_call);
  return ran;
}

// A window recorded to run fused still allocates every result it records when it records it (a
// fused kernel only skips the stores of those that do not escape) and holds them until its
// launches run: unbounded, a 120-op chain on 4 MiB tensors held all 120 results at its sync
// (about 480 MiB; eager mode holds two). So its launches run once the memory only the window
// holds (OpWindow::bytesHeldOnlyHere: results and inputs nothing outside it references) reaches
// this many times its largest pending result, and kFusedBatchBytes at least: a chain of up to
// that many ops still fuses whole, and one on large tensors holds a bounded multiple of one
// tensor. Results the program still references do not count, since eager mode would hold them
// too (an optimizer step with foreach=True keeps its square roots and denominators for the
// whole model as two lists). That is a batch boundary, not the window's end (its records and
// hot window stay as they are), and it depends on the calls' sizes and on which results the
// program keeps, so every occurrence of the window is split alike and reuses the same fused
// kernels (runLaunchesAtMemoryBound).
constexpr int64_t kFusedBatchResults = 16;
constexpr int64_t kFusedBatchBytes = int64_t{64} << 20;

// Where a window that reached the op limit at `limit` ops ends: after the next op that completes
// a whole number of the loop iterations its last ops repeat, so that the windows of a long loop
// all start at the same place in its body and share one signature (a 10-op loop cut every 512
// ops would start windows at five places, each compiled and fused on its own). The period is
// the shortest with which the last kPeriodEvidence ops (or the whole window, if shorter)
// repeat, at most half of them; none found, or a window longer than that, ends at the limit.
constexpr size_t kPeriodEvidence = 256;

size_t phaseKeepingCut(const OpWindow& window, size_t limit) {
  const std::vector<const void*>& kinds = window.kinds;
  const size_t n = kinds.size();
  const size_t evidence = std::min(n, kPeriodEvidence);
  for (size_t period = 1; period <= evidence / 2; ++period) {
    bool repeats = true;
    for (size_t i = n - evidence + period; i < n && repeats; ++i)
      repeats = kinds[i] == kinds[i - period];
    if (repeats) return std::max(limit, (n + period - 1) / period * period);
  }
  return limit;
}

// Before a traced call records: a window recorded to run fused runs its launches when the memory
// only it holds reached the bound above. Checked before the call rather than after the one that
// reached it, since what reaches it is often the program letting go of a result between two
// calls (the input a layer norm's output replaced, a finished optimizer step's lists): the
// batch then ends where the program's own step ended, not inside the next step's chain (where it
// split a residual add from its layer norm).
// Counting that memory is a pass over what the window holds. While the program keeps most of
// it (activations saved for backward), each check that finds it below the bound doubles the
// traced calls to the next one (up to kMaxMemoryCheckInterval), so a long window does not pay
// the pass on every call; a batch that runs starts them at every call again.
constexpr int64_t kMaxMemoryCheckInterval = 64;

void runLaunchesAtMemoryBound(TracerState& tracer) {
  OpWindow& window = tracer.window;
  if (window.launches.empty() || !recordingFused(tracer)) return;
  const int64_t bound = std::max(kFusedBatchBytes, kFusedBatchResults * window.largest_pending);
  if (window.pending_bytes < bound || window.calls_until_memory_check-- > 0) return;
  if (window.bytesHeldOnlyHere() >= bound) return runRecordedLaunchesLocked(tracer);
  window.memory_check_interval =
      std::min(kMaxMemoryCheckInterval, 2 * window.memory_check_interval);
  window.calls_until_memory_check = window.memory_check_interval - 1;
}

// The start of every traced call: its Python line under NEURON_ADAPTIVE_DEBUG (located before the
// window lock is taken, since the locator takes the GIL), the window lock, in a backward pass
// the end of the pass queued as a sync point, and the fused batch's memory bound.
struct TracedCallStart {
  std::string where;
  std::unique_lock<std::recursive_mutex> lock;
  // Adaptive mode was turned off (set_adaptive(False), from another thread) while this call
  // waited for the window lock: the window has been run and must not take new records, so the
  // call runs untraced.
  bool adaptive_off = false;
};

TracedCallStart beginTracedCall() {
  TracedCallStart begun;
  if (detail::debugging.load(std::memory_order_relaxed)) begun.where = locateSource();
  begun.lock = lockWindow();
  // setAdaptive() stores the flag with the window lock held, so this read sees the last change.
  begun.adaptive_off = !detail::adaptive_on.load(std::memory_order_acquire);
  if (begun.adaptive_off) return begun;
  syncAtEndOfBackward();
  runLaunchesAtMemoryBound(state());
  return begun;
}

// A call too small to defer that adds a result the window has not computed yet into a tensor in
// place (autograd accumulating a bias's gradient) is recorded into the batch rather than run
// after it, untraced: it takes no op record, so the window's signature is what it would be. Run
// eagerly, it would run the batch first and part a weight gradient's product from its own
// accumulation, which autograd often issues after the bias's (accumulating_products.h). Returns
// what the kernel returned, or nothing when the call is not such a call (or the window will not
// run fused): then it runs as any small call.
std::optional<bool> recordSmallAccumulation(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                                            CompiledKernelFunction kernel) {
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, op.schema().arguments().size());
  if (!detail::launches_recorded.load(std::memory_order_acquire) ||
      detail::debugging.load(std::memory_order_relaxed) || !isInPlaceAccumulation(op, args))
    return std::nullopt;
  TracedCallStart begun = beginTracedCall(); // the end of a backward pass ends its window first
  if (begun.adaptive_off) return std::nullopt;
  TracerState& tracer = state();
  const OpWindow& window = tracer.window;
  if (!tracer.settings.accumulate || tracer.settings.debug || !recordingFused(tracer) ||
      !window.touches(args[1].toTensor().storage().unsafeGetStorageImpl()))
    return std::nullopt;
  ++traced_call_depth;
  detail::deferring = true;
  deferred_op = &op;
  struct Restore {
    ~Restore() {
      detail::deferring = false;
      --traced_call_depth;
    }
  } restore;
  return kernel(op, stack);
}

// A window that reached NEURON_ADAPTIVE_WINDOW ops (or the next whole loop iteration after
// them, phaseKeepingCut) or NEURON_ADAPTIVE_WINDOW_BYTES of pending results ends after the op
// that reached it.
// A window recorded to run fused ignores NEURON_ADAPTIVE_WINDOW_BYTES (its intermediates get no
// stores) but ends where its hot window ended by it (and runs its launches at the bound above,
// runLaunchesAtMemoryBound).
void endWindowAtLimits(TracerState& tracer) {
  OpWindow& window = tracer.window;
  const size_t ops = window.records.size();
  if (static_cast<int64_t>(ops) >= tracer.settings.window_ops) {
    if (window.cut_at == 0) window.cut_at = phaseKeepingCut(window, ops);
    if (ops >= window.cut_at) return syncLocked(tracer, SyncCause::kOpLimit, nullptr);
  }
  if (!recordingFused(tracer)) {
    // Products' results, which do not count toward the limit, are still bounded (by the fused
    // batches' bound: a loop of products nothing adds anywhere ends its windows there).
    if (window.bytesTowardTheLimit() >= tracer.settings.window_bytes ||
        window.pending_bytes >= std::max(tracer.settings.window_bytes, kFusedBatchBytes))
      syncLocked(tracer, SyncCause::kByteLimit, nullptr);
    return;
  }
  if (window.cursor->ends_hot_window && window.cursor->cut_by_byte_limit)
    syncLocked(tracer, SyncCause::kByteLimit, nullptr);
}

int64_t nanosecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

// Adds the call's op record to the window (unless its site is pinned); true when the call is
// to be deferred because the window so far follows a hot window's records.
bool traceRecord(TracerState& tracer, const c10::OperatorHandle& op,
                 c10::ArrayRef<c10::IValue> args) {
  OpWindow& window = tracer.window;
  if (window.pinned) return false;
  const Hash64 record = opRecordKey(op, args, window.sources);
  if (!window.open && tracer.recurrence.pinned(record)) {
    window.open = true;
    window.pinned = true;
    detail::window_open.store(true, std::memory_order_release);
    return false;
  }
  return advance(tracer, op, record);
}

} // namespace

namespace detail {

void syncSlow(SyncCause cause, const c10::OperatorHandle* op) {
  auto lock = lockWindow();
  // Inside a traced library call (an element op of a list call on the CPU fallback, a library
  // kernel reading a scalar) the memory must be current, but ending the window would cut the
  // call's own record in two: its launches run, the window goes on.
  if (detail::in_library_step) return runRecordedLaunchesLocked(state());
  syncLocked(state(), cause, op);
}

void runRecordedLaunchesSlow() {
  auto lock = lockWindow();
  runRecordedLaunchesLocked(state());
}

} // namespace detail

void configureFromEnvironment() {
  AdaptiveSettings settings =
      parseAdaptiveSettings([](const char* name) { return std::getenv(name); });
  auto lock = lockWindow();
  TracerState& tracer = state();
  syncLocked(tracer, SyncCause::kAdaptiveOff, nullptr);
  tracer.settings = settings;
  detail::min_bytes_to_defer.store(settings.min_bytes, std::memory_order_relaxed);
  detail::debugging.store(settings.debug, std::memory_order_relaxed);
  tracer.recurrence = Recurrence(settings.threshold);
  detail::adaptive_on.store(settings.enabled, std::memory_order_release);
}

void setCallCacheHooks(const CallCacheHooks& hooks) {
  auto lock = lockWindow();
  state().hooks = hooks;
}

void setAdaptiveDebug(bool enabled) {
  auto lock = lockWindow();
  TracerState& tracer = state();
  syncLocked(tracer, SyncCause::kAdaptiveOff, nullptr);
  tracer.settings.debug = enabled;
  detail::debugging.store(enabled, std::memory_order_relaxed);
}

void setAdaptiveMinBytes(int64_t bytes) {
  if (bytes < 0)
    throw std::invalid_argument("[adaptive] set_adaptive_min_bytes expects 0 or more bytes, got " +
                                std::to_string(bytes));
  auto lock = lockWindow();
  TracerState& tracer = state();
  syncLocked(tracer, SyncCause::kAdaptiveOff, nullptr);
  tracer.settings.min_bytes = bytes;
  detail::min_bytes_to_defer.store(bytes, std::memory_order_relaxed);
}

void setAdaptiveUnbacked(bool enabled) {
  auto lock = lockWindow();
  TracerState& tracer = state();
  syncLocked(tracer, SyncCause::kAdaptiveOff, nullptr);
  tracer.settings.unbacked = enabled;
}

bool adaptiveUnbacked() {
  auto lock = lockWindow();
  return state().settings.unbacked;
}

int64_t adaptiveMinBytes() {
  auto lock = lockWindow();
  return state().settings.min_bytes;
}

void setAdaptiveFusion(bool fuse, std::optional<bool> wait_for_compiles) {
  auto lock = lockWindow();
  TracerState& tracer = state();
  syncLocked(tracer, SyncCause::kAdaptiveOff, nullptr);
  tracer.settings.fusion = fuse;
  if (wait_for_compiles) tracer.settings.sync_compiles = *wait_for_compiles;
}

bool adaptiveDebug() {
  auto lock = lockWindow();
  return state().settings.debug;
}

void setAdaptive(bool enabled) {
  auto lock = lockWindow();
  if (!enabled) syncLocked(state(), SyncCause::kAdaptiveOff, nullptr);
  detail::adaptive_on.store(enabled, std::memory_order_release);
}

namespace {

// Runs `call` (a device call that takes no record) after the launches recorded so far (it may
// read or overwrite what they use), with the device calls it makes untraced too.
template <typename Call> auto runUntraced(Call call) {
  runRecordedLaunches();
  ++traced_call_depth;
  struct Restore {
    ~Restore() { --traced_call_depth; }
  } restore;
  return call();
}

// A compiled call that takes no record: it runs as eager mode runs it (its call cache).
bool runUntracedCall(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                     CompiledKernelFunction kernel) {
  auto run_eager = state().hooks.run_eager; // set once, before any device call
  return runUntraced(
      [&] { return run_eager != nullptr ? run_eager(op, stack, kernel) : kernel(op, stack); });
}

} // namespace

bool traceCompiledCall(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                       CompiledKernelFunction kernel) {
  if (traced_call_depth > 0) return kernel(op, stack);
  // A call too small to be worth deferring (worthDeferring) is not traced either: the tracer's
  // bookkeeping (the window lock, the record's hash and trie step, its outputs' notes) cost about
  // a fifth of such a call replayed by the eager call cache. It runs eagerly after the launches
  // recorded so far (it may read what they write), takes no place in the window's records (a
  // result of it that a later recorded call reads is a window input there), and is not counted
  // in metrics()["adaptive"].
  if (!worthDeferring(detail::min_bytes_to_defer.load(std::memory_order_relaxed),
                      torch::jit::last(*stack, op.schema().arguments().size()))) {
    if (std::optional<bool> ran = recordSmallAccumulation(op, stack, kernel)) return *ran;
    return runUntracedCall(op, stack, kernel);
  }
  TracedCallStart begun = beginTracedCall();
  if (begun.adaptive_off) {
    begun.lock.unlock();
    return runUntracedCall(op, stack, kernel);
  }
  std::string& where = begun.where;
  TracerState& tracer = state();
  OpWindow& window = tracer.window;
  Counters& counters = tracer.counters;
  const bool timed = (counters.ops_traced++ & 15) == 0;
  const auto start =
      timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();

  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, op.schema().arguments().size());
  const bool defer =
      traceRecord(tracer, op, args) && (recordingFused(tracer) || !touchesLargeTensor(args));
  if (defer) {
    ++window.deferred_ops;
    window.batch_nodes.push_back(window.cursor);
  } else
    runRecordedLaunchesLocked(tracer);
  DebugRecording debug(tracer, defer, args, std::move(where));

  const auto kernel_start = timed ? std::chrono::steady_clock::now() : start;
  if (defer) deferred_op = &op;
  // An in-place add of a recorded product's result, which the product may absorb
  // (accumulating_products.h), noted on its one launch.
  std::shared_ptr<const InPlaceAccumulation> accumulation =
      defer && !window.product_results.empty()
          ? inPlaceAccumulationOf(op, args, window.product_results)
          : nullptr;
  const size_t launches_before = window.launches.size();
  bool ran;
  {
    ++traced_call_depth;
    detail::deferring = defer;
    detail::unbacked_results =
        defer && tracer.settings.unbacked && fusionReady(tracer) && !detail::debugging.load();
    struct Restore {
      ~Restore() {
        detail::deferring = false;
        detail::unbacked_results = false;
        --traced_call_depth;
      }
    } restore;
    ran = defer                               ? runDeferred(tracer, op, stack, kernel)
          : tracer.hooks.run_eager != nullptr ? tracer.hooks.run_eager(op, stack, kernel)
                                              : kernel(op, stack);
  }
  const int64_t kernel_ns = timed ? nanosecondsSince(kernel_start) : 0;
  if (!ran) return false;
  if (accumulation && window.launches.size() == launches_before + 1 &&
      !window.launches.back().host_step &&
      window.launches.back().output_storage ==
          accumulation->target.storage().unsafeGetStorageImpl())
    window.launches.back().accumulation = std::move(accumulation);
  debug.finish(tracer, op, *stack);
  if (!window.pinned) noteOutputs(window, op, *stack);
  if (defer) ++counters.ops_deferred;

  if (timed) {
    const int64_t total_ns = nanosecondsSince(start);
    counters.tracing_ns += total_ns - kernel_ns;
    ++counters.timed_ops;
    if (defer) {
      counters.recording_ns += total_ns;
      ++counters.timed_deferred_ops;
    }
  }
  endWindowAtLimits(tracer);
  return true;
}

void traceLibraryCall(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      LibraryKernelFunction kernel) {
  if (traced_call_depth > 0) return kernel(op, stack);
  // A call too small to be worth deferring runs eagerly and untraced, as a small compiled call
  // does (traceCompiledCall), after the launches recorded so far. Deferred, a library step is
  // never fused, so it gained nothing, and its record, the window it kept open and that
  // window's run cost more than the call: a small regression model's training step (five
  // products of a few hundred elements) ran at 0.75x eager's speed.
  auto untraced = [&] { runUntraced([&] { kernel(op, stack); }); };
  if (!worthDeferring(detail::min_bytes_to_defer.load(std::memory_order_relaxed),
                      torch::jit::last(*stack, op.schema().arguments().size())))
    return untraced();
  TracedCallStart begun = beginTracedCall();
  if (begun.adaptive_off) {
    begun.lock.unlock();
    return untraced();
  }
  std::string& where = begun.where;
  TracerState& tracer = state();
  OpWindow& window = tracer.window;
  ++tracer.counters.ops_traced;
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, op.schema().arguments().size());
  const bool defer = traceRecord(tracer, op, args);
  if (defer) {
    ++window.deferred_ops;
    window.batch_nodes.push_back(window.cursor);
    deferred_op = &op;
  }
  DebugRecording debug(tracer, defer, args, std::move(where));
  {
    ++traced_call_depth;
    detail::deferring = defer;
    detail::in_library_step = true;
    struct Restore {
      ~Restore() {
        detail::deferring = false;
        detail::in_library_step = false;
        --traced_call_depth;
      }
    } restore;
    kernel(op, stack);
  }
  debug.finish(tracer, op, *stack);
  if (!window.pinned) noteOutputs(window, op, *stack);
  if (defer) ++tracer.counters.ops_deferred;
  endWindowAtLimits(tracer);
}

void recordHostStep(std::function<void()> step, at::ArrayRef<at::Tensor> inputs,
                    at::ArrayRef<at::Tensor> outputs,
                    std::shared_ptr<const AccumulatingProduct> product) {
  auto lock = lockWindow();
  TracerState& tracer = state();
  OpWindow& window = tracer.window;
  DeferredLaunch launch;
  for (const at::Tensor& t : inputs) {
    if (!t.defined() || !t.has_storage() || t.device().is_cpu()) continue;
    window.held.push_back(t.storage());
    launch.storages.push_back(t.storage().unsafeGetStorageImpl());
  }
  // A product's result does not count toward the window's byte limit when an in-place add may
  // absorb it (accumulating_products.h): the limit would otherwise end a window between a weight
  // gradient's product and its accumulation, whatever its size (the limit keeps recorded
  // elementwise results near a core's L2; a product's result is BLAS's, as large as it is). It
  // still counts toward the memory bounds (endWindowAtLimits, runLaunchesAtMemoryBound).
  const bool absorbable = product && tracer.settings.accumulate && tracer.settings.fusion;
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || !t.has_storage()) continue;
    window.held.push_back(t.storage());
    const auto bytes = static_cast<int64_t>(t.storage().nbytes());
    window.notePending(bytes);
    if (absorbable) {
      window.product_bytes += bytes;
      window.product_results.push_back(t.storage().unsafeGetStorageImpl());
    }
    launch.storages.push_back(t.storage().unsafeGetStorageImpl());
  }
  if (!absorbable) product.reset();
  launch.host_step = std::move(step);
  launch.product = std::move(product);
  if (deferred_op != nullptr) launch.op = *deferred_op;
  window.launches.push_back(std::move(launch));
  ++tracer.counters.launches_recorded;
  detail::window_open.store(true, std::memory_order_release);
  detail::launches_recorded.store(true, std::memory_order_release);
}

EagerRegion::EagerRegion() : outermost_(!detail::in_eager_region) {
  if (!outermost_) return;
  sync(SyncCause::kEagerRegion);
  detail::in_eager_region = true;
}

EagerRegion::~EagerRegion() {
  if (outermost_) detail::in_eager_region = false;
}

EagerLibraryStep::EagerLibraryStep()
    : active_(detail::in_library_step), was_deferring_(detail::deferring) {
  if (active_) detail::deferring = false;
}

EagerLibraryStep::~EagerLibraryStep() {
  if (active_) detail::deferring = was_deferring_;
}

void beforeHostAccessSlow(const c10::Storage& storage) {
  if (detail::running_window) return;
  auto lock = lockWindow();
  TracerState& tracer = state();
  if (!detail::in_library_step) return syncLocked(tracer, SyncCause::kHostAccess, nullptr);
  if (tracer.window.touches(storage.unsafeGetStorageImpl())) runRecordedLaunchesLocked(tracer);
}

void recordPlanOperands(at::ArrayRef<at::Tensor> inputs, at::ArrayRef<at::Tensor> outputs,
                        c10::ArrayRef<bool> allocated) {
  auto lock = lockWindow();
  OpWindow& window = state().window;
  for (const at::Tensor& t : inputs) {
    if (!t.defined() || !t.has_storage()) continue;
    if (t.device().is_cpu())
      window.held_host_values.push_back(t);
    else
      window.held.push_back(t.storage());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& t = outputs[i];
    if (!t.defined() || !t.has_storage()) continue;
    window.held.push_back(t.storage());
    // A result written into a tensor the call was given (in place, out=) holds no memory the
    // caller did not hold already: an optimizer step's in-place updates of every parameter
    // would otherwise end each batch after a few parameters, before their chains could fuse.
    if (i < allocated.size() && allocated[i])
      window.notePending(static_cast<int64_t>(t.storage().nbytes()));
  }
  detail::window_open.store(true, std::memory_order_release);
  detail::launches_recorded.store(true, std::memory_order_release);
}

void noteListCall() {
  auto lock = lockWindow();
  state().window.regroup_chains = true;
}

void recordLaunch(KernelHandle kernel, const int64_t* slots, int64_t slot_count,
                  const LaunchShape& shape, std::atomic<int64_t>* counter,
                  const RecordedOperands& operands) {
  auto lock = lockWindow();
  TracerState& tracer = state();
  if (tracer.window.launches.capacity() == 0) tracer.window.launches.reserve(64);
  // Built in place (it is large); a copy that runs out of memory takes it out again, so the
  // window never holds a launch with half its arguments.
  DeferredLaunch& launch = tracer.window.launches.emplace_back();
  try {
    launch.slots.assign(slots, slots + slot_count);
    launch.storages = operands.storages;
    launch.memref_places = operands.memref_places;
    launch.pointer_slots = operands.pointer_slots;
  } catch (...) {
    tracer.window.launches.pop_back();
    throw;
  }
  launch.kernel = std::move(kernel);
  launch.shape = shape;
  launch.elementwise = operands.elementwise;
  launch.reduction = operands.reduction;
  launch.output_storage = operands.output_storage;
  counter->fetch_add(1, std::memory_order_relaxed); // counted when recorded: it will run
  if (deferred_op != nullptr) launch.op = *deferred_op;
  ++tracer.counters.launches_recorded;
  detail::window_open.store(true, std::memory_order_release);
  detail::launches_recorded.store(true, std::memory_order_release);
}

AdaptiveStats adaptiveStats() {
  auto lock = lockWindow();
  TracerState& tracer = state();
  const Counters& counters = tracer.counters;
  AdaptiveStats stats;
  stats.enabled = adaptiveEnabled();
  stats.threshold = tracer.settings.threshold;
  stats.windows = counters.windows;
  for (size_t i = 0; i < static_cast<size_t>(SyncCause::kCount); ++i)
    stats.syncs[syncCauseName(static_cast<SyncCause>(i))] = counters.syncs[i];
  const RecurrenceCounts recurrence = tracer.recurrence.counts();
  stats.signatures_cold = recurrence.cold;
  stats.signatures_hot = recurrence.hot;
  stats.pinned_sites = recurrence.pinned_sites;
  stats.replays = counters.replays;
  stats.ops_traced = counters.ops_traced;
  stats.ops_deferred = counters.ops_deferred;
  stats.ops_replayed = counters.ops_replayed;
  stats.launches_recorded = counters.launches_recorded;
  stats.calls_from_plan_cache = counters.calls_from_plan_cache;
  stats.launches_saved = counters.launches_saved;
  stats.fused_kernel_runs = counters.fused_kernel_runs;
  stats.fused_reduction_runs = counters.fused_reduction_runs;
  stats.fused_table_launches = counters.fused_table_launches;
  stats.fused_kernels_in_tables = counters.fused_kernels_in_tables;
  stats.accumulating_products = counters.accumulating_products;
  stats.dead_launches = counters.dead_launches;
  const UnbackedStats unbacked = unbackedStats();
  stats.unbacked_results_available = unbackedResultsAvailable();
  stats.unbacked_results = unbacked.made;
  stats.unbacked_results_backed = unbacked.backed;
  stats.unbacked_results_live = unbacked.live;
  stats.partitions_reused = counters.partitions_reused;
  stats.partitions_computed = counters.partitions_computed;
  const FusedKernelStats fused = fusedKernelStats();
  stats.fused_compiles = fused.compiles;
  stats.fused_compile_failures = fused.failures;
  stats.fused_compiles_queued = fused.queued;
  stats.debug = tracer.settings.debug;
  stats.debug_batches = counters.debug_batches;
  stats.debug_mismatches = counters.debug_mismatches;
  if (counters.timed_ops > 0)
    stats.tracing_ns_per_op = static_cast<double>(counters.tracing_ns) / counters.timed_ops;
  if (counters.timed_deferred_ops > 0)
    stats.recording_ns_per_op =
        static_cast<double>(counters.recording_ns) / counters.timed_deferred_ops;
  return stats;
}

void resetAdaptiveStats() {
  auto lock = lockWindow();
  state().counters = Counters();
  resetUnbackedCounts();
}

std::vector<SignatureSummary> frequentSignatures(size_t count) {
  auto lock = lockWindow();
  std::vector<SignatureSummary> summaries;
  for (const auto& [signature, stats] : state().recurrence.mostFrequent(count))
    summaries.push_back({signature.hex(), stats.occurrences, stats.hot});
  return summaries;
}

std::string explain(size_t windows) {
  auto lock = lockWindow();
  TracerState& tracer = state();
  std::ostringstream text;
  text << "[adaptive] " << (adaptiveEnabled() ? "on" : "off") << ", threshold "
       << tracer.settings.threshold << "; the most frequent windows:\n";
  for (const auto& [signature, stats] : tracer.recurrence.mostFrequent(windows)) {
    text << "  " << signature.hex().substr(0, 12) << "  " << stats.occurrences << "x  " << stats.ops
         << " ops from " << stats.first_op << ", " << (stats.hot ? "hot" : "cold") << ", ended by "
         << syncCauseName(stats.ended_by);
    if (!stats.ending_op.empty()) text << " (" << stats.ending_op << ")";
    text << "\n";
  }
  for (const auto& [site, first_op] : tracer.recurrence.pinnedSites())
    text << "  pinned: windows starting with " << first_op << " gave more than "
         << Recurrence::kSignaturesPerSite << " signatures, none recurring\n";
  return text.str();
}

} // namespace torchneuron::tracer

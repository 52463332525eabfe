#pragma once
// The op window (DESIGN.md decision 4): the launches recorded since the last sync point, not run
// yet, with the storages they read and write held alive, and the window's signature so far.
// Outputs of recorded launches are ordinary device tensors whose storage is allocated at record
// time and whose contents are pending until the window flushes.
//
// Locking: one window per process, guarded by the tracer's window lock (tracer.cpp). Ops of
// every thread (the script's, another Python thread's, autograd's device thread under
// NEURON_BACKWARD_ON_CALLER=0) record into it in the order they take the lock, which is program
// order: a thread that uses another thread's result synchronized with it after that thread's record
// released the lock.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Storage.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/kernel_signature.h"
#include "launcher/parallel_launch.h"
#include "support/hash.h"
#include "tracer/accumulating_products.h"
#include "tracer/debug_check.h"
#include "tracer/op_record.h"
#include "tracer/partition_memo.h"
#include "tracer/recurrence.h"

namespace torchneuron::tracer {

// One step recorded for later: a kernel launch, whose argument slots hold the operands'
// addresses (valid because the window holds their storages), or a library step (`host_step`,
// which owns its tensors).
struct DeferredLaunch {
  KernelHandle kernel; // keeps the code linked
  c10::SmallVector<int64_t, 40> slots;
  LaunchShape shape;
  std::function<void()> host_step;       // set for a library step; then kernel is null
  c10::optional<c10::OperatorHandle> op; // to name it in errors
  std::string where;                     // its Python source line (NEURON_ADAPTIVE_DEBUG)
  // For the partitioner (fusion/window_partition.h): the signature of an elementwise launch
  // (interned), the storage of its output, and every device storage the step touches.
  const fusion::ElementwiseSignature* elementwise = nullptr;
  const fusion::ReductionSignature* reduction = nullptr; // a reduction launch's (interned)
  const void* output_storage = nullptr;
  c10::SmallVector<const void*, 4> storages;
  c10::SmallVector<int64_t, 4> memref_places;  // RecordedOperands::memref_places
  c10::SmallVector<uint32_t, 4> pointer_slots; // RecordedOperands::pointer_slots
  // The independent chain the step belongs to, once its batch was regrouped
  // (independent_chains.h): steps of different chains share no storage, so their fused kernels
  // run as one table launch. kNoChain: not regrouped.
  uint32_t chain = kNoChain;
  static constexpr uint32_t kNoChain = 0xffffffffu;
  // A matrix product's step that can add itself into a tensor, and a launch that adds a tensor
  // into another in place (accumulating_products.h): null for every other step.
  std::shared_ptr<const AccumulatingProduct> product;
  std::shared_ptr<const InPlaceAccumulation> accumulation;
};

struct BatchFusion;

class OpWindow {
public:
  // State of the window being traced since the last sync point.
  bool open = false;   // an op was traced since the last sync
  bool pinned = false; // its site is pinned: nothing is hashed or counted
  Hash128 signature;   // chained over the op records
  std::vector<Hash64> records;
  // Per record, the op's identity alone (its schema's address): what repeats with a loop's
  // period, where records (which name their operands' sources) need not.
  std::vector<const void*> kinds;
  size_t cut_at = 0;    // the op count the op limit ends the window at, once it was reached
  std::string first_op; // for explain()
  const TrieNode* cursor = nullptr; // position among hot windows; nullptr once diverged
  int64_t deferred_ops = 0;         // ops whose launches were recorded rather than run
  SourceTable sources;

  // Launches recorded and not yet run, and what they need alive.
  std::vector<DeferredLaunch> launches;
  std::vector<c10::Storage> held;
  std::vector<at::Tensor> held_host_values; // copies of CPU numbers the kernels read
  // The storages of the recorded products' results an in-place add may absorb
  // (accumulating_products.h): only an add of one of them is noted as an accumulation.
  c10::SmallVector<const void*, 8> product_results;
  int64_t pending_bytes = 0; // bytes of the results recorded (their storages)
  // Of those, the results of matrix products an in-place add may absorb
  // (accumulating_products.h): held like the others, but not counted toward the window's byte
  // limit.
  int64_t product_bytes = 0;
  int64_t largest_pending = 0; // the largest of them
  bool regroup_chains = false; // a list call recorded launches: regroup the batch (noteListCall)
  DebugShadow debug;           // the recorded calls' eager twin, under NEURON_ADAPTIVE_DEBUG
  PartitionMemo partitions;    // how batches of each structure were partitioned (fusion)

  // Counts a result of a recorded call (its storage's bytes) as pending until the window runs.
  void notePending(int64_t bytes) {
    pending_bytes += bytes;
    largest_pending = std::max(largest_pending, bytes);
  }
  // The bytes toward NEURON_ADAPTIVE_WINDOW_BYTES: the pending results but the products'.
  int64_t bytesTowardTheLimit() const { return pending_bytes - product_bytes; }
  // Whether a recorded launch not yet run reads or writes `storage`.
  bool touches(const c10::StorageImpl* storage) const;
  // Bytes of the held storages nothing outside the window references (dead tensors' memory the
  // window keeps until it runs): one pass over `held` and the recorded library steps. Under
  // NEURON_ADAPTIVE_DEBUG the debug check's copies of arguments count as outside references.
  // The tracer calls it at most every `memory_check_interval` traced calls (tracer.cpp).
  int64_t bytesHeldOnlyHere() const;
  int64_t memory_check_interval = 1; // traced calls between two calls of bytesHeldOnlyHere
  int64_t calls_until_memory_check = 0;
  // The trie nodes of the calls whose launches are recorded and not run yet (tracer.cpp gives
  // them their fusion status when the batch runs).
  std::vector<const TrieNode*> batch_nodes;

  // Runs the recorded launches in order, then lets go of what they held. With `fuse`, groups of
  // elementwise launches run as one fused kernel once it is compiled (`wait`: compile it now)
  // and launches whose results are dead are skipped (window_fusion.h); with `accumulate`,
  // matrix products add themselves into the in-place adds of their results
  // (accumulating_products.h). `fusion` says what was done, before anything runs. A launch that
  // throws drops the rest (they may read its result) and rethrows, naming the op.
  void runLaunches(bool fuse, bool accumulate, bool wait, BatchFusion& fusion);
  // Forgets the traced state (not the launches) for the next window.
  void resetTrace();

private:
  // After a batch failed: lets go of what the window held (results the program holds get
  // memory first, result_backing.h).
  void dropAfterFailure();
};

// "aten::add.Tensor".
std::string opName(const c10::OperatorHandle& op);

} // namespace torchneuron::tracer

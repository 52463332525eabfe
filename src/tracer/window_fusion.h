#pragma once
// How one batch of a window's recorded launches runs (op_window.cpp): the partitioner
// (fusion/window_partition.h) groups its elementwise launches into fused kernels and finds the
// launches whose results nobody can read; this schedule says, per launch, whether it runs as
// recorded, is skipped, or starts a fused kernel that replaces its group. A group whose fused
// kernel is still compiling (fused_kernels.h) runs as recorded.

#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/window_partition.h"
#include "launcher/parallel_launch.h"

namespace torchneuron::tracer {

struct DeferredLaunch;
class PartitionMemo;

// What fusion did with one batch (metrics()["adaptive"], and the trie nodes' fusion status).
struct BatchFusion {
  int64_t fused_kernels = 0;         // fused kernels run
  int64_t fused_reductions = 0;      // those of them that were a reduction with its prologue
  int64_t launches_saved = 0;        // recorded launches not run (replaced by them, or dead)
  int64_t dead_launches = 0;         // skipped: their results are dead
  int64_t partitions_reused = 0;     // 1: the batch's partition was remembered (partition_memo.h)
  int64_t partitions_computed = 0;   // 1: the partitioner ran on it
  std::vector<Hash64> keys;          // the fused kernels the batch's groups need, compiled or not
  bool runs_nothing = false;         // every launch of the batch was dead
  int64_t table_launches = 0;        // table launches of the fused kernels of independent chains
  int64_t tabled_kernels = 0;        // the fused kernels they ran
  int64_t accumulating_products = 0; // products added into a tensor (accumulating_products.h)
};

class BatchSchedule {
public:
  enum Action : uint8_t { kRun, kSkip, kFused };

  struct FusedLaunch {
    KernelHandle kernel;
    c10::SmallVector<int64_t, 64> slots;
    LaunchShape shape;
    // The group it runs, whose slot ranges say where `slots` came from; valid until the memo
    // partitions the next batch.
    const fusion::FusedGroup* group = nullptr;
  };

  BatchSchedule() = default;
  // `held`: the storages the window holds, one reference per entry; a storage with no other
  // reference is dead outside the window. `wait`: compile fused kernels now (NEURON_ADAPTIVE_SYNC).
  // `memo`: the window's remembered partitions (partition_memo.h).
  BatchSchedule(const std::vector<DeferredLaunch>& launches, const std::vector<c10::Storage>& held,
                bool wait, PartitionMemo& memo);

  Action action(size_t launch) const { return actions_.empty() ? kRun : actions_[launch]; }
  const FusedLaunch& fused(size_t launch) const { return fused_[fused_index_[launch]]; }
  FusedLaunch& fused(size_t launch) { return fused_[fused_index_[launch]]; }

  BatchFusion summary() const {
    return {
        static_cast<int64_t>(fused_.size()), reductions_, saved_, dead_, reused_, computed_, keys_};
  }

private:
  std::vector<Action> actions_;
  std::vector<uint32_t> fused_index_;
  std::vector<FusedLaunch> fused_;
  std::vector<Hash64> keys_;
  int64_t reductions_ = 0;
  int64_t saved_ = 0;
  int64_t dead_ = 0;
  int64_t reused_ = 0, computed_ = 0;
};

// What fusion found for a hot window, remembered on the trie nodes of its ops (recurrence.h) so
// that the tracer knows, op by op, whether the window it is recording will run fused: then a
// call on a large tensor is recorded too, and the window's pending bytes do not end it (its
// intermediates get no stores). Until a window's first batch ran, its nodes have no status, and
// the tracer records everything once to find out (the probe).
class WindowFusionStatus {
public:
  // `keys`: the fused kernels its batch needed; `saves_without_kernels`: it saves work with
  // none, because every launch of its batch was dead (a program that drops what it computed)
  // or a product added itself into a tensor (accumulating_products.h).
  WindowFusionStatus(std::vector<Hash64> keys, bool saves_without_kernels)
      : keys_(std::move(keys)), saves_without_kernels_(saves_without_kernels) {}
  // The window has fused kernels and all of them are compiled, or saves work without any. Asks
  // the compile table until they are; a failed compile makes it false for good.
  bool ready() const;

private:
  std::vector<Hash64> keys_;
  bool saves_without_kernels_ = false;
  mutable bool ready_ = false;
  mutable bool failed_ = false;
};

} // namespace torchneuron::tracer

#include "tracer/window_fusion.h"

#include <algorithm>

#include "tracer/fused_kernels.h"
#include "tracer/op_window.h"

namespace torchneuron::tracer {

BatchSchedule::BatchSchedule(const std::vector<DeferredLaunch>& launches,
                             const std::vector<c10::Storage>& held, bool wait,
                             PartitionMemo& memo) {
  bool reused = false;
  RememberedPartition* remembered = memo.partition(launches, held, reused);
  if (remembered == nullptr) return;
  reused_ = reused ? 1 : 0;
  computed_ = reused ? 0 : 1;
  const fusion::PartitionResult& partition = remembered->result;
  if (partition.groups.empty() && partition.dead_launches.empty()) return;

  actions_.assign(launches.size(), kRun);
  fused_index_.assign(launches.size(), 0);
  for (size_t dead : partition.dead_launches) {
    actions_[dead] = kSkip;
    ++dead_;
  }
  for (size_t g = 0; g < partition.groups.size(); ++g) {
    const fusion::FusedGroup& group = partition.groups[g];
    if (group.signature.members.empty() && !group.signature.consumer) { // every result dead
      for (size_t i = group.first; i < group.first + group.count; ++i)
        actions_[i] = kSkip;
      dead_ += static_cast<int64_t>(group.count);
      continue;
    }
    const Hash64 key = remembered->keys[g];
    keys_.push_back(key);
    KernelHandle& kernel = remembered->kernels[g];
    if (!kernel) kernel = fusedKernel(group.signature, key, wait);
    if (!kernel) continue; // compiling: the group runs as recorded this time
    FusedLaunch fused;
    fused.kernel = kernel;
    fused.group = &group;
    group.gatherSlots([&](size_t i) { return launches[i].slots.data(); }, fused.slots);
    fused.shape = launches[group.shape_launch].shape;
    if (group.range > 0) { // the same work over the kernel's own outer dimension
      fused.shape.work_per_index =
          std::max<int64_t>(1, fused.shape.range * fused.shape.work_per_index / group.range);
      fused.shape.range = group.range;
    }
    // The launcher's cost estimate: every member's work happens in the one loop (a prologue
    // fusion's members once per element of its reduction's work, which counts every element).
    if (!group.signature.consumer) fused.shape.work_per_index *= static_cast<int64_t>(group.count);
    // In place of the group's last launch, after its holes (window_partition.h).
    const size_t last = group.first + group.count - 1;
    for (size_t i = group.first; i < last; ++i)
      actions_[i] = kSkip;
    for (size_t hole : group.holes)
      actions_[hole] = kRun;
    actions_[last] = kFused;
    fused_index_[last] = static_cast<uint32_t>(fused_.size());
    fused_.push_back(std::move(fused));
    saved_ += static_cast<int64_t>(group.count - group.holes.size()) - 1;
    if (group.signature.consumer) ++reductions_;
  }
  saved_ += dead_;
}

bool WindowFusionStatus::ready() const {
  if (ready_ || failed_) return ready_;
  if (keys_.empty()) return ready_ = saves_without_kernels_;
  for (Hash64 key : keys_) {
    const FusedKernelState state = fusedKernelState(key);
    if (state == FusedKernelState::kFailed) failed_ = true;
    if (state != FusedKernelState::kReady) return false;
  }
  ready_ = true;
  return true;
}

} // namespace torchneuron::tracer

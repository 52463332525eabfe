#include "tracer/window_fusion.h"

#include <unordered_map>

#include "fusion/window_partition.h"
#include "tracer/fused_kernels.h"
#include "tracer/op_window.h"

namespace torchneuron::tracer {

BatchSchedule::BatchSchedule(const std::vector<DeferredLaunch>& launches,
                             const std::vector<c10::Storage>& held, bool wait) {
  size_t fusible = 0;
  for (const DeferredLaunch& launch : launches)
    fusible += launch.elementwise != nullptr;
  if (fusible == 0) return;

  // A storage escapes the window when something besides the window's own references holds it
  // (a tensor of the program, autograd's saved tensors, a library step's captured operands).
  std::unordered_map<const void*, size_t> held_references;
  for (const c10::Storage& storage : held)
    ++held_references[storage.unsafeGetStorageImpl()];
  auto escapes = [&](const void* storage) {
    auto found = held_references.find(storage);
    if (found == held_references.end()) return true; // not held: not the window's to judge
    const auto* impl = static_cast<const c10::StorageImpl*>(storage);
    return c10::raw::intrusive_ptr::use_count(const_cast<c10::StorageImpl*>(impl)) > found->second;
  };

  std::vector<fusion::PartitionLaunch> views(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const DeferredLaunch& launch = launches[i];
    fusion::PartitionLaunch& view = views[i];
    view.storages = launch.storages;
    if (launch.elementwise == nullptr || launch.host_step) continue;
    view.elementwise = launch.elementwise;
    view.slots = launch.slots.data();
    view.output_storage = launch.output_storage;
    view.output_escapes = escapes(launch.output_storage);
  }
  const fusion::PartitionResult partition = fusion::partitionWindow(views);
  if (partition.groups.empty() && partition.dead_launches.empty()) return;

  actions_.assign(launches.size(), kRun);
  fused_index_.assign(launches.size(), 0);
  for (size_t dead : partition.dead_launches) {
    actions_[dead] = kSkip;
    ++dead_;
  }
  for (const fusion::FusedGroup& group : partition.groups) {
    if (group.signature.members.empty()) { // every result dead
      for (size_t i = group.first; i < group.first + group.count; ++i)
        actions_[i] = kSkip;
      dead_ += static_cast<int64_t>(group.count);
      continue;
    }
    const Hash64 key = group.signature.key();
    keys_.push_back(key);
    KernelHandle kernel = fusedKernel(group.signature, key, wait);
    if (!kernel) continue; // compiling: the group runs as recorded this time
    FusedLaunch fused;
    fused.kernel = std::move(kernel);
    fused.slots = group.slots;
    fused.shape = launches[group.first].shape;
    // The launcher's cost estimate: every member's work happens in the one loop.
    fused.shape.work_per_index *= static_cast<int64_t>(group.count);
    actions_[group.first] = kFused;
    fused_index_[group.first] = static_cast<uint32_t>(fused_.size());
    fused_.push_back(std::move(fused));
    for (size_t i = group.first + 1; i < group.first + group.count; ++i)
      actions_[i] = kSkip;
    saved_ += static_cast<int64_t>(group.count) - 1;
  }
  saved_ += dead_;
}

bool WindowFusionStatus::ready() const {
  if (ready_ || failed_ || keys_.empty()) return ready_;
  for (Hash64 key : keys_) {
    const FusedKernelState state = fusedKernelState(key);
    if (state == FusedKernelState::kFailed) failed_ = true;
    if (state != FusedKernelState::kReady) return false;
  }
  ready_ = true;
  return true;
}

} // namespace torchneuron::tracer

#include "tracer/op_window.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>

#include "fusion/window_partition.h"
#include "target/target.h"
#include "tracer/accumulating_products.h"
#include "tracer/independent_chains.h"
#include "tracer/result_backing.h"
#include "tracer/tracer.h"
#include "tracer/window_fusion.h"

namespace torchneuron::tracer {
namespace {

// The fused kernels of consecutive independent chains (an optimizer step's parameters), held to
// run as one table launch (launcher/table_launch.h). Chains are numbered in batch order
// (independent_chains.h) and a fused group covers a run of them (one chain, or the end of one,
// several whole ones and the start of another when the partitioner joins equal iteration spaces):
// a group whose first chain is the table's last continues that chain and runs the table first;
// any other covers chains no kernel in the table touches.
class ChainTable {
public:
  explicit ChainTable(BatchFusion& fusion) : fusion_(fusion) {}

  void add(const BatchSchedule::FusedLaunch& fused, uint32_t first_chain, uint32_t last_chain) {
    if (first_chain == last_chain_) run();
    entries_.push_back({fused.kernel->function, fused.slots.data(), fused.shape.range,
                        fused.shape.work_per_index});
    last_chain_ = last_chain;
    threads_ = fused.shape.threads;
  }

  void run() {
    if (entries_.size() > 1) {
      deviceTarget().launchTable(entries_.data(), entries_.size(), threads_);
      ++fusion_.table_launches;
      fusion_.tabled_kernels += static_cast<int64_t>(entries_.size());
    } else if (entries_.size() == 1) {
      const TableEntry& only = entries_.front();
      deviceTarget().launch(only.kernel, only.slots,
                            LaunchShape{only.range, only.work_per_index, threads_});
    }
    entries_.clear();
    last_chain_ = DeferredLaunch::kNoChain;
  }

private:
  BatchFusion& fusion_;
  std::vector<TableEntry> entries_;
  uint32_t last_chain_ = DeferredLaunch::kNoChain;
  int threads_ = 1;
};

} // namespace

std::string opName(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool OpWindow::touches(const c10::StorageImpl* storage) const {
  if (launches.empty()) return false;
  for (const c10::Storage& s : held)
    if (s.unsafeGetStorageImpl() == storage) return true;
  return false;
}

int64_t OpWindow::bytesHeldOnlyHere() const {
  // The window's references: one per entry of `held`, and one per storage a recorded library step
  // names (recordHostStep: it captures each of its tensors). A storage with no others is the
  // window's alone.
  std::vector<const c10::StorageImpl*> storages;
  storages.reserve(held.size());
  for (const c10::Storage& s : held)
    storages.push_back(s.unsafeGetStorageImpl());
  for (const DeferredLaunch& launch : launches)
    if (launch.host_step)
      for (const void* storage : launch.storages)
        storages.push_back(static_cast<const c10::StorageImpl*>(storage));
  std::sort(storages.begin(), storages.end());
  int64_t bytes = 0;
  for (size_t i = 0; i < storages.size();) {
    size_t end = i;
    while (end < storages.size() && storages[end] == storages[i])
      ++end;
    auto* impl = const_cast<c10::StorageImpl*>(storages[i]);
    if (c10::raw::intrusive_ptr::use_count(impl) == end - i)
      bytes += static_cast<int64_t>(storages[i]->nbytes());
    i = end;
  }
  return bytes;
}

void OpWindow::runLaunches(bool fuse, bool accumulate, bool wait, BatchFusion& fusion) {
  std::vector<DeferredLaunch> pending;
  pending.swap(launches);
  // A list call's launches come op by op over its lists; each element's chain fuses only once
  // its launches are consecutive. Regrouping reorders the batch, so a launch that fails may
  // leave launches recorded before it unrun (the window's rest is dropped either way).
  BatchSchedule schedule;
  try {
    if (regroup_chains && fuse) regroupIndependentChains(pending);
    regroup_chains = false;
    const int64_t folded = accumulate ? foldAccumulatingProducts(pending, held) : 0;
    if (fuse && pending.size() > 1) schedule = BatchSchedule(pending, held, wait, partitions);
    fusion = schedule.summary();
    fusion.accumulating_products = folded;
    fusion.runs_nothing =
        !pending.empty() && fusion.dead_launches == static_cast<int64_t>(pending.size());
    backResultsTheBatchUses(pending, schedule, held);
  } catch (const std::exception& error) { // out of memory: nothing of the batch ran
    dropAfterFailure();
    TORCH_CHECK(
        false, "[adaptive] a window's recorded steps could not be prepared to run: ", error.what());
  }
  size_t next = 0;
  struct Running { // host views made by library steps need no sync: their inputs ran before them
    bool was = detail::running_window;
    Running() { detail::running_window = true; }
    ~Running() { detail::running_window = was; }
  } running;
  ChainTable table(fusion);
  try {
    for (; next < pending.size(); ++next) {
      const DeferredLaunch& launch = pending[next];
      const BatchSchedule::Action action = schedule.action(next);
      if (action == BatchSchedule::kSkip) continue;
      if (action == BatchSchedule::kFused) {
        const BatchSchedule::FusedLaunch& fused = schedule.fused(next);
        const fusion::FusedGroup& group = *fused.group;
        const uint32_t first_chain = pending[group.first].chain;
        const uint32_t last_chain = pending[group.first + group.count - 1].chain;
        if (first_chain == DeferredLaunch::kNoChain) {
          table.run();
          deviceTarget().launch(fused.kernel->function, fused.slots.data(), fused.shape);
          continue;
        }
        table.add(fused, first_chain, last_chain);
        continue;
      }
      table.run();
      if (launch.host_step)
        launch.host_step();
      else
        deviceTarget().launch(launch.kernel->function, launch.slots.data(), launch.shape);
    }
    table.run();
  } catch (const std::exception& error) {
    dropAfterFailure();
    // The table's last run comes after the loop: name the batch's last step then.
    const DeferredLaunch& failed = pending[std::min(next, pending.size() - 1)];
    TORCH_CHECK(false, "[adaptive] a recorded ", (failed.host_step ? "step" : "launch"), " of ",
                (failed.op ? opName(*failed.op) : std::string("an op")),
                (failed.where.empty() ? std::string() : " (written at " + failed.where + ")"),
                " failed when its window ran: ", error.what());
  }
  held.clear();
  held_host_values.clear();
  product_results.clear();
  pending_bytes = largest_pending = product_bytes = 0;
  memory_check_interval = 1;
  calls_until_memory_check = 0;
  // The next window records into the same memory: growing a vector of launches again from
  // empty would copy each launch (its inline argument slots) several times per window.
  pending.clear();
  if (launches.empty()) launches.swap(pending);
}

void OpWindow::dropAfterFailure() {
  // A result the program holds keeps its storage usable, whatever the steps left in it.
  backEscapingResults(held);
  held_host_values.clear();
  product_results.clear();
  debug.reset();
  pending_bytes = largest_pending = product_bytes = 0;
}

void OpWindow::resetTrace() {
  open = false;
  pinned = false;
  signature = Hash128();
  records.clear();
  kinds.clear();
  cut_at = 0;
  first_op.clear();
  cursor = nullptr;
  deferred_ops = 0;
  sources.clear();
  batch_nodes.clear(); // every recorded launch has run; the trie may be rebuilt next
}

} // namespace torchneuron::tracer

#pragma once
// Regrouping a batch of recorded steps into independent chains, for fusion.
//
// A _foreach_* op over a model's parameters records its element ops in list order: an
// optimizer step of N parameters and k foreach ops is the first op over all N parameters, then
// the second, and so on. The partitioner (fusion/window_partition.h) fuses consecutive launches
// only, so in that order each parameter's k updates stay k kernels (k passes over its memory).
// Steps that share no storage commute: distinct live storages never overlap, and a recorded
// step reads and writes only the storages it names (DeferredLaunch::storages) and CPU numbers
// copied for it. So the batch is reordered to run each set of steps connected through shared
// storages (a chain: one parameter with its gradient and moments) as one consecutive run, in
// order of each chain's first step, every chain keeping its own order. Library steps (host
// steps) are barriers: nothing moves across them.
//
// The rule is conservative: two steps that only read a common storage (a device tensor every
// parameter's update reads) are joined too, and then nothing separates their chains.
//
// Each step of a regrouped segment gets its chain's id (DeferredLaunch::chain, unique in the
// batch): the batch runs the fused kernels of consecutive chains as one table launch.

#include <vector>

namespace torchneuron::tracer {

struct DeferredLaunch;

// Reorders `launches` as above and names each step's chain. Returns whether any step moved.
bool regroupIndependentChains(std::vector<DeferredLaunch>& launches);

} // namespace torchneuron::tracer

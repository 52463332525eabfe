#pragma once
// Which unbacked results of a batch get memory (unbacked_results.h), decided as the batch is
// about to run, once fusion has said how it runs (window_fusion.h).
//
// A result needs memory when something will read or write it: anything outside the window
// references its storage (a Python tensor, autograd's saved tensors, a recorded library step),
// a launch that runs as recorded has a pointer into it, or a fused kernel does (its arguments
// are the memrefs it reads and the outputs it stores; a member's output it does not store is a
// register value, not an argument). Every other result is dead: no step reads it and no one can
// after the batch, so it is never given memory and dies with the window's references.
//
// Locking: under the tracer's window lock, like the batch it prepares.

#include <c10/core/Storage.h>

#include <cstdint>
#include <vector>

namespace torchneuron::tracer {

struct DeferredLaunch;
class BatchSchedule;

// Gives memory to the unbacked storages among `held` (the window's references, one per entry)
// that the batch `launches`, run as `schedule` says, or anything outside the window uses, and
// moves every pointer slot into them: in the launches that run as recorded and in the fused
// launches. Returns how many storages got memory. Throws what the allocator throws, before any
// slot moved.
int64_t backResultsTheBatchUses(std::vector<DeferredLaunch>& launches, BatchSchedule& schedule,
                                const std::vector<c10::Storage>& held);

// After a batch failed: lets go of `held`, then gives memory to every unbacked storage among it
// that something outside the window still references (its contents are undefined, as are those
// of every result of the steps that did not run). Dead results go first, so their memory can
// serve; a storage that still gets none stays unbacked until a host access backs it
// (materializeStorage) and the rest go on. Never throws.
void backEscapingResults(std::vector<c10::Storage>& held);

} // namespace torchneuron::tracer

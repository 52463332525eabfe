#pragma once
// List launches: the compiled form of a multi-tensor op (_foreach_*, library_foreach.cpp) in
// eager mode. While a ListLaunchScope lives on a thread, each compiled call it makes whose plan
// is one launch (an element op over one list element) plans and allocates as usual but leaves its
// launch pending; the pending launches then run together as one table launch
// (launcher/table_launch.h): a list of any length and sizes costs one parallel launch of the
// element op's shape-polymorphic kernel.
//
// Ordering contract: a pending launch runs before anything that could observe it. Adding a launch
// that reads a storage a pending launch writes, or writes one it reads or writes, first runs the
// pending ones (so an element op built of two dependent launches stays in order), and so does
// every other way to device memory on the thread: a host view (fallback, interim and library
// kernels, copies to the host), a resize, a launch of a plan of several launches. Pending launches
// hold the storages they touch, so no memory they use is freed and reused before they run, and
// read copies of the CPU numbers they take (plan_executor.cpp: a later element may change one on
// the host, which no hook sees). The state is thread-local: a scope sees only its own thread's
// calls.

#include <c10/core/StorageImpl.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>

#include "cache/kernel_cache.h"
#include "launcher/parallel_launch.h"

namespace torchneuron {

class PendingListLaunches;

namespace detail {
extern thread_local PendingListLaunches* list_launches;
void runPendingListLaunches();
} // namespace detail

class ListLaunchScope {
public:
  ListLaunchScope();
  // Runs what is still pending (finish()).
  ~ListLaunchScope();
  ListLaunchScope(const ListLaunchScope&) = delete;
  ListLaunchScope& operator=(const ListLaunchScope&) = delete;

  // Runs the pending launches. Returns how many table launches the scope ran in all (0 when no
  // call was collected; more than 1 when an ordering hazard split the list; 0 for a scope that
  // joined an outer one, which counts them).
  int64_t finish();

private:
  bool owner_; // false for a scope opened inside another: it joins that one
};

// NEURON_LIST_LAUNCHES (default on): whether an eager _foreach_* call on device tensors runs as a
// list launch; off, it is one library launch of ATen's CPU kernel over host views of the lists.
// setListLaunches() overrides the variable for the process (a benchmark's comparison).
bool listLaunchesEnabled();
void setListLaunches(bool enabled);

// Whether a ListLaunchScope collects this thread's compiled single-launch calls.
inline bool collectingListLaunches() { return detail::list_launches != nullptr; }

// Adds a launch of `kernel` with a copy of its `slot_count` argument slots. `reads` and `writes`
// are the storages its operands read and write (CPU numbers among them).
void collectListLaunch(KernelHandle kernel, const int64_t* slots, int64_t slot_count,
                       const LaunchShape& shape, c10::ArrayRef<c10::StorageImpl*> reads,
                       c10::ArrayRef<c10::StorageImpl*> writes);

// Before any other access to device memory on this thread: runs the pending launches, if any.
inline void runPendingListLaunches() {
  if (detail::list_launches != nullptr) detail::runPendingListLaunches();
}

} // namespace torchneuron

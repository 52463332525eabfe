#pragma once
// The plan cache of the adaptive tracer's hot windows (tracer/tracer.h, CallCacheHooks). A
// deferred compiled call is captured once: the plans it ran, their kernels, and where each of
// their tensors comes from (an argument of the call, or an output of an earlier plan of the
// call), with a fingerprint of everything planning read (dtypes, sizes, strides, offsets,
// storage sharing among the arguments, number values, the default dtype). A later call of the
// same trie node with an equal fingerprint replays the capture: its outputs are allocated and
// its launches recorded without binding or planning again. A call whose tensors cannot all be
// traced back to its arguments is not captured (it is planned every time).
//
// Locking: captures are made and replayed under the tracer's window lock; the capture under way
// is per thread.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>

#include "device/plan_executor.h"

namespace torchneuron {

// The tracer's hooks, installed when the device library loads.
void installPlanReplay();

// executePlan's deferred branch: adds the plan it ran to the capture under way, if any.
void captureDeferredPlan(const LaunchPlan& plan, c10::ArrayRef<KernelHandle> kernels,
                         at::ArrayRef<at::Tensor> inputs, at::ArrayRef<at::Tensor> given_outputs,
                         at::ArrayRef<at::Tensor> outputs, LaunchCounter* launches);

} // namespace torchneuron

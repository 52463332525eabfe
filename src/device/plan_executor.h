#pragma once
// Running a launch plan (launch_plan.h) on tensors: the only step of a compiled op that touches
// memory.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include "cache/kernel_cache.h"
#include "device/launch_plan.h"
#include "device/metrics.h"

namespace torchneuron {

// Inline storage throughout: a tiny op's cost is mostly its host-side bookkeeping.
using TensorList = c10::SmallVector<at::Tensor, 4>;

// The step of executePlan after the kernels are found: materializes the outputs and launches
// `kernels` (one per plan launch), or records the launches in the adaptive tracer's window when
// `deferred`. Returns the outputs.
TensorList runPlanWithKernels(const LaunchPlan& plan, c10::ArrayRef<KernelHandle> kernels,
                              at::ArrayRef<at::Tensor> inputs,
                              at::ArrayRef<at::Tensor> given_outputs, LaunchCounter* launches,
                              bool deferred);

// Looks up (compiling on first use) every kernel of `plan`, then resizes the given outputs and
// allocates the new ones the plan describes, launches the kernels in order (one count each on
// `launches`) and returns the outputs. `inputs` and `given_outputs` are the tensors the plan's
// positions refer to, with the metadata the plan was built from. Returns nullopt, with no
// output touched, when a kernel cannot be compiled (warned once per kernel; the caller falls
// back to the CPU), or when a kernel is compiling in the background and the call may run
// interim (interim_launch.h: requestInterimLaunch() tells the scope's owner).
c10::optional<TensorList> executePlan(const LaunchPlan& plan, at::ArrayRef<at::Tensor> inputs,
                                      at::ArrayRef<at::Tensor> given_outputs,
                                      LaunchCounter* launches);

} // namespace torchneuron

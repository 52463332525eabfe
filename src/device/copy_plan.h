#pragma once
// Device-to-device copies as plans of the registry's `copy` op (any dtype conversion,
// broadcasting a source to the destination's shape). copyWithCompiledKernel (compiled_ops.h)
// plans and runs one; cat plans one per input slice.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include "device/elementwise_plan.h"
#include "device/launch_plan.h"

namespace torchneuron {

// The plan of copying `src` (a device tensor; input 0) into `target` (output 0), or nullopt when
// the kernels do not cover it.
c10::optional<LaunchPlan> planCopy(const at::Tensor& src, const WrittenOperand& target);

} // namespace torchneuron

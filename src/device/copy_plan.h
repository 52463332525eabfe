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

// Whether ATen's CPU copy runs this device-to-device copy as a blocked transpose: `src` a
// transposed 2-d matrix (strides [1, rows]) of at least 60 x 60 elements, `dst` contiguous, of
// the same dtype, sizes and sign/conjugate bits, not sharing memory (ATen's
// copy_transpose_valid). It copies in 60 x 60 tiles, which keeps both sides in cache; the
// compiled copy walks the source a column at a time and took 2.7x-5.9x ATen's time on
// 2048 x 768 and 768 x 2048 (bench/copies.py). Such copies run ATen's copy on host views.
bool isAtenBlockedTranspose(const at::Tensor& src, const at::Tensor& dst);

} // namespace torchneuron

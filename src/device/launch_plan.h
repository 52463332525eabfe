#pragma once
// A launch plan (DESIGN.md decision 10): what a device op would launch, decided from its
// arguments' metadata without touching memory. It names kernels by signature and key, operands
// by role and position (never by pointer), and outputs by metadata, so it can be built for
// tensors whose storage is not allocated yet, recorded, and executed later
// (plan_executor.h). Plans are plain values: copyable, comparable field by field in tests.

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>

#include "device/iteration_plan.h"
#include "fusion/kernel_signature.h"
#include "support/hash.h"

namespace torchneuron {

// Where a kernel operand's memory comes from when the plan runs.
enum class OperandRole : uint8_t {
  kOutput, // an output of the plan (LaunchPlan::outputs)
  kInput,  // an input of the call, by position
};

// One memref argument of a kernel, in ABI order (outputs first).
struct PlannedOperand {
  OperandRole role = OperandRole::kInput;
  int index = 0;      // into the plan's outputs or the call's inputs
  int64_t offset = 0; // elements past the tensor's first element (a slice of an output)
  DimVector sizes;    // the memref the kernel sees
  DimVector strides;
};

// An output of the op, by metadata: the written argument (out=, an in-place self) or a new
// tensor allocated when the plan runs.
struct PlannedOutput {
  int given = -1;      // index among the call's written arguments, or -1: a new tensor
  bool resize = false; // a given output resized to `sizes` first (at::native::resize_output)
  DimVector sizes;     // after resizing or allocation
  DimVector strides;
  bool contiguous = true; // a new output: allocated with at::empty, else with these strides
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::DeviceType::PrivateUse1, 0);
};

enum class KernelKind : uint8_t { kElementwise, kReduction };

// One kernel launch. The kernel is built from the signature on a cache miss.
struct PlannedLaunch {
  KernelKind kind = KernelKind::kElementwise;
  fusion::ElementwiseSignature elementwise; // kind == kElementwise
  fusion::ReductionSignature reduction;     // kind == kReduction
  Hash64 key = 0;
  // The interned copy of `elementwise` (fusion::internSignature), set on plans the tracer's plan
  // cache keeps: recorded launches name their signature by it. Null: look it up.
  const fusion::ElementwiseSignature* interned = nullptr;
  const fusion::ReductionSignature* interned_reduction = nullptr; // the same, of `reduction`
  c10::SmallVector<PlannedOperand, 5> operands;
  // Scalar slots after the memrefs: run-time scalars (floatSlot bits or i64), then a
  // reduction's reduced element count.
  c10::SmallVector<int64_t, 4> words;
  int64_t range = 0;          // extent of the outer parallel dimension
  int64_t work_per_index = 1; // elements per outer index (the launcher's cost estimate)

  // "add(f32,f32->f32) rank 1 [c,c,c]", for warnings and tests.
  std::string describe() const {
    return kind == KernelKind::kElementwise ? elementwise.describe() : reduction.describe();
  }
};

struct LaunchPlan {
  c10::SmallVector<PlannedOutput, 2> outputs;
  // In order; empty when there is nothing to compute (an empty output).
  c10::SmallVector<PlannedLaunch, 1> launches;
};

} // namespace torchneuron

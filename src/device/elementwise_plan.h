#pragma once
// Planning an elementwise call (and a device copy, which is the registry's `copy` op): ATen's
// type promotion, broadcasting, output and overlap rules decided from the arguments' metadata,
// giving a LaunchPlan (launch_plan.h) or nullopt when the kernels do not cover the call (the
// caller falls back to the CPU). ATen's errors (bad shapes, output dtypes, overlaps, numbers
// out of range) are raised here, before anything is written.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include "device/launch_plan.h"
#include "device/native_op_binding.h"
#include "device/view_geometry.h"

namespace torchneuron {

// The written operand as planning sees it: a given tensor, or a slice of an output another plan
// creates (cat's inputs copied into their slices of the result).
struct WrittenOperand {
  ViewGeometry view;
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::DeviceType::PrivateUse1, 0);
  int64_t offset = 0; // elements past the first element of the plan's output 0

  static WrittenOperand of(const at::Tensor& t);
};

// The plan of `call`: output 0 is call.output (given) or a new tensor; inputs are
// call.operands by position. The only memory it reads is the value of a 0-dim CPU operand an op
// specializes on (pow's exponent), a host number.
c10::optional<LaunchPlan> planElementwise(const NativeOpBinding& binding, const BoundCall& call);

// The same with the written operand described by `target` (call.output is ignored); the plan's
// output 0 is a given output.
c10::optional<LaunchPlan> planElementwiseInto(const NativeOpBinding& binding, const BoundCall& call,
                                              const WrittenOperand& target);

} // namespace torchneuron

#pragma once
// Running a registry reduction (or row-wise op) on device tensors: shared by the ATen reduction
// overloads (compiled_reductions.cpp) and ops built from several reductions (layer norm). A
// call is planned (planReduction, from metadata only) and the plan executed (plan_executor.h).

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include "device/launch_plan.h"
#include "device/metrics.h"
#include "device/plan_executor.h"
#include "fusion/op_registry.h"

namespace torchneuron {

// A fully decided call: the caller has chosen dtypes, params and constants.
struct ReductionCall {
  const fusion::ReductionOp* op = nullptr;
  TensorList inputs;                 // all of one shape (broadcast operands come in expanded)
  c10::SmallVector<int64_t, 6> dims; // reduced dimensions of inputs[0], sorted, unique
  bool keepdim = false;
  at::ScalarType compute = at::kFloat;
  c10::SmallVector<at::ScalarType, 2> output_dtypes;
  TensorList outputs; // given (out=) or empty: allocated when the plan runs
  c10::SmallVector<int64_t, 2> constants;
  c10::SmallVector<double, 2> params;
  bool needs_elements = false; // reducing no elements is ATen's error: the CPU raises it
};

// The plan of the call (outputs: the given ones, in order, or new ones; inputs by position in
// call.inputs), or nullopt when kernels do not cover it (the caller falls back to the CPU).
c10::optional<LaunchPlan> planReduction(const ReductionCall& call);

// Plans and executes the call and returns its outputs, or nullopt when kernels do not cover it.
// Counts one launch on `launches`.
c10::optional<TensorList> launchReduction(const ReductionCall& call, LaunchCounter* launches);

// launchReduction for the ops built from registry reductions (layer norm, batch norm, the
// losses): the registry op named `op` over `dims` of inputs[0], computing and storing in the
// inputs' dtype, into `outputs` when given (one per op output), else into new tensors, with the
// op's `constants` (part of the kernel key) and run-time `params`.
c10::optional<TensorList>
launchNamedReduction(const char* op, TensorList inputs, c10::SmallVector<int64_t, 6> dims,
                     TensorList outputs, c10::SmallVector<double, 2> params,
                     LaunchCounter* launches, c10::SmallVector<int64_t, 2> constants = {});

} // namespace torchneuron

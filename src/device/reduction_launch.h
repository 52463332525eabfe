#pragma once
// Running a registry reduction (or row-wise op) on device tensors: shared by the ATen reduction
// overloads (compiled_reductions.cpp) and ops built from several reductions (layer norm).

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include "device/metrics.h"
#include "fusion/op_registry.h"

namespace torchneuron {

// Inline storage throughout: a tiny reduction's cost is mostly its host-side bookkeeping.
using TensorList = c10::SmallVector<at::Tensor, 4>;

// A fully decided call: the caller has chosen dtypes, params and constants.
struct ReductionCall {
  const fusion::ReductionOp* op = nullptr;
  TensorList inputs;                 // all of one shape (broadcast operands come in expanded)
  c10::SmallVector<int64_t, 6> dims; // reduced dimensions of inputs[0], sorted, unique
  bool keepdim = false;
  at::ScalarType compute = at::kFloat;
  c10::SmallVector<at::ScalarType, 2> output_dtypes;
  TensorList outputs; // given (out=) or empty: allocated here
  c10::SmallVector<int64_t, 2> constants;
  c10::SmallVector<double, 2> params;
};

// Runs the call's kernel and returns its outputs, or nullopt when kernels do not cover it
// (the caller falls back to the CPU). Counts one launch on `launches`.
c10::optional<TensorList> launchReduction(ReductionCall& call, LaunchCounter* launches);

} // namespace torchneuron

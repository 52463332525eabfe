#pragma once
// Running a registry reduction (or row-wise op) on device tensors: shared by the ATen reduction
// overloads (compiled_reductions.cpp) and ops built from several reductions (layer norm).

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <vector>

#include "device/metrics.h"
#include "fusion/op_registry.h"

namespace torchneuron {

// A fully decided call: the caller has chosen dtypes, params and constants.
struct ReductionCall {
  const fusion::ReductionOp* op = nullptr;
  std::vector<at::Tensor> inputs;   // all of one shape (broadcast operands come in expanded)
  std::vector<int64_t> dims;        // reduced dimensions of inputs[0], sorted, unique
  bool keepdim = false;
  at::ScalarType compute = at::kFloat;
  std::vector<at::ScalarType> output_dtypes;
  std::vector<at::Tensor> outputs;  // given (out=) or empty: allocated here
  std::vector<int64_t> constants;
  std::vector<double> params;
};

// Runs the call's kernel and returns its outputs, or nullopt when kernels do not cover it
// (the caller falls back to the CPU). Counts one launch on `launches`.
c10::optional<std::vector<at::Tensor>> launchReduction(ReductionCall& call, LaunchCounter* launches);

}  // namespace torchneuron

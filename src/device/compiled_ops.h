#pragma once
// Registration of the ops the device runs as compiled kernels (the op registry's ops).

#include <ATen/core/Tensor.h>
#include <ATen/core/operator_name.h>
#include <torch/library.h>

namespace torchneuron {

// Registers a PrivateUse1 kernel for every ATen overload the registry binds. Called once,
// before the fallback routing, which leaves these overloads alone.
void registerCompiledElementwiseOps(torch::Library& library);

// Registers the reductions and row-wise ops (sum, amax, softmax, ...) the registry lowers.
void registerCompiledReductionOps(torch::Library& library);

// Copies `src` into `dst` (both on the device, src broadcastable to dst, any kernel dtypes) with
// a compiled kernel, counted under `op_name`; false when the kernels do not cover it (the caller
// copies otherwise).
bool copyWithCompiledKernel(const at::Tensor& src, const at::Tensor& dst,
                            const char* op_name = "aten::copy_");

// Registers native_layer_norm and its backward as compiled reductions.
void registerCompiledLayerNorm(torch::Library& library);

// Registers cat as compiled copies into slices of its output.
void registerCompiledCat(torch::Library& library);

// Whether `name` runs through a compiled kernel (after registration).
bool hasCompiledKernel(const c10::OperatorName& name);

}  // namespace torchneuron

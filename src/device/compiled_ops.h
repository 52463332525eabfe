#pragma once
// The ops the device runs as compiled kernels (the op registry's ops). op_routing.cpp registers
// them; each kernel below is a compiled route kernel (op_routing.h): it runs the call and returns
// true, or returns false with the stack untouched when the kernels cannot run that call (the
// router then runs it on the CPU fallback).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/operator_name.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace torchneuron {

// Binds every ATen overload the registry lowers as an elementwise op and returns their schema
// names ("add.Tensor"), composite ops left out (they keep their autograd formula). Called once,
// by op_routing.cpp, which registers runCompiledElementwise for each.
std::vector<std::string> bindCompiledElementwiseOverloads();
bool runCompiledElementwise(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The reductions and row-wise ops (sum, amax, softmax, ...) the registry lowers, bound as above.
std::vector<std::string> bindCompiledReductionOverloads();
bool runCompiledReduction(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// cat and cat.out as compiled copies into slices of the output.
bool runCompiledCat(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// native_layer_norm and native_layer_norm_backward as compiled reductions.
bool runCompiledLayerNorm(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledLayerNormBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// native_batch_norm and native_batch_norm_backward (compiled_batch_norm.cpp): float and double
// inputs whose channels run contiguously, training as a row-wise kernel per channel each way,
// evaluation's forward as elementwise kernels and its backward as a product and a reduction;
// they decline other calls.
bool runCompiledBatchNorm(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledBatchNormBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// mse_loss, smooth_l1_loss and huber_loss, their functional forward and backward (smooth L1's
// and Huber's functional backward are composite ops that would fill a zero gradient first and
// call their out= overload, which is compiled too), as compiled kernels (compiled_losses.cpp);
// they decline other dtypes and shapes (its header lists them).
bool runCompiledMseLoss(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledMseLossBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledSmoothL1Loss(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledSmoothL1LossBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledSmoothL1LossBackwardOut(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledHuberLoss(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledHuberLossBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack);
bool runCompiledHuberLossBackwardOut(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// max_pool2d_with_indices as a compiled reduction over windows (compiled_pooling.cpp): contiguous
// float and double input, no padding, every window inside the input; it declines other calls.
bool runCompiledMaxPool2d(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Copies `src` into `dst` (both on the device, src broadcastable to dst, any kernel dtypes) with
// a compiled kernel (copy_plan.h), counted under aten::copy_; false when the kernels do not
// cover it (the caller copies otherwise).
bool copyWithCompiledKernel(const at::Tensor& src, const at::Tensor& dst);

// Whether `name` runs through a compiled kernel (after registration).
bool hasCompiledKernel(const c10::OperatorName& name);

} // namespace torchneuron

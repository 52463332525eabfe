#include "device/plan_executor.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/Resize.h>

#include "cache/kernel_cache.h"
#include "device/compile_warnings.h"
#include "fusion/kernel_builder.h"
#include "launcher/kernel_abi.h"
#include "launcher/parallel_launch.h"
#include "target/target.h"

namespace torchneuron {
namespace {

KernelHandle kernelOf(const PlannedLaunch& launch) {
  if (launch.kind == KernelKind::kElementwise)
    return kernelFor(launch.key,
                     [&] { return fusion::buildElementwiseKernel(launch.elementwise); });
  return kernelFor(launch.key, [&] { return fusion::buildReductionKernel(launch.reduction); });
}

at::Tensor materialize(const PlannedOutput& output, at::ArrayRef<at::Tensor> given_outputs) {
  if (output.given >= 0) {
    const at::Tensor& tensor = given_outputs[output.given];
    if (output.resize) at::native::resize_output(tensor, output.sizes);
    return tensor;
  }
  const at::TensorOptions options = at::TensorOptions().dtype(output.dtype).device(output.device);
  if (output.contiguous) return at::empty(output.sizes, options);
  return at::empty_strided(output.sizes, output.strides, options);
}

const void* addressOf(const PlannedOperand& operand, at::ArrayRef<at::Tensor> inputs,
                      at::ArrayRef<at::Tensor> outputs) {
  const at::Tensor& tensor =
      operand.role == OperandRole::kOutput ? outputs[operand.index] : inputs[operand.index];
  return static_cast<const char*>(tensor.data_ptr()) +
         operand.offset * static_cast<int64_t>(tensor.itemsize());
}

} // namespace

c10::optional<TensorList> executePlan(const LaunchPlan& plan, at::ArrayRef<at::Tensor> inputs,
                                      at::ArrayRef<at::Tensor> given_outputs,
                                      LaunchCounter* launches) {
  c10::SmallVector<KernelHandle, 1> kernels;
  for (const PlannedLaunch& launch : plan.launches) {
    KernelHandle kernel = kernelOf(launch);
    if (kernel->function == nullptr) {
      warnCompileFailureOnce(launch.key, launch.describe(), kernel->failure);
      return c10::nullopt;
    }
    kernels.push_back(std::move(kernel));
  }
  TensorList outputs;
  for (const PlannedOutput& output : plan.outputs)
    outputs.push_back(materialize(output, given_outputs));
  for (size_t k = 0; k < plan.launches.size(); ++k) {
    const PlannedLaunch& launch = plan.launches[k];
    KernelArguments arguments;
    for (const PlannedOperand& operand : launch.operands)
      arguments.memref(addressOf(operand, inputs, outputs), operand.sizes.data(),
                       operand.strides.data(), static_cast<int64_t>(operand.sizes.size()));
    for (int64_t word : launch.words)
      arguments.word(word);
    deviceTarget().launch(kernels[k]->function, arguments.slots(),
                          LaunchShape{launch.range, launch.work_per_index, at::get_num_threads()});
    recordLaunch(launches);
  }
  return outputs;
}

} // namespace torchneuron

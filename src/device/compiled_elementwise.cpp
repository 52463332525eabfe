// Elementwise ops as compiled kernels: ATen's arguments are bound to a registry op, the call is
// planned (elementwise_plan.h) and the plan executed (plan_executor.h). What the kernels cannot
// run (complex dtypes, integer division, ...) goes to the CPU fallback, which also raises ATen's
// own errors.

#include <ATen/ATen.h>

#include <unordered_map>

#include "device/compiled_ops.h"
#include "device/elementwise_plan.h"
#include "device/metrics.h"
#include "device/native_op_binding.h"
#include "device/plan_executor.h"

namespace torchneuron {
namespace {

// Bindings by schema address; filled while the library loads, read-only afterwards.
std::unordered_map<const c10::FunctionSchema*, NativeOpBinding>& bindings() {
  static auto* table = new std::unordered_map<const c10::FunctionSchema*, NativeOpBinding>();
  return *table;
}

// Plans the call and runs the plan; the result, or nullopt when the kernels cannot run it (the
// caller falls back to the CPU). Raises ATen's errors for bad shapes and output dtypes.
c10::optional<at::Tensor> runCompiled(const NativeOpBinding& binding, const BoundCall& call) {
  const c10::optional<LaunchPlan> plan = planElementwise(binding, call);
  if (!plan) return c10::nullopt;
  c10::optional<TensorList> outputs =
      executePlan(*plan, call.operands, {call.output}, binding.launches);
  if (!outputs) return c10::nullopt;
  return std::move((*outputs)[0]);
}

} // namespace

bool runCompiledElementwise(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const NativeOpBinding& binding = bindings().at(&handle.schema());
  const size_t count = binding.arguments.size();
  BoundCall call;
  if (bindCall(binding, torch::jit::last(*stack, count), call)) {
    c10::optional<at::Tensor> result = runCompiled(binding, call);
    if (result) {
      torch::jit::drop(*stack, count);
      torch::jit::push(*stack, std::move(*result));
      return true;
    }
  }
  return false;
}

bool hasCompiledKernel(const c10::OperatorName& name) {
  auto handle = c10::Dispatcher::singleton().findOp(name);
  return handle && bindings().count(&handle->schema()) > 0;
}

std::vector<std::string> bindCompiledElementwiseOverloads() {
  std::vector<std::string> overloads;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const fusion::ElementwiseOp* op = registryOpFor(name.name);
    if (op == nullptr) continue;
    auto handle = c10::Dispatcher::singleton().findOp(name);
    if (!handle || !handle->hasSchema()) continue;
    // A composite op decomposes into ops that have kernels; a device kernel of its own would
    // hide its autograd formula.
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    c10::optional<NativeOpBinding> binding = bindSchema(handle->schema(), *op);
    if (!binding) continue;
    binding->launches = launchCounter(LaunchKind::kCompiled, binding->name);
    bindings().emplace(&handle->schema(), std::move(*binding));
    overloads.push_back(name.name.substr(6) +
                        (name.overload_name.empty() ? "" : "." + name.overload_name));
  }
  return overloads;
}

} // namespace torchneuron

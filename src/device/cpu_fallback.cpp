// The boxed CPU fallback: every op without a neuron kernel runs through ATen's CPU kernel on
// host views of device memory (DESIGN.md decision 9), warning once per op name.

#include <torch/library.h>

#include <memory>
#include <vector>

#include "cache/persistent_store.h"
#include "device/compiled_ops.h"
#include "device/cpu_fallback.h"
#include "device/fallback_policy.h"
#include "device/host_execution.h"
#include "device/metrics.h"

namespace torchneuron {

void runCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  const std::string full_name =
      name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  switch (currentFallbackPolicy()) {
    case FallbackPolicy::kError:
      TORCH_CHECK(false, "[fallback] ", full_name,
                  " has no neuron device kernel and NEURON_FALLBACK=error forbids running it on "
                  "the CPU");
    case FallbackPolicy::kWarn:
      if (firstFallbackOf(name.name)) {
        TORCH_WARN("[fallback] ", name.name,
                   " has no neuron device kernel; it ran on the CPU through ATen, on host views "
                   "of device memory (results stay on the device). Shown once per op; "
                   "NEURON_FALLBACK=silent hides this, NEURON_FALLBACK=error forbids fallback.");
      }
      break;
    case FallbackPolicy::kSilent:
      break;
  }
  runBoxedOnHost(op, stack);
  recordLaunch(LaunchKind::kFallback, full_name);
}

namespace {

// Ops that have a CPU kernel and also a composite kernel would run the composite on the
// device (a decomposition that may differ from the CPU, e.g. math_group_norm). The device
// mirrors the CPU, so these are pointed at the fallback, which runs the CPU kernel. The list is
// read from the dispatcher when the library loads, not kept by hand.
void routeCompositeOpsWithCpuKernelsToFallback() {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto handle = c10::Dispatcher::singleton().findOp(name);
    if (!handle || !handle->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    // hasKernelForAnyDispatchKey ignores alias keys, so ask for each composite alias.
    if (!handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
      continue;
    const std::string schema_name = name.name.substr(6) +
                                    (name.overload_name.empty() ? "" : "." + name.overload_name);
    library->impl(schema_name.c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&runCpuFallback>());
  }
}

// Structured losses whose CPU .out kernel resizes the output its own meta function shaped
// (PyTorch 1.13), so reaching them through the generic functional wrapper (empty output, then
// .out) warns where the CPU does not. Their functional CPU kernel runs instead.
constexpr const char* kOpsRunAsFunctionalCpuKernels[] = {"mse_loss", "smooth_l1_loss"};

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&runCpuFallback>());
  // Cache faults (at most one warning per kind) reach Python as UserWarnings.
  setCacheWarningHandler([](const std::string& text) { TORCH_WARN(text); });
  // Compiled kernels first: the routing below skips ops that already have a device kernel.
  static auto* compiled = new torch::Library(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  registerCompiledElementwiseOps(*compiled);
  registerCompiledReductionOps(*compiled);
  registerCompiledCat(*compiled);
  registerCompiledLayerNorm(*compiled);
  routeCompositeOpsWithCpuKernelsToFallback();
}

// Sparse COO tensors on the device: every sparse op runs the CPU kernel on host views of the
// indices and values.
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&runCpuFallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kOpsRunAsFunctionalCpuKernels)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&runCpuFallback>());
}

// Copies of conjugated or negated views must reach the device's _copy_from, which copies the
// math bits through ATen's CPU copy; the math-bit fallbacks would otherwise materialize the
// source with clone(), which copies, which recurses.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace torchneuron

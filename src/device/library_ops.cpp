// Library kernels: ops the device runs by calling ATen's optimized CPU implementations
// (OpenBLAS, oneDNN, ATen's random engines) directly on device memory. No copy of the inputs,
// no warning; counted as "library" in metrics().

#include <torch/library.h>

#include "device/host_execution.h"
#include "device/metrics.h"

namespace torchneuron {
namespace {

// Random ops draw from PyTorch's default CPU generator, so torch.manual_seed makes device
// runs reproducible and equal to the same code on the CPU.
constexpr const char* kRandomOps[] = {
    "uniform_",          "normal_",           "random_",          "random_.from",
    "random_.to",        "bernoulli_.float",  "bernoulli_.Tensor", "bernoulli",
    "exponential_",      "geometric_",        "log_normal_",      "cauchy_",
    "multinomial",       "normal.Tensor_float", "normal.float_Tensor", "normal.Tensor_Tensor",
    "randperm.generator_out", "_standard_gamma", "poisson",        "binomial",
    "_sample_dirichlet",
};

// mm, addmm, bmm and baddbmm write into device memory directly: library_matmul.cpp.
constexpr const char* kDenseLinearAlgebraOps[] = {
    "addmm_", "baddbmm_", "convolution", "convolution_backward",
};

constexpr const char* kIndexingOps[] = {
    "embedding_dense_backward", "index_select", "gather", "scatter.src", "scatter.value",
    "scatter.reduce", "scatter.value_reduce", "scatter_.src", "scatter_.value", "scatter_add",
    "scatter_add_", "index.Tensor", "_index_put_impl_",
};

template <size_t N>
void registerLibraryKernels(torch::Library& m, const char* const (&names)[N]) {
  for (const char* name : names)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&runLibraryKernelOnHost>());
}

}  // namespace

void runLibraryKernelOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runBoxedOnHost(op, stack);
  const c10::OperatorName& name = op.schema().operator_name();
  recordLaunch(LaunchKind::kLibrary,
               name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  registerLibraryKernels(m, kRandomOps);
  registerLibraryKernels(m, kDenseLinearAlgebraOps);
  registerLibraryKernels(m, kIndexingOps);
}

}  // namespace torchneuron

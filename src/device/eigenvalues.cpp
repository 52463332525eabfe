#include "device/eigenvalues.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>

#include <tuple>

#include "device/host_view.h"
#include "device/metrics.h"

namespace torchneuron {

at::Tensor deviceLinalgEigvals(const at::Tensor& input) {
  // With a gradient to compute, ATen's composite takes linalg_eig's eigenvalues, which are
  // differentiable; so does the device.
  if ((at::GradMode::is_enabled() && input.requires_grad()) || input._fw_grad(0).defined())
    return std::get<0>(at::linalg_eig(input));
  // Otherwise the CPU's own computation (LAPACK's geev without eigenvectors, whose eigenvalues
  // can differ in their last bits and order from geev's with them) on a host view, ATen's input
  // checks and messages included.
  const at::Tensor values = at::linalg_eigvals(hostView(input));
  recordLaunch(LaunchKind::kLibrary, "aten::linalg_eigvals");
  return copyHostToNewDeviceTensor(values, input.device());
}

at::Tensor& deviceLinalgEigvalsOut(const at::Tensor& input, at::Tensor& out) {
  const at::Tensor values = deviceLinalgEigvals(input); // the input's checks first, as ATen's
  TORCH_CHECK(at::canCast(values.scalar_type(), out.scalar_type()),
              "torch.linalg.eigvals: Expected eigenvalues to be safely castable from ",
              values.scalar_type(), " dtype, but got eigenvalues with dtype ", out.scalar_type());
  TORCH_CHECK(out.device() == input.device(),
              "torch.linalg.eigvals: Expected eigenvalues and input to be on the same device, but "
              "found eigenvalues on ",
              out.device(), " and input on ", input.device(), " instead.");
  at::native::resize_output(out, values.sizes());
  out.copy_(values);
  return out;
}

} // namespace torchneuron

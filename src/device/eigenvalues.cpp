#include "device/eigenvalues.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>

#include <tuple>

namespace torchneuron {

at::Tensor deviceLinalgEigvals(const at::Tensor& input) {
  return std::get<0>(at::linalg_eig(input));
}

at::Tensor& deviceLinalgEigvalsOut(const at::Tensor& input, at::Tensor& out) {
  const at::ScalarType complex = c10::toComplexType(input.scalar_type());
  TORCH_CHECK(at::canCast(complex, out.scalar_type()),
              "torch.linalg.eigvals: Expected eigenvalues to be safely castable from ", complex,
              " dtype, but got eigenvalues with dtype ", out.scalar_type(), " instead");
  TORCH_CHECK(out.device() == input.device(),
              "torch.linalg.eigvals: Expected eigenvalues and input to be on the same device, but "
              "found eigenvalues on ",
              out.device(), " and input on ", input.device(), " instead.");
  const at::Tensor values = deviceLinalgEigvals(input);
  at::native::resize_output(out, values.sizes());
  out.copy_(values);
  return out;
}

} // namespace torchneuron

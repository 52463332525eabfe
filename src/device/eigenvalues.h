#pragma once
// torch.linalg.eigvals on the device. ATen's composite (linalg_eigvals_out) computes on CPU
// temporaries for any tensor that is not a CPU one (it expects MAGMA's CUDA path) and then
// combines a real input's real and imaginary parts into the device output with a device/CPU mix,
// which fails ("Expected all tensors to be on the same device") whenever a real matrix has
// complex eigenvalues. On the device, an input that requires grad takes linalg_eig's eigenvalues
// (a library op), as ATen's composite does; any other runs the CPU's linalg_eigvals on a host
// view (geev without eigenvectors, as on the CPU: the same bits and order).
//
// op_routing.cpp registers them at AutogradPrivateUse1, as the recurrent layers' decompositions,
// and at PrivateUse1 for inference mode: they decompose into linalg_eig, whose autograd records
// the graph.

#include <ATen/core/Tensor.h>

namespace torchneuron {

at::Tensor deviceLinalgEigvals(const at::Tensor& input);

// ATen's checks of the out= tensor (dtype castable from the complex eigenvalues, same device),
// then ATen's resize_output and a copy.
at::Tensor& deviceLinalgEigvalsOut(const at::Tensor& input, at::Tensor& out);

} // namespace torchneuron

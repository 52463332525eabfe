#pragma once
// Which tensors compiled kernels can read and write directly.

#include <ATen/core/Tensor.h>

#include "fusion/element_type.h"

namespace torchneuron {

// A dense (strided) tensor of a kernel dtype without pending conjugate or negative bits: its
// memory holds exactly its values.
inline bool isKernelOperand(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && fusion::isKernelDtype(t.scalar_type()) &&
         !t.is_conj() && !t.is_neg();
}

} // namespace torchneuron

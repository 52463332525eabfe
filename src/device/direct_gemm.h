#pragma once
// A matrix product on device memory as the one BLAS call ATen's CPU kernel makes for it, without
// the kernel around it: for the 2-D layouts ATen passes to BLAS as they are, the same
// transposes, sizes, leading dimensions and scalars go to the same sgemm_/dgemm_, so the result
// is ATen's bit for bit. What that saves is ATen's wrapping (its meta function, host views,
// conj and name checks: most of a tiny product's cost above stock's, issue 15's 32-element `mm`).

#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>

namespace torchneuron {

// out = beta * out + alpha * (a @ b), as ATen's addmm_impl_cpu_ computes it. `out`, `a` and `b`
// are 2-D device tensors of one dtype with agreeing sizes; `out` holds what ATen's would when
// beta is not 0 (mm's accumulation into a gradient: its old value). With `self` (addmm), `out` is
// new and contiguous, and self, broadcast to it, is copied in first where beta is not 0, as ATen
// does; only a self that is out's rows or one contiguous row repeated is copied here. Returns
// false, having done nothing, where ATen would do something else or this does not copy self:
// dtypes other than float and double, an empty result or inner size, a layout ATen copies
// first (neither it nor its transpose has unit stride in one dimension and a large enough
// leading one), sizes past BLAS's int. The caller then runs ATen's kernel.
bool gemmOnDeviceMemory(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        const c10::Scalar& beta, const c10::Scalar& alpha,
                        const at::Tensor* self = nullptr);

} // namespace torchneuron

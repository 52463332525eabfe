#pragma once
// A matrix product on device memory as the one BLAS call ATen's CPU kernel makes for it, without
// the kernel around it: for the 2-D layouts ATen passes to BLAS as they are, the same
// transposes, sizes, leading dimensions and scalars go to the same sgemm_/dgemm_, so the result
// is ATen's bit for bit. What that saves is ATen's wrapping (its meta function, host views,
// conj and name checks: most of a tiny product's cost above stock's, issue 15's 32-element `mm`).

#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>

#include <initializer_list>

namespace torchneuron {

// Which threads a product runs on at more than one thread. kBlas: OpenBLAS's own pool (Debian's
// libopenblas0-pthread), as ATen's call runs it: ATen's bits. kDevice: split over the device's
// launch pool (PyTorch's OpenMP team by default, the threads its compiled kernels run on), each
// part an OpenBLAS call on its own thread: the same product to float rounding (OpenBLAS's sums
// depend on the sizes it is given). On two cores, OpenBLAS's workers spinning beside the team's
// made 2-thread steps with products swing by 2-3x between runs (docs/architecture.md,
// "Parallelism"): split, `inference-gelu-mlp` ran 1.8x-4x and `varlen-loop` 1.6x-2.2x faster.
// Training steps keep OpenBLAS's pool: measured 2026-12-06, when autograd still ran backward on
// its own device thread (whose OpenMP team was a second one beside the main thread's), split
// there or only in the forward pass 2-thread `mlp-train` and `transformer-block-train` steps ran
// 13-25% slower. Backward passes now run on the caller's thread (bindings/caller_thread_engine.h).
// Grad mode is off inside a custom autograd.Function's forward and a reentrant checkpoint's
// forward, so their products count as unrecorded and split (a checkpoint's recompute, in
// backward, does not: the two round differently). While a product runs split, other threads'
// products run on one OpenBLAS thread (its count is global).
enum class ProductThreads { kBlas, kDevice };

// kDevice for a product of `operands` called now where the device has several threads, autograd
// does not record it (grad mode off, or no operand requires grad) and no backward pass is
// running on this thread; else kBlas.
// Decided at the call (a hot window runs the product later, on tensors that may have lost their
// autograd state).
ProductThreads productThreadsFor(std::initializer_list<const at::Tensor*> operands);

// out = beta * out + alpha * (a @ b), as ATen's addmm_impl_cpu_ computes it (its bits with kBlas,
// to float rounding with kDevice where the product is split). `out`, `a` and `b`
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
                        const at::Tensor* self = nullptr,
                        ProductThreads threads = ProductThreads::kBlas);

// out[i] = a[i] @ b[i] for 3-D float or double device tensors (bmm) with ProductThreads::kDevice,
// one BLAS call per matrix of the batch as ATen's bmm makes them: each of the device's threads
// takes a share of the batch (OpenBLAS on its calling thread), or, with fewer matrices than
// threads, each product is split as gemmOnDeviceMemory splits it. Returns false, having written
// nothing, with kBlas (ATen's kernel then runs it, its bits), where ATen runs its own loops
// (products under 400 multiply-adds) or where gemmOnDeviceMemory would leave the layout to ATen.
bool bmmOnDeviceMemory(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                       ProductThreads threads);

} // namespace torchneuron

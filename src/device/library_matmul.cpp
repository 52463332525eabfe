// mm, addmm, bmm and baddbmm as library kernels that write straight into device memory: the
// output is allocated on the device (the caching allocator) and filled by the BLAS call ATen's
// CPU kernel would make (device/direct_gemm.h) or, in layouts that call does not cover, by ATen's
// out= CPU kernel through host views; or, in a hot window of the adaptive tracer, a
// recorded step of the window does when the window runs (the output's metadata are known now). The
// generic library path would let the functional CPU kernel allocate fresh host memory and then copy
// it to the device: an extra allocation (page faults for a fresh multi-megabyte block) and an extra
// copy of every result.

#include <ATen/ATen.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>

#include <tuple>

#include "device/device.h"
#include "device/direct_gemm.h"
#include "device/host_execution.h"
#include "device/host_kernel_allocator.h"
#include "device/host_view.h"
#include "device/library_ops.h"
#include "device/metrics.h"
#include "device/runtime_ops.h"
#include "tracer/accumulating_products.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

// Device tensors of one floating dtype ATen's products implement (float, double) with the ranks
// the op needs; anything else takes the generic path, where ATen raises its own errors at the
// call. A hot window records this path's products to run later, so a call ATen would refuse
// (a dtype its kernel does not implement: Half, Bool) must not take it.
bool plainOperands(std::initializer_list<const at::Tensor*> tensors, int64_t rank) {
  const at::Tensor& first = **tensors.begin();
  if (first.scalar_type() != at::kFloat && first.scalar_type() != at::kDouble) return false;
  for (const at::Tensor* t : tensors)
    if (!isDenseDeviceTensor(*t) || t->scalar_type() != first.scalar_type() ||
        t->device() != first.device())
      return false;
  auto it = tensors.end() - 2; // the two matrix (batch) operands are the last two
  return (*it)->dim() == rank && (*(it + 1))->dim() == rank;
}

// Whether ATen's kernel accepts the shapes: the inner sizes agree, batches agree, and `self`
// (addmm, baddbmm) expands to the result. A hot window records the step and runs it later, so a
// shape ATen would refuse must be refused now, at the op's call, by the generic path (ATen's own
// error), not when the window runs.
bool productShapesAgree(const at::Tensor& a, const at::Tensor& b) {
  const int64_t rank = a.dim();
  if (a.size(rank - 1) != b.size(rank - 2)) return false;
  return rank == 2 || a.size(0) == b.size(0);
}

bool expandsTo(const at::Tensor& self, at::IntArrayRef result) {
  return at::is_expandable_to(self.sizes(), result);
}

// ATen converts beta and alpha to the dtype inside its kernel (Scalar::to, which raises when a
// value overflows it): converted here, at the call, so that a recorded product cannot fail later.
void checkScalarsFit(const at::Tensor& like, const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (like.scalar_type() == at::kFloat) {
    (void)beta.to<float>();
    (void)alpha.to<float>();
  } else {
    (void)beta.to<double>();
    (void)alpha.to<double>();
  }
}

// Runs `kernel`, an ATen out= CPU kernel, on host views of the device tensors `tensors`.
template <typename Kernel, typename... Tensors>
void onHostViews(Kernel kernel, const Tensors&... tensors) {
  HostKernelAllocationScope allocations_from_the_device; // ATen's scratch (contiguous copies)
  kernel(ScopedHostView(tensors).tensor()...);
}

// Allocates the result on the device and has `fill(out, operands...)` (device tensors) write it,
// counting one library launch on `launches`. In a hot window of the adaptive tracer the fill is
// recorded as a step of the window instead, to run when it runs, on the tensors as they are now
// (matmul's 1-D case squeezes the result of mm in place before). A product that can add itself
// into a tensor instead (mm: `accumulate(target, operands...)`;
// tracer/accumulating_products.h) records that too; the others pass nullptr.
template <typename Fill, typename Accumulate, typename... Operands>
at::Tensor intoDevice(LaunchCounter* launches, at::IntArrayRef sizes, const at::Tensor& like,
                      Fill fill, Accumulate accumulate, const Operands&... operands) {
  at::Tensor out = newDeviceTensor(sizes, like.scalar_type());
  if (tracer::deferringLaunches()) {
    auto frozen_operands = std::make_tuple(tracer::frozenTensor(operands)...);
    std::shared_ptr<tracer::AccumulatingProduct> product;
    if constexpr (!std::is_same_v<Accumulate, std::nullptr_t>) {
      product = std::make_shared<tracer::AccumulatingProduct>();
      product->add_into = [accumulate, frozen_operands](const at::Tensor& target) {
        std::apply([&](const auto&... t) { accumulate(target, t...); }, frozen_operands);
      };
      product->output = tracer::TensorPlace::of(out);
      for (const at::Tensor* t : {&operands...})
        product->operands.push_back(t->storage().unsafeGetStorageImpl());
    }
    tracer::recordHostStep(
        [fill, frozen_out = tracer::frozenTensor(out), frozen_operands] {
          std::apply([&](const auto&... t) { fill(frozen_out, t...); }, frozen_operands);
        },
        {operands...}, {out}, std::move(product));
    recordLaunch(launches);
    return out;
  }
  fill(out, operands...);
  recordLaunch(launches);
  return out;
}

at::Tensor mmIntoDevice(const at::Tensor& self, const at::Tensor& mat2) {
  if (!plainOperands({&self, &mat2}, 2) || !productShapesAgree(self, mat2)) return at::Tensor();
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kLibrary, "aten::mm");
  const ProductThreads threads = productThreadsFor({&self, &mat2});
  return intoDevice(
      launches, {self.size(0), mat2.size(1)}, self,
      [threads](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
        if (gemmOnDeviceMemory(out, a, b, /*beta=*/0, /*alpha=*/1, nullptr, threads)) return;
        onHostViews([](at::Tensor& o, at::Tensor& x, at::Tensor& y) { at::cpu::mm_out(o, x, y); },
                    out, a, b);
      },
      [threads](const at::Tensor& target, const at::Tensor& a, const at::Tensor& b) {
        if (gemmOnDeviceMemory(target, a, b, /*beta=*/1, /*alpha=*/1, nullptr, threads)) return;
        onHostViews(
            [](at::Tensor& t, at::Tensor& x, at::Tensor& y) {
              at::cpu::addmm_out(t, t, x, y); // gemm with beta = 1
            },
            target, a, b);
      },
      self, mat2);
}

at::Tensor addmmIntoDevice(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                           const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (!plainOperands({&self, &mat1, &mat2}, 2) || !productShapesAgree(mat1, mat2) ||
      !expandsTo(self, {mat1.size(0), mat2.size(1)}))
    return at::Tensor();
  checkScalarsFit(mat1, beta, alpha);
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kLibrary, "aten::addmm");
  const ProductThreads threads = productThreadsFor({&self, &mat1, &mat2});
  return intoDevice(
      launches, {mat1.size(0), mat2.size(1)}, mat1,
      [beta, alpha, threads](const at::Tensor& out, const at::Tensor& s, const at::Tensor& a,
                             const at::Tensor& b) {
        if (gemmOnDeviceMemory(out, a, b, beta, alpha, &s, threads)) return;
        onHostViews([&](at::Tensor& o, at::Tensor& self_view, at::Tensor& x,
                        at::Tensor& y) { at::cpu::addmm_out(o, self_view, x, y, beta, alpha); },
                    out, s, a, b);
      },
      nullptr, self, mat1, mat2);
}

at::Tensor bmmIntoDevice(const at::Tensor& self, const at::Tensor& mat2) {
  if (!plainOperands({&self, &mat2}, 3) || !productShapesAgree(self, mat2)) return at::Tensor();
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kLibrary, "aten::bmm");
  const ProductThreads threads = productThreadsFor({&self, &mat2});
  return intoDevice(
      launches, {self.size(0), self.size(1), mat2.size(2)}, self,
      [threads](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
        if (bmmOnDeviceMemory(out, a, b, threads)) return;
        onHostViews([](at::Tensor& o, at::Tensor& x, at::Tensor& y) { at::cpu::bmm_out(o, x, y); },
                    out, a, b);
      },
      nullptr, self, mat2);
}

at::Tensor baddbmmIntoDevice(const at::Tensor& self, const at::Tensor& batch1,
                             const at::Tensor& batch2, const c10::Scalar& beta,
                             const c10::Scalar& alpha) {
  if (!plainOperands({&self, &batch1, &batch2}, 3) || !productShapesAgree(batch1, batch2) ||
      !expandsTo(self, {batch1.size(0), batch1.size(1), batch2.size(2)}))
    return at::Tensor();
  checkScalarsFit(batch1, beta, alpha);
  static SiteLaunchCounter site;
  LaunchCounter* launches = site.get(LaunchKind::kLibrary, "aten::baddbmm");
  return intoDevice(
      launches, {batch1.size(0), batch1.size(1), batch2.size(2)}, batch1,
      [beta, alpha](const at::Tensor& out, const at::Tensor& s, const at::Tensor& a,
                    const at::Tensor& b) {
        onHostViews(
            [&](at::Tensor& o, at::Tensor& self_view, at::Tensor& x, at::Tensor& y) {
              // ATen 1.13's loops for small products compute out * beta + alpha * product even
              // where beta is 0, so a NaN the new output's memory held last stayed NaN (beta 0
              // is documented to ignore self, NaN included): the output starts at zero.
              if (beta.toComplexDouble() == 0.0) o.zero_();
              at::cpu::baddbmm_out(o, self_view, x, y, beta, alpha);
            },
            out, s, a, b);
      },
      nullptr, self, batch1, batch2);
}

// The boxed entry: the fast path above, or the generic library path (mixed devices, wrong
// ranks, dtypes or shapes: ATen's errors, raised as on the CPU, at the call).
template <typename Fast>
void runMatmul(const c10::OperatorHandle& op, torch::jit::Stack* stack, Fast fast) {
  const size_t count = op.schema().arguments().size();
  at::Tensor result = fast(torch::jit::last(*stack, count));
  if (!result.defined()) {
    runLibraryKernelOnHost(op, stack);
    return;
  }
  torch::jit::drop(*stack, count);
  torch::jit::push(*stack, std::move(result));
}

} // namespace

void runLibraryMm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runMatmul(op, stack, [](c10::ArrayRef<c10::IValue> a) {
    return mmIntoDevice(a[0].toTensor(), a[1].toTensor());
  });
}
void runLibraryAddmm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runMatmul(op, stack, [](c10::ArrayRef<c10::IValue> a) {
    return addmmIntoDevice(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toScalar(),
                           a[4].toScalar());
  });
}
void runLibraryBmm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runMatmul(op, stack, [](c10::ArrayRef<c10::IValue> a) {
    return bmmIntoDevice(a[0].toTensor(), a[1].toTensor());
  });
}
void runLibraryBaddbmm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runMatmul(op, stack, [](c10::ArrayRef<c10::IValue> a) {
    return baddbmmIntoDevice(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toScalar(),
                             a[4].toScalar());
  });
}

} // namespace torchneuron

#pragma once
// Accumulating products: in a hot window that runs fused, a matrix product whose only use is to
// be added in place into another tensor runs as one accumulating product (BLAS gemm with
// beta = 1, `target.addmm_(a, b)`), and the add does not run. This is autograd's gradient
// accumulation in every training step that keeps its gradients between steps (`zero_grad()`
// zeroes them in PyTorch 1.13): a linear layer's weight gradient `grad_out.t().mm(input)` is
// added into `weight.grad`. The product is never stored and the add's pass over three tensors
// is gone: on a 1024x1024 weight, about 12 MB of memory traffic a step.
//
// The product is recorded as a host step that can accumulate (recordHostStep's `product`), the
// add as a launch marked as an in-place accumulation (noteInPlaceAccumulation). When the batch
// is about to run, foldAccumulatingProducts joins the two where that cannot change a result:
// the add is the first later step that touches the product's storage, no step between them
// touches the target, no later step touches the product, and nothing outside the window holds
// the product (its storage is dead), and the target is none of the product's operands (gemm
// would write what it reads). Rounding differs from the two steps' only as the order of the
// additions does: gemm adds each dot product into the target. A batch that fails between the two
// steps leaves the target accumulated (the add's own step would not have run).
//
// Locking: under the tracer's window lock, like the batch.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace torchneuron::tracer {

struct DeferredLaunch;

// Where a tensor's elements lie: its storage, offset, sizes, strides and dtype.
struct TensorPlace {
  const void* storage = nullptr;
  int64_t offset = 0;
  c10::SmallVector<int64_t, 4> sizes, strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  static TensorPlace of(const at::Tensor& t);
  bool operator==(const TensorPlace& other) const;
};

// What a recorded product step needs to accumulate instead of storing its result.
struct AccumulatingProduct {
  // Adds the product into `target` (a device tensor of the product's shape and dtype), on host
  // views; owns the operands it reads, frozen as of the call.
  std::function<void(const at::Tensor& target)> add_into;
  TensorPlace output;                        // where the step stores the product otherwise
  c10::SmallVector<const void*, 2> operands; // the device storages it reads
};

// A recorded `target.add_(source)` (alpha 1) over two device tensors of one dtype and geometry.
struct InPlaceAccumulation {
  at::Tensor target; // frozen as of the call
  TensorPlace source;
};

// Whether `op` with arguments `args` is an in-place accumulation: `aten::add_.Tensor` with alpha
// 1 on two distinct dense device tensors of one floating dtype, sizes and strides. Costs one
// comparison for any other op.
bool isInPlaceAccumulation(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

// The accumulation `op` performs (isInPlaceAccumulation) when what it adds lies in one of
// `product_results` (the storages of the products' results recorded in the window), or null.
std::shared_ptr<const InPlaceAccumulation>
inPlaceAccumulationOf(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                      c10::ArrayRef<const void*> product_results);

// Joins each accumulating product of `launches` with the in-place accumulation of its result
// where the header's conditions hold: the product's step adds into the target and the
// accumulation's launch is removed. `held`: the window's references to storages, one per entry
// (with one per storage a host step names, they are the window's own references). Returns how
// many products it joined.
int64_t foldAccumulatingProducts(std::vector<DeferredLaunch>& launches,
                                 const std::vector<c10::Storage>& held);

} // namespace torchneuron::tracer

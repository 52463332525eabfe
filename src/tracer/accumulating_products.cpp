#include "tracer/accumulating_products.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <algorithm>
#include <utility>

#include "support/made_once.h"
#include "tracer/op_window.h"
#include "tracer/tracer.h"

namespace torchneuron::tracer {
namespace {

const c10::FunctionSchema& addInPlaceSchema() {
  static MadeOnce<const c10::FunctionSchema> schema; // fork-safe (made_once.h)
  return schema.get([] {
    return &c10::Dispatcher::singleton().findSchemaOrThrow("aten::add_", "Tensor").schema();
  });
}

bool isOne(const c10::Scalar& alpha) {
  if (alpha.isIntegral(/*includeBool=*/false)) return alpha.toLong() == 1;
  return alpha.isFloatingPoint() && alpha.toDouble() == 1.0;
}

bool touches(const DeferredLaunch& launch, const void* storage) {
  return std::find(launch.storages.begin(), launch.storages.end(), storage) !=
         launch.storages.end();
}

// Whether the window's references are all `storage` has: one per entry of `held` and one per
// time a recorded host step names it (the step captures each of its tensors).
bool onlyTheWindowHolds(const void* storage, const std::vector<DeferredLaunch>& launches,
                        const std::vector<c10::Storage>& held) {
  size_t references = 0;
  for (const c10::Storage& s : held)
    if (s.unsafeGetStorageImpl() == storage) ++references;
  for (const DeferredLaunch& launch : launches)
    if (launch.host_step)
      references += std::count(launch.storages.begin(), launch.storages.end(), storage);
  auto* impl = static_cast<c10::StorageImpl*>(const_cast<void*>(storage));
  return c10::raw::intrusive_ptr::use_count(impl) == references;
}

// The index of the in-place accumulation that can absorb the product of `launches[i]`, or
// launches.size().
size_t accumulationOf(const std::vector<DeferredLaunch>& launches, size_t i,
                      const std::vector<c10::Storage>& held) {
  const size_t none = launches.size();
  const AccumulatingProduct& product = *launches[i].product;
  const void* result = product.output.storage;
  size_t j = i + 1;
  while (j < launches.size() && !touches(launches[j], result))
    ++j;
  if (j == launches.size() || !launches[j].accumulation) return none;
  const InPlaceAccumulation& add = *launches[j].accumulation;
  if (!(add.source == product.output)) return none;
  const void* target = add.target.storage().unsafeGetStorageImpl();
  // `x.add_(x.mm(w))`: gemm would write the memory it still reads.
  if (std::find(product.operands.begin(), product.operands.end(), target) != product.operands.end())
    return none;
  for (size_t k = i + 1; k < j; ++k)
    if (touches(launches[k], target)) return none;
  for (size_t k = j + 1; k < launches.size(); ++k)
    if (touches(launches[k], result)) return none;
  return onlyTheWindowHolds(result, launches, held) ? j : none;
}

} // namespace

TensorPlace TensorPlace::of(const at::Tensor& t) {
  TensorPlace place;
  place.storage = t.storage().unsafeGetStorageImpl();
  place.offset = t.storage_offset();
  place.sizes.assign(t.sizes().begin(), t.sizes().end());
  place.strides.assign(t.strides().begin(), t.strides().end());
  place.dtype = t.scalar_type();
  return place;
}

bool TensorPlace::operator==(const TensorPlace& other) const {
  return storage == other.storage && offset == other.offset && sizes == other.sizes &&
         strides == other.strides && dtype == other.dtype;
}

bool isInPlaceAccumulation(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  if (&op.schema() != &addInPlaceSchema() || args.size() != 3) return false;
  if (!args[0].isTensor() || !args[1].isTensor() || !args[2].isScalar()) return false;
  const at::Tensor& target = args[0].toTensor();
  const at::Tensor& source = args[1].toTensor();
  if (!target.defined() || !source.defined() || target.device().is_cpu() ||
      source.device().is_cpu() || !target.has_storage() || !source.has_storage())
    return false;
  const c10::ScalarType dtype = target.scalar_type();
  if (dtype != c10::kFloat && dtype != c10::kDouble) return false;
  return source.scalar_type() == dtype && target.sizes() == source.sizes() &&
         target.strides() == source.strides() && target.is_non_overlapping_and_dense() &&
         !target.is_same(source) && !target.storage().is_alias_of(source.storage()) &&
         isOne(args[2].toScalar());
}

std::shared_ptr<const InPlaceAccumulation>
inPlaceAccumulationOf(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                      c10::ArrayRef<const void*> product_results) {
  if (!isInPlaceAccumulation(op, args)) return nullptr;
  const at::Tensor& target = args[0].toTensor();
  const at::Tensor& source = args[1].toTensor();
  if (std::find(product_results.begin(), product_results.end(),
                source.storage().unsafeGetStorageImpl()) == product_results.end())
    return nullptr;
  auto accumulation = std::make_shared<InPlaceAccumulation>();
  accumulation->target = frozenTensor(target);
  accumulation->source = TensorPlace::of(source);
  return accumulation;
}

int64_t foldAccumulatingProducts(std::vector<DeferredLaunch>& launches,
                                 const std::vector<c10::Storage>& held) {
  int64_t folded = 0;
  std::vector<bool> absorbed;
  for (size_t i = 0; i < launches.size(); ++i) {
    DeferredLaunch& step = launches[i];
    if (!step.host_step || !step.product) continue;
    const size_t j = accumulationOf(launches, i, held);
    if (j == launches.size()) continue;
    std::shared_ptr<const AccumulatingProduct> product = std::move(step.product);
    const at::Tensor target = launches[j].accumulation->target;
    // The step's references: its operands (held by add_into) and the target, as the contract of
    // recordHostStep has it (one per storage named).
    step.host_step = [add_into = product->add_into, target] { add_into(target); };
    step.storages.assign(product->operands.begin(), product->operands.end());
    step.storages.push_back(target.storage().unsafeGetStorageImpl());
    if (absorbed.empty()) absorbed.assign(launches.size(), false);
    absorbed[j] = true;
    ++folded;
  }
  if (folded == 0) return 0;
  size_t kept = 0;
  for (size_t i = 0; i < launches.size(); ++i)
    if (!absorbed[i]) {
      if (kept != i) launches[kept] = std::move(launches[i]);
      ++kept;
    }
  launches.resize(kept);
  return folded;
}

} // namespace torchneuron::tracer

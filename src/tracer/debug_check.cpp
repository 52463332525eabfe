#include "tracer/debug_check.h"

#include "tracer/op_window.h" // opName
#include "tracer/tracer.h"    // frozenTensor

#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace torchneuron::tracer {
namespace {

SourceLocator source_locator = nullptr;

bool onDevice(const at::Tensor& t) {
  return t.defined() && t.has_storage() && !t.device().is_cpu();
}

// A CPU tensor over `storage` with `like`'s geometry and math bits.
at::Tensor cpuView(const c10::Storage& storage, const at::Tensor& like) {
  at::Tensor view = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), like.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                    like.storage_offset());
  if (like.is_conj()) view._set_conj(true);
  if (like.is_neg()) view._set_neg(true);
  return view;
}

// A CPU storage over a device storage's bytes (device memory is host memory on this target); the
// device storage is kept alive by the DebugCall's tensors.
c10::Storage deviceBytes(const c10::Storage& device) {
  return c10::Storage(c10::Storage::use_byte_size_t(), device.nbytes(),
                      c10::DataPtr(device.data_ptr().get(), c10::Device(c10::kCPU)), nullptr,
                      /*resizable=*/false);
}

// `value` with every tensor in it replaced by `map(tensor)`: a tensor, a tensor list, a list of
// optional tensors; any other value as it is.
template <typename Map> c10::IValue mapTensors(const c10::IValue& value, Map map) {
  if (value.isTensor()) return map(value.toTensor());
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorList())
      list.push_back(map(t));
    return list;
  }
  if (value.isList() && value.toList().elementType()->kind() == c10::OptionalType::Kind) {
    c10::List<c10::optional<at::Tensor>> list;
    for (const c10::IValue& element : value.toListRef())
      list.push_back(element.isTensor() ? c10::optional<at::Tensor>(map(element.toTensor()))
                                        : c10::nullopt);
    return list;
  }
  return value;
}

// Visits every tensor in a value (a tensor, a tensor list, a list of optional tensors).
template <typename Visit> void forEachTensor(const c10::IValue& value, Visit visit) {
  if (value.isTensor()) return visit(value.toTensor());
  if (!value.isList()) return;
  for (const c10::IValue& element : value.toListRef())
    if (element.isTensor()) visit(element.toTensor());
}

// The tolerance a debug comparison allows: the device's kernels round differently from ATen's
// in the last bits (vector math); a wrong replay is off by far more.
std::pair<double, double> tolerance(at::ScalarType dtype) {
  switch (dtype) {
  case at::kHalf:
    return {1e-2, 1e-3};
  case at::kBFloat16:
    return {3e-2, 1e-2};
  default:
    return {1e-4, 1e-5};
  }
}

// "" when `device` and `expected` agree, otherwise what differs.
std::string difference(const at::Tensor& device, const at::Tensor& expected) {
  if (device.numel() == 0) return "";
  if (!at::isFloatingType(device.scalar_type()) && !at::isComplexType(device.scalar_type())) {
    if (at::equal(device, expected)) return "";
    return "values differ";
  }
  const auto [rtol, atol] = tolerance(device.scalar_type());
  if (at::isclose(device, expected, rtol, atol, /*equal_nan=*/true).all().item<bool>()) return "";
  std::ostringstream text;
  const at::Tensor gap = at::sub(device.to(at::kDouble), expected.to(at::kDouble));
  text << "largest difference " << at::nan_to_num(gap.abs(), INFINITY).max().item().toDouble();
  return text.str();
}

} // namespace

at::Tensor frozenTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(
      /*version_counter=*/0, /*allow_tensor_metadata_change=*/false));
}

void setSourceLocator(SourceLocator locator) { source_locator = locator; }

std::string locateSource() { return source_locator != nullptr ? source_locator() : std::string(); }

std::vector<c10::IValue> frozenValues(c10::ArrayRef<c10::IValue> values) {
  std::vector<c10::IValue> result;
  result.reserve(values.size());
  for (const c10::IValue& value : values)
    result.push_back(mapTensors(value, frozenTensor));
  return result;
}

const c10::Storage& DebugShadow::shadowOf(const at::Tensor& t) {
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  for (const auto& [device, shadow] : shadows_)
    if (device == impl) return shadow;
  c10::Storage shadow(c10::Storage::use_byte_size_t(), t.storage().nbytes(), c10::GetCPUAllocator(),
                      /*resizable=*/false);
  if (t.storage().nbytes() > 0)
    std::memcpy(shadow.data(), t.storage().data(), t.storage().nbytes());
  shadows_.emplace_back(impl, std::move(shadow));
  return shadows_.back().second;
}

at::Tensor DebugShadow::onCpu(const at::Tensor& t) {
  return onDevice(t) ? cpuView(shadowOf(t), t) : t;
}

static std::string callName(const DebugCall& call) {
  std::string text = opName(call.op);
  if (!call.where.empty()) text += " (written at " + call.where + ")";
  return text;
}

void DebugShadow::rerun(DebugCall call) {
  // Shadows of the results first: a functional result's storage is new (its bytes are whatever
  // the allocator left), an in-place result's is an argument's.
  for (const c10::IValue& value : call.results)
    forEachTensor(value, [&](const at::Tensor& t) {
      if (onDevice(t)) shadowOf(t);
    });
  torch::jit::Stack stack;
  for (const c10::IValue& value : call.arguments) {
    if (value.isDevice() && !value.toDevice().is_cpu())
      stack.emplace_back(c10::Device(c10::kCPU));
    else
      stack.push_back(mapTensors(value, [&](const at::Tensor& t) { return onCpu(t); }));
  }
  try {
    call.op.callBoxed(&stack);
  } catch (const std::exception& error) {
    failures_.push_back("[adaptive debug] " + callName(call) +
                        ": ATen's CPU kernel could not rerun it: " + error.what());
    return;
  }
  for (size_t i = 0; i < call.results.size() && i < stack.size(); ++i) {
    if (!call.results[i].isTensor() || !stack[i].isTensor()) continue;
    const at::Tensor& result = call.results[i].toTensor();
    if (!onDevice(result)) continue;
    at::Tensor target = cpuView(shadowOf(result), result);
    const at::Tensor& computed = stack[i].toTensor();
    if (computed.storage().unsafeGetStorageImpl() != target.storage().unsafeGetStorageImpl())
      target.copy_(computed);
  }
  calls_.push_back(std::move(call));
}

std::vector<std::string> DebugShadow::compareAndReset() {
  std::vector<std::string> differences = std::move(failures_);
  for (const DebugCall& call : calls_) {
    for (const c10::IValue& value : call.results) {
      if (!value.isTensor() || !onDevice(value.toTensor())) continue;
      const at::Tensor& result = value.toTensor();
      const std::string differs = difference(cpuView(deviceBytes(result.storage()), result),
                                             cpuView(shadowOf(result), result));
      if (differs.empty()) continue;
      differences.push_back("[adaptive debug] " + callName(call) +
                            ": its result in the window differs from the op run eagerly by "
                            "ATen on the CPU (" +
                            differs + ")");
    }
  }
  reset();
  return differences;
}

void DebugShadow::reset() {
  calls_.clear();
  shadows_.clear();
  failures_.clear();
}

} // namespace torchneuron::tracer

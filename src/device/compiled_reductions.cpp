// Reductions and row-wise ops (softmax) as compiled kernels. Every ATen overload the registry
// lists for a reduction (ReductionRule::overloads) is read by argument name (self, dim, keepdim,
// dtype, out, ...) into one ReductionCall, its dtypes decided by the registry's rule, then
// planned and executed (reduction_launch.h). Calls the rule or the kernels do not cover
// (complex, empty max, mixed output dtypes) run on the CPU fallback, which raises ATen's own
// errors.

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/kernel_operand.h"
#include "device/metrics.h"
#include "device/reduction_launch.h"
#include "fusion/op_registry.h"

namespace torchneuron {
namespace {

using fusion::ReductionResult;
using fusion::ReductionRule;

// How an ATen reduction overload maps onto a registry reduction.
struct ReductionBinding {
  const fusion::ReductionOp* op;
  LaunchCounter* launches;
};

std::unordered_map<const c10::FunctionSchema*, ReductionBinding>& reductionBindings() {
  static auto* table = new std::unordered_map<const c10::FunctionSchema*, ReductionBinding>();
  return *table;
}

// Arguments by schema name.
struct NamedArgs {
  const c10::FunctionSchema& schema;
  c10::ArrayRef<c10::IValue> values;

  const c10::IValue* find(const std::string& name) const {
    auto index = schema.argumentIndexWithName(name);
    return index ? &values[*index] : nullptr;
  }
  bool has(const std::string& name) const {
    const c10::IValue* v = find(name);
    return v != nullptr && !v->isNone();
  }
  TensorList written() const {
    TensorList outputs;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const auto& alias = schema.arguments()[i].alias_info();
      if (alias && alias->isWrite()) outputs.push_back(values[i].toTensor());
    }
    return outputs;
  }
};

// The reduced dimensions named by `dim` (None or [] mean all of them), sorted, or nullopt when one
// is named twice (after wrapping: 0 and -1 of a 0-d or 1-d tensor), which is ATen's error: the
// call then runs on the CPU, which raises it after the checks ATen makes first.
c10::optional<c10::SmallVector<int64_t, 6>> reducedDims(const at::Tensor& self,
                                                        const c10::IValue* dim) {
  const int64_t rank = std::max<int64_t>(self.dim(), 1);
  c10::SmallVector<int64_t, 6> dims;
  if (dim != nullptr && dim->isInt()) {
    dims.push_back(at::maybe_wrap_dim(dim->toInt(), rank));
  } else if (dim != nullptr && dim->isIntList() && !dim->toIntList().empty()) {
    for (int64_t d : dim->toIntList())
      dims.push_back(at::maybe_wrap_dim(d, rank));
  } else {
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) return c10::nullopt;
  return dims;
}

bool isNarrowFloat(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// `value` as the nearest float (round to nearest even), infinite beyond float's range.
double roundedToFloat(double value) {
  // Half a unit in the last place above FLT_MAX rounds to infinity.
  const double overflow =
      static_cast<double>(std::numeric_limits<float>::max()) + std::ldexp(1.0, 103);
  if (std::isnan(value) || std::abs(value) < overflow) return static_cast<float>(value);
  return std::copysign(INFINITY, value);
}

// The result dtype the rule gives (ReductionResult), or nullopt when the kernels do not run it.
c10::optional<at::ScalarType> resultDtype(const ReductionRule& rule, const NamedArgs& args,
                                          const ReductionCall& call) {
  const at::ScalarType input = call.inputs[0].scalar_type();
  c10::optional<at::ScalarType> requested;
  if (args.has("dtype")) requested = args.find("dtype")->toScalarType();
  c10::optional<at::ScalarType> out;
  if (!call.outputs.empty()) out = call.outputs[0].scalar_type();
  switch (rule.result) {
  case ReductionResult::kAccumulated: {
    const at::ScalarType result = requested                         ? *requested
                                  : out                             ? *out
                                  : at::isIntegralType(input, true) ? at::kLong
                                                                    : input;
    if (result == at::kBool) return c10::nullopt;
    return result;
  }
  case ReductionResult::kRequestedOrOut:
    return requested ? *requested : out ? *out : input;
  case ReductionResult::kRequested:
    // linalg.vector_norm refuses a dtype= the input narrows to (check_linalg_norm_dtype): the
    // CPU raises ATen's error.
    if (requested && c10::promoteTypes(input, *requested) != *requested) return c10::nullopt;
    return requested ? *requested : input;
  case ReductionResult::kFloating:
    return at::isFloatingType(input) ? input : c10::typeMetaToScalarType(c10::get_default_dtype());
  case ReductionResult::kInput:
  case ReductionResult::kValuesAndIndices:
    return input;
  case ReductionResult::kIndices:
    return at::kLong;
  case ReductionResult::kTruth:
    return input == at::kByte ? at::kByte : at::kBool;
  }
  return c10::nullopt;
}

// Fills in dtypes, constants and params from the registry's rule; false when the kernels do not
// run this call.
bool decideTypes(const ReductionRule& rule, const NamedArgs& args, ReductionCall& call) {
  const at::ScalarType input = call.inputs[0].scalar_type();
  for (const at::Tensor& t : call.inputs)
    if (t.scalar_type() != input) return false;
  if (!rule.bool_input && input == at::kBool) return false;
  if (!rule.false_only.empty() && args.has(rule.false_only) && args.find(rule.false_only)->toBool())
    return false;
  if (!rule.input_dtype.empty() && args.has(rule.input_dtype) &&
      args.find(rule.input_dtype)->toScalarType() != input)
    return false;
  const c10::optional<at::ScalarType> result = resultDtype(rule, args, call);
  if (!result) return false;
  if (rule.floats_only && !(at::isFloatingType(input) && at::isFloatingType(*result))) return false;
  const bool computes_in_result = rule.result == ReductionResult::kAccumulated ||
                                  rule.result == ReductionResult::kRequestedOrOut ||
                                  rule.result == ReductionResult::kRequested ||
                                  rule.result == ReductionResult::kFloating;
  call.compute = computes_in_result ? *result : input;
  call.output_dtypes = {*result};
  if (rule.result == ReductionResult::kValuesAndIndices) call.output_dtypes.push_back(at::kLong);
  call.needs_elements = rule.needs_elements;
  for (const fusion::ReductionParamSpec& spec : rule.params) {
    double value = spec.fallback;
    for (const std::string& name : spec.args)
      if (args.has(name)) {
        const c10::IValue& given = *args.find(name);
        value = given.isBool() ? (given.toBool() ? 1 : 0) : given.toScalar().toDouble();
        break;
      }
    if (spec.rounded_to_float) value = roundedToFloat(value);
    call.params.push_back(value);
    if (!spec.special_values.empty()) {
      const auto found = std::find(spec.special_values.begin(), spec.special_values.end(), value);
      call.constants.push_back(found - spec.special_values.begin());
    }
    if (!spec.reduces_nothing_for.empty())
      call.needs_elements |=
          std::find(spec.reduces_nothing_for.begin(), spec.reduces_nothing_for.end(), value) ==
          spec.reduces_nothing_for.end();
  }
  for (size_t i = 0; i < call.outputs.size(); ++i)
    if (call.outputs[i].scalar_type() != call.output_dtypes.at(i)) return false;
  if (!rule.exact_in_half && (isNarrowFloat(input) || isNarrowFloat(call.compute))) return false;
  return true;
}

} // namespace

bool runCompiledReduction(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const ReductionBinding& binding = reductionBindings().at(&handle.schema());
  const ReductionRule& rule = binding.op->rule;
  const c10::FunctionSchema& schema = handle.schema();
  const size_t count = schema.arguments().size();
  NamedArgs args{schema, torch::jit::last(*stack, count)};
  ReductionCall call;
  call.op = binding.op;
  for (const std::string& name : rule.inputs)
    call.inputs.push_back(args.find(name)->toTensor());
  call.outputs = args.written();
  if (args.find("keepdim")) call.keepdim = args.find("keepdim")->toBool();
  const auto dims = reducedDims(call.inputs[0], args.find("dim"));
  if (!dims) return false;
  call.dims = *dims;
  for (const at::Tensor& t : call.inputs)
    if (!isKernelOperand(t) || t.device().type() != kNeuronDeviceType) return false;
  if (!decideTypes(rule, args, call)) return false;
  c10::optional<TensorList> result = launchReduction(call, binding.launches);
  if (!result) return false;
  torch::jit::drop(*stack, count);
  for (at::Tensor& t : *result)
    torch::jit::push(*stack, std::move(t));
  return true;
}

std::vector<std::string> bindCompiledReductionOverloads() {
  std::vector<std::string> overloads;
  for (const fusion::ReductionOp& op : fusion::reductionOps()) {
    for (const std::string& overload : op.rule.overloads) {
      const size_t dot = overload.find('.');
      const c10::OperatorName name("aten::" + overload.substr(0, dot),
                                   dot == std::string::npos ? "" : overload.substr(dot + 1));
      auto handle = c10::Dispatcher::singleton().findOp(name);
      TORCH_INTERNAL_ASSERT(handle && handle->hasSchema(), "[device] no ATen overload ", overload,
                            " (registry reduction ", op.name, ")");
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
      reductionBindings().emplace(
          &handle->schema(),
          ReductionBinding{&op, launchCounter(LaunchKind::kCompiled, "aten::" + overload)});
      overloads.push_back(overload);
    }
  }
  return overloads;
}

} // namespace torchneuron

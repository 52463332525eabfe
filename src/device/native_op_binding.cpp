#include "device/native_op_binding.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "device/plan_replay.h"

namespace torchneuron {
namespace {

template <typename Specs> int indexOf(const Specs& specs, const std::string& name) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].arg == name) return static_cast<int>(i);
  return -1;
}

bool isTensorOrScalar(const c10::TypePtr& type) {
  const c10::TypePtr base = type->kind() == c10::TypeKind::OptionalType
                                ? type->castRaw<c10::OptionalType>()->getElementType()
                                : type;
  return base->kind() == c10::TypeKind::TensorType || base->kind() == c10::TypeKind::NumberType;
}

bool isScalar(const c10::TypePtr& type) {
  const c10::TypePtr base = type->kind() == c10::TypeKind::OptionalType
                                ? type->castRaw<c10::OptionalType>()->getElementType()
                                : type;
  return base->kind() == c10::TypeKind::NumberType;
}

// Whether this overload refuses an out= tensor of another dtype (fusion::OutputDtypeRule).
bool outputDtypeExact(const c10::FunctionSchema& schema, const fusion::ElementwiseOp& op) {
  using fusion::OutputDtypeRule;
  if (op.output_dtype == OutputDtypeRule::kCasts) return false;
  if (op.output_dtype == OutputDtypeRule::kExact) return true;
  const auto operand = schema.argumentIndexWithName(op.exact_dtype_operand);
  TORCH_INTERNAL_ASSERT(operand, "registry op ", op.name, " names no argument ",
                        op.exact_dtype_operand, " in ", schema);
  const bool number = isScalar(schema.arguments()[*operand].type());
  return number == (op.output_dtype == OutputDtypeRule::kExactWithNumber);
}

bool isConstantType(const c10::TypePtr& type) {
  const c10::TypePtr base = type->kind() == c10::TypeKind::OptionalType
                                ? type->castRaw<c10::OptionalType>()->getElementType()
                                : type;
  return base->kind() == c10::TypeKind::StringType || base->kind() == c10::TypeKind::BoolType ||
         base->kind() == c10::TypeKind::IntType;
}

int64_t constantValue(const c10::IValue& value, const fusion::ConstantSpec& spec) {
  if (value.isNone()) return -1;
  if (value.isBool()) return value.toBool() ? 1 : 0;
  if (value.isInt()) return value.toInt();
  const std::string text = value.toStringRef();
  for (size_t i = 0; i < spec.choices.size(); ++i)
    if (spec.choices[i] == text) return static_cast<int64_t>(i);
  return -2; // a value the lowering does not know: the CPU decides (and raises)
}

at::Tensor wrappedScalar(const c10::Scalar& scalar) {
  at::Tensor tensor = at::scalar_to_tensor(scalar);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

} // namespace

bool bindCall(const NativeOpBinding& binding, c10::ArrayRef<c10::IValue> args, BoundCall& call) {
  const fusion::ElementwiseOp& op = *binding.op;
  c10::SmallVector<at::Tensor, 4> by_operand(op.operands.size());
  c10::SmallVector<c10::optional<c10::Scalar>, 4> scalar_of(op.operands.size());
  c10::SmallVector<bool, 4> given(op.operands.size(), false);
  call.params.assign(op.params.size(), c10::Scalar());
  c10::SmallVector<bool, 4> param_given(op.params.size(), false);
  call.constants.assign(op.constants.size(), -1);
  for (size_t i = 0; i < args.size(); ++i) {
    const BoundArgument& role = binding.arguments[i];
    const c10::IValue& value = args[i];
    switch (role.role) {
    case ArgumentRole::kOutput:
      call.output = value.toTensor();
      break;
    case ArgumentRole::kOperandAndOutput:
      call.output = value.toTensor();
      by_operand[role.index] = call.output;
      given[role.index] = true;
      break;
    case ArgumentRole::kOperand:
      if (value.isNone()) break;
      if (value.isScalar()) {
        const c10::Scalar scalar = value.toScalar();
        if (scalar.isComplex()) return false;
        // ATen's scalar kernels each treat a NaN number their own way (clamp(min=nan)
        // ignores it, clamp_min(x, nan) and fill_(nan) do not): the CPU decides.
        if (scalar.isFloatingPoint() && std::isnan(scalar.toDouble())) return false;
        by_operand[role.index] = wrappedScalar(scalar);
        captureNumberOperand(by_operand[role.index]);
        scalar_of[role.index] = scalar;
      } else {
        by_operand[role.index] = value.toTensor();
      }
      given[role.index] = true;
      break;
    case ArgumentRole::kParam:
      if (value.isNone()) break;
      call.params[role.index] = value.toScalar();
      param_given[role.index] = true;
      break;
    case ArgumentRole::kConstant:
      call.constants[role.index] = constantValue(value, op.constants[role.index]);
      if (call.constants[role.index] == -2) return false;
      break;
    }
  }
  for (size_t i = 0; i < op.params.size(); ++i)
    if (!param_given[i]) call.params[i] = c10::Scalar(op.params[i].fallback);
  bool any_optional_given = op.optional_operands.empty();
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const bool optional = std::find(op.optional_operands.begin(), op.optional_operands.end(),
                                    op.operands[i].arg) != op.optional_operands.end();
    if (optional) {
      call.present.push_back(given[i]);
      any_optional_given |= given[i];
    }
    if (!given[i]) continue;
    call.operands.push_back(by_operand[i]);
    call.specs.push_back(&op.operands[i]);
    call.scalars.push_back(scalar_of[i]);
  }
  return any_optional_given; // clamp() with neither bound is ATen's error to raise
}

const fusion::ElementwiseOp* registryOpFor(const std::string& aten_name) {
  if (aten_name.rfind("aten::", 0) != 0) return nullptr;
  std::string base = aten_name.substr(6);
  if (!base.empty() && base.back() == '_' && base.rfind("__", 0) != 0) base.pop_back();
  return fusion::findElementwiseOp(base);
}

c10::optional<NativeOpBinding> bindSchema(const c10::FunctionSchema& schema,
                                          const fusion::ElementwiseOp& op) {
  if (schema.returns().size() != 1 ||
      schema.returns()[0].type()->kind() != c10::TypeKind::TensorType)
    return c10::nullopt;
  NativeOpBinding binding;
  binding.op = &op;
  binding.name = schema.operator_name().name +
                 (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  std::vector<bool> operand_seen(op.operands.size(), false);
  int outputs = 0;
  for (const c10::Argument& argument : schema.arguments()) {
    const bool written = argument.alias_info() && argument.alias_info()->isWrite();
    const int operand = indexOf(op.operands, argument.name());
    if (written) {
      if (argument.type()->kind() != c10::TypeKind::TensorType) return c10::nullopt;
      ++outputs;
      binding.in_place = argument.name() == "self";
      if (operand >= 0) {
        operand_seen[operand] = true;
        binding.arguments.push_back({ArgumentRole::kOperandAndOutput, operand});
      } else {
        binding.arguments.push_back({ArgumentRole::kOutput, 0});
      }
      continue;
    }
    if (operand >= 0 && isTensorOrScalar(argument.type())) {
      operand_seen[operand] = true;
      binding.arguments.push_back({ArgumentRole::kOperand, operand});
      continue;
    }
    const int param = indexOf(op.params, argument.name());
    if (param >= 0 && isScalar(argument.type())) {
      binding.arguments.push_back({ArgumentRole::kParam, param});
      continue;
    }
    const int constant = indexOf(op.constants, argument.name());
    if (constant >= 0 && isConstantType(argument.type())) {
      binding.arguments.push_back({ArgumentRole::kConstant, constant});
      continue;
    }
    return c10::nullopt; // an argument the registry does not describe
  }
  if (outputs > 1) return c10::nullopt;
  binding.writes_output = outputs == 1;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const bool optional = std::find(op.optional_operands.begin(), op.optional_operands.end(),
                                    op.operands[i].arg) != op.optional_operands.end();
    if (!operand_seen[i] && !optional) return c10::nullopt;
  }
  binding.output_dtype_exact = outputDtypeExact(schema, op);
  return binding;
}

} // namespace torchneuron

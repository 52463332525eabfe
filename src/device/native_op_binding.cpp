#include "device/native_op_binding.h"

#include <algorithm>

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

bool isConstantType(const c10::TypePtr& type) {
  const c10::TypePtr base = type->kind() == c10::TypeKind::OptionalType
                                ? type->castRaw<c10::OptionalType>()->getElementType()
                                : type;
  return base->kind() == c10::TypeKind::StringType || base->kind() == c10::TypeKind::BoolType ||
         base->kind() == c10::TypeKind::IntType;
}

} // namespace

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
  return binding;
}

} // namespace torchneuron

#include "device/integer_division_guard.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>

namespace torchneuron {
namespace {

bool isIntegerDivision(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                       size_t arguments_begin) {
  static constexpr std::array<const char*, 8> kNames = {
      "aten::div",       "aten::div_",       "aten::floor_divide", "aten::floor_divide_",
      "aten::remainder", "aten::remainder_", "aten::fmod",         "aten::fmod_"};
  const std::string& name = schema.name();
  bool named = false;
  for (const char* candidate : kNames)
    named = named || name == candidate;
  if (!named) return false;
  if (name != "aten::div" && name != "aten::div_") return true;
  // True division (no rounding mode) computes in a floating dtype.
  const auto rounding = schema.argumentIndexWithName("rounding_mode");
  return rounding && !stack[arguments_begin + *rounding].isNone();
}

// The argument as a tensor for type promotion and comparison: a Python number becomes a
// wrapped number, which ATen's promotion ranks below tensors.
at::Tensor operand(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor();
  at::Tensor wrapped = at::scalar_to_tensor(value.toScalar());
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  return wrapped;
}

// The call's dividend and divisor ("self" and "other": a tensor or a number each), or nullopt for
// a schema without both.
struct DivisionOperands {
  const c10::IValue& self;
  const c10::IValue& other;
};
std::optional<DivisionOperands> divisionOperands(const c10::FunctionSchema& schema,
                                                 const torch::jit::Stack& stack,
                                                 size_t arguments_begin) {
  const auto self_index = schema.argumentIndexWithName("self");
  const auto other_index = schema.argumentIndexWithName("other");
  if (!self_index || !other_index) return std::nullopt;
  const c10::IValue& self = stack[arguments_begin + *self_index];
  const c10::IValue& other = stack[arguments_begin + *other_index];
  if (!(self.isTensor() || self.isScalar()) || !(other.isTensor() || other.isScalar()))
    return std::nullopt;
  return DivisionOperands{self, other};
}

} // namespace

bool isIntegerDivisionCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t count = schema.arguments().size();
  if (stack.size() < count) return false;
  const size_t arguments_begin = stack.size() - count;
  if (!isIntegerDivision(schema, stack, arguments_begin)) return false;
  const std::optional<DivisionOperands> operands = divisionOperands(schema, stack, arguments_begin);
  return operands &&
         at::isIntegralType(at::result_type(operand(operands->self), operand(operands->other)),
                            /*includeBool=*/true);
}

void checkIntegerDivisionOverflow(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                  size_t arguments_begin) {
  const c10::FunctionSchema& schema = op.schema();
  if (!isIntegerDivision(schema, stack, arguments_begin)) return;
  const std::optional<DivisionOperands> operands = divisionOperands(schema, stack, arguments_begin);
  if (!operands) return;
  const c10::IValue& self_value = operands->self;
  const c10::IValue& other_value = operands->other;
  if (other_value.isScalar() && other_value.toScalar().isIntegral(false) &&
      other_value.toScalar().toLong() != -1)
    return;
  const at::Tensor self = operand(self_value), other = operand(other_value);
  const at::ScalarType dtype = at::result_type(self, other);
  if (dtype != at::kInt && dtype != at::kLong) return;
  const int64_t minimum = dtype == at::kLong ? std::numeric_limits<int64_t>::min()
                                             : std::numeric_limits<int32_t>::min();
  const bool overflows =
      at::logical_and(at::eq(self.to(dtype), minimum), at::eq(other.to(dtype), -1))
          .any()
          .item<bool>();
  TORCH_CHECK(!overflows, "integer division overflow in ", schema.name(), ": the ", dtype,
              " minimum ", minimum, " divided by -1 has no ", dtype,
              " result (ATen's CPU kernel would stop the process with SIGFPE)");
}

} // namespace torchneuron

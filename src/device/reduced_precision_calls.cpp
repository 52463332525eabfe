#include "device/reduced_precision_calls.h"

#include <c10/core/ScalarType.h>

namespace torchneuron {
namespace {

enum class Precision { kOther, kReduced, kComplex };

Precision precisionOf(at::ScalarType dtype) {
  if (at::isComplexType(dtype)) return Precision::kComplex;
  if (dtype == at::kHalf || dtype == at::kBFloat16) return Precision::kReduced;
  return Precision::kOther;
}

// The most decisive precision among `value`'s tensors and dtype: complex over reduced.
Precision precisionOf(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    return tensor.defined() ? precisionOf(tensor.scalar_type()) : Precision::kOther;
  }
  if (value.isTensorList()) {
    Precision result = Precision::kOther;
    for (const at::Tensor& tensor : value.toTensorList().vec()) {
      if (!tensor.defined()) continue;
      const Precision precision = precisionOf(tensor.scalar_type());
      if (precision == Precision::kComplex) return precision;
      if (precision == Precision::kReduced) result = precision;
    }
    return result;
  }
  return Precision::kOther;
}

} // namespace

bool isReducedPrecisionCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t count = schema.arguments().size();
  if (stack.size() < count) return false;
  const size_t begin = stack.size() - count;
  bool reduced = false;
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& value = stack[begin + i];
    Precision precision = precisionOf(value);
    // A dtype= argument (a ScalarType, which schemas type as int) names the result's dtype.
    if (schema.arguments()[i].name() == "dtype" && value.isInt())
      precision = precisionOf(static_cast<at::ScalarType>(value.toInt()));
    if (precision == Precision::kComplex) return false;
    reduced = reduced || precision == Precision::kReduced;
  }
  return reduced;
}

} // namespace torchneuron

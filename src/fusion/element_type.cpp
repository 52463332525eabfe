#include "fusion/element_type.h"

#include <c10/util/Exception.h>

namespace torchneuron::fusion {

bool isKernelDtype(c10::ScalarType dtype) {
  switch (dtype) {
  case c10::kBool:
  case c10::kByte:
  case c10::kChar:
  case c10::kShort:
  case c10::kInt:
  case c10::kLong:
  case c10::kHalf:
  case c10::kBFloat16:
  case c10::kFloat:
  case c10::kDouble:
    return true;
  default:
    return false;
  }
}

ElementType storageType(c10::ScalarType dtype) {
  switch (dtype) {
  case c10::kBool:
    return {NumberKind::kBool, 8, "i8"};
  case c10::kByte:
    return {NumberKind::kUnsigned, 8, "i8"};
  case c10::kChar:
    return {NumberKind::kSigned, 8, "i8"};
  case c10::kShort:
    return {NumberKind::kSigned, 16, "i16"};
  case c10::kInt:
    return {NumberKind::kSigned, 32, "i32"};
  case c10::kLong:
    return {NumberKind::kSigned, 64, "i64"};
  case c10::kHalf:
    return {NumberKind::kFloat, 16, "f16"};
  // bfloat16 is held as its bit pattern (see isBFloat16Bits).
  case c10::kBFloat16:
    return {NumberKind::kFloat, 16, "i16"};
  case c10::kFloat:
    return {NumberKind::kFloat, 32, "f32"};
  case c10::kDouble:
    return {NumberKind::kFloat, 64, "f64"};
  default:
    TORCH_CHECK(false, "[fusion] dtype ", dtype, " has no kernel storage type");
  }
}

ElementType computeType(c10::ScalarType dtype) {
  switch (dtype) {
  case c10::kBool:
    return {NumberKind::kBool, 1, "i1"};
  case c10::kHalf:
  case c10::kBFloat16:
    return {NumberKind::kFloat, 32, "f32"};
  default:
    return storageType(dtype);
  }
}

} // namespace torchneuron::fusion

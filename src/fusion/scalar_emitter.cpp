#include "fusion/scalar_emitter.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace torchneuron::fusion {
namespace {

std::string floatBits(double value, const ElementType& type) {
  char text[32];
  if (type.mlir == "f64") {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    std::snprintf(text, sizeof text, "0x%016llX", static_cast<unsigned long long>(bits));
  } else {
    TORCH_INTERNAL_ASSERT(type.mlir == "f32", "float constants are f32 or f64, got ", type.mlir);
    const float narrowed = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &narrowed, sizeof bits);
    std::snprintf(text, sizeof text, "0x%08X", bits);
  }
  return text;
}

} // namespace

ElementType boolType() { return {NumberKind::kBool, 1, "i1"}; }

Value storeElementwiseResult(ScalarEmitter& e, const Value& result, c10::ScalarType compute,
                             c10::ScalarType output) {
  const ElementType wide = computeType(compute), narrow = storageType(compute);
  const bool computed_wider = wide.isFloat() && result.type.mlir == wide.mlir &&
                              narrow.mlir != wide.mlir && output != compute;
  // Rounded, then widened again: the conversion to the output starts from f32 (no f16 constant
  // reaches the comparison with zero that makes a bool).
  const Value rounded = computed_wider ? e.roundThrough(result, narrow) : result;
  return e.convert(rounded, storageType(output));
}

std::string ScalarEmitter::freshName() { return "%" + prefix_ + std::to_string(next_++); }

Value ScalarEmitter::emit(const std::string& rhs, const ElementType& result) {
  Value value{freshName(), result};
  body_ += indent_ + value.name + " = " + rhs + "\n";
  return value;
}

Value ScalarEmitter::floatConstant(double value, const ElementType& type) {
  return emit("arith.constant " + floatBits(value, type) + " : " + type.mlir, type);
}

Value ScalarEmitter::intConstant(int64_t value, const ElementType& type) {
  if (type.kind == NumberKind::kBool && type.bits == 1)
    return emit(std::string("arith.constant ") + (value ? "true" : "false"), type);
  return emit("arith.constant " + std::to_string(value) + " : " + type.mlir, type);
}

Value ScalarEmitter::constantLike(double value, const ElementType& type) {
  if (type.isFloat()) return floatConstant(value, type);
  if (type.kind == NumberKind::kBool) return intConstant(value != 0 ? 1 : 0, type);
  return intConstant(static_cast<int64_t>(value), type);
}

Value ScalarEmitter::convert(const Value& value, const ElementType& to) {
  const ElementType& from = value.type;
  if (from.mlir == to.mlir && from.kind == to.kind) return value;
  const ElementType f32{NumberKind::kFloat, 32, "f32"};
  if (from.isBFloat16Bits()) { // exact: the bits are the high half of an f32
    if (to.mlir != "f32") return convert(convert(value, f32), to);
    const ElementType i32{NumberKind::kUnsigned, 32, "i32"};
    const Value wide = emit("arith.extui " + value.name + " : i16 to i32", i32);
    const Value shifted = binary("arith.shli", wide, intConstant(16, i32));
    return emit("arith.bitcast " + shifted.name + " : i32 to f32", f32);
  }
  if (to.isBFloat16Bits() && from.mlir != "f32") return convert(convert(value, f32), to);
  if (to.isBFloat16Bits()) return roundToBFloat16(value);
  const std::string types = " : " + from.mlir + " to " + to.mlir;
  const bool from_i1 = from.kind == NumberKind::kBool && from.bits == 1;
  const bool to_i1 = to.kind == NumberKind::kBool && to.bits == 1;
  if (to_i1) { // x != 0 (NaN is true, as in C++)
    if (from.isFloat()) return compare("une", value, floatConstant(0.0, from));
    return compare("ne", value, intConstant(0, from));
  }
  if (to.kind == NumberKind::kBool && !from_i1) return convert(convert(value, boolType()), to);
  if (from.isFloat() && to.isFloat()) {
    // bf16 <-> f16, and f64 -> 16-bit floats, go through f32: that is how c10::Half and
    // c10::BFloat16 convert (so results round as in ATen), and it needs no runtime routine.
    if (from.bits == to.bits || (from.bits == 64 && to.bits == 16))
      return convert(convert(value, f32), to);
    return emit((from.bits < to.bits ? "arith.extf " : "arith.truncf ") + value.name + types, to);
  }
  // Integers and 16-bit floats meet through f32, as c10::Half and c10::BFloat16 convert (they
  // construct from and convert to float only).
  if ((from.isFloat() && from.bits == 16) || (to.isFloat() && to.bits == 16))
    return convert(convert(value, f32), to);
  if (from.isFloat()) {
    // To 8 and 16 bits as C++'s static_cast compiles on x86 (ATen's conversion): to a 32-bit
    // integer, then its low bits, so out-of-range values wrap (40000.f to int16: -25536; NaN and
    // inf: 0). A direct conversion is poison out of range, and LLVM then chose saturating
    // instructions where it vectorized a short loop 4 wide (32767).
    if (to.bits < 32) {
      const ElementType i32{NumberKind::kSigned, 32, "i32"};
      const Value wide = emit("arith.fptosi " + value.name + " : " + from.mlir + " to i32", i32);
      return emit("arith.trunci " + wide.name + " : i32 to " + to.mlir, to);
    }
    return emit((to.kind == NumberKind::kUnsigned ? "arith.fptoui " : "arith.fptosi ") +
                    value.name + types,
                to);
  }
  if (to.isFloat()) {
    const bool unsigned_source = from.kind != NumberKind::kSigned;
    return emit((unsigned_source ? "arith.uitofp " : "arith.sitofp ") + value.name + types, to);
  }
  // integer or bool (0/1) to a wider, narrower or same-width integer or bool byte
  if (from.bits == to.bits) return Value{value.name, to};
  if (from.bits > to.bits) return emit("arith.trunci " + value.name + types, to);
  const bool zero_extend = from.kind != NumberKind::kSigned;
  return emit((zero_extend ? "arith.extui " : "arith.extsi ") + value.name + types, to);
}

// c10::BFloat16's round_to_nearest_even, in integer operations: NaN becomes 0x7FC0. The result
// is the bfloat16's bits (ElementType::isBFloat16Bits).
Value ScalarEmitter::roundThrough(const Value& value, const ElementType& narrow) {
  return convert(convert(value, narrow), value.type);
}

Value ScalarEmitter::roundToBFloat16(const Value& value) {
  TORCH_INTERNAL_ASSERT(value.type.mlir == "f32", "bf16 rounding from ", value.type.mlir);
  const ElementType i32{NumberKind::kUnsigned, 32, "i32"};
  const Value bits = emit("arith.bitcast " + value.name + " : f32 to i32", i32);
  const Value lsb =
      binary("arith.andi", binary("arith.shrui", bits, intConstant(16, i32)), intConstant(1, i32));
  const Value rounded =
      binary("arith.shrui", add(add(bits, intConstant(0x7FFF, i32)), lsb), intConstant(16, i32));
  const Value chosen = select(isNan(value), intConstant(0x7FC0, i32), rounded);
  return emit("arith.trunci " + chosen.name + " : i32 to i16", {NumberKind::kFloat, 16, "i16"});
}

Value ScalarEmitter::unary(const std::string& op, const Value& a) {
  return emit(op + " " + a.name + " : " + a.type.mlir, a.type);
}

Value ScalarEmitter::binary(const std::string& op, const Value& a, const Value& b) {
  TORCH_INTERNAL_ASSERT(a.type.mlir == b.type.mlir, op, " on ", a.type.mlir, " and ", b.type.mlir);
  return emit(op + " " + a.name + ", " + b.name + " : " + a.type.mlir, a.type);
}

Value ScalarEmitter::fma(const Value& a, const Value& b, const Value& c) {
  return emit("math.fma " + a.name + ", " + b.name + ", " + c.name + " : " + a.type.mlir, a.type);
}

Value ScalarEmitter::compare(const std::string& predicate, const Value& a, const Value& b) {
  TORCH_INTERNAL_ASSERT(a.type.mlir == b.type.mlir, "compare on ", a.type.mlir, " and ",
                        b.type.mlir);
  const char* op = a.type.isFloat() ? "arith.cmpf " : "arith.cmpi ";
  return emit(op + predicate + ", " + a.name + ", " + b.name + " : " + a.type.mlir, boolType());
}

Value ScalarEmitter::select(const Value& condition, const Value& if_true, const Value& if_false) {
  return emit("arith.select " + condition.name + ", " + if_true.name + ", " + if_false.name +
                  " : " + if_true.type.mlir,
              if_true.type);
}

Value ScalarEmitter::libm(const std::string& name, const std::vector<Value>& args) {
  const ElementType& type = args.front().type;
  TORCH_INTERNAL_ASSERT(type.mlir == "f32" || type.mlir == "f64", "libm on ", type.mlir);
  const std::string symbol = type.mlir == "f32" ? name + "f" : name;
  std::string operands, types;
  for (const Value& arg : args) {
    operands += (operands.empty() ? "" : ", ") + arg.name;
    types += (types.empty() ? "" : ", ") + arg.type.mlir;
  }
  declarations_.insert("func.func private @" + symbol + "(" + types + ") -> " + type.mlir +
                       " attributes {llvm.readnone}");
  return emit("func.call @" + symbol + "(" + operands + ") : (" + types + ") -> " + type.mlir,
              type);
}

Value ScalarEmitter::add(const Value& a, const Value& b) {
  return binary(a.type.isFloat() ? "arith.addf" : "arith.addi", a, b);
}
Value ScalarEmitter::sub(const Value& a, const Value& b) {
  return binary(a.type.isFloat() ? "arith.subf" : "arith.subi", a, b);
}
Value ScalarEmitter::mul(const Value& a, const Value& b) {
  return binary(a.type.isFloat() ? "arith.mulf" : "arith.muli", a, b);
}
Value ScalarEmitter::div(const Value& a, const Value& b) { return binary("arith.divf", a, b); }

Value ScalarEmitter::accumulate(const Value& acc, const Value& x) {
  if (!acc.type.isFloat()) return add(acc, x);
  return emit("arith.addf " + acc.name + ", " + x.name + " fastmath<reassoc> : " + acc.type.mlir,
              acc.type);
}

Value ScalarEmitter::accumulateProduct(const Value& acc, const Value& x) {
  if (!acc.type.isFloat()) return mul(acc, x);
  return emit("arith.mulf " + acc.name + ", " + x.name + " fastmath<reassoc> : " + acc.type.mlir,
              acc.type);
}
Value ScalarEmitter::neg(const Value& a) {
  if (a.type.isFloat()) return unary("arith.negf", a);
  return sub(intConstant(0, a.type), a);
}

namespace {
const char* orderPredicate(const ElementType& type, const char* fp, const char* s, const char* u) {
  if (type.isFloat()) return fp;
  return type.kind == NumberKind::kSigned ? s : u;
}
} // namespace

Value ScalarEmitter::lt(const Value& a, const Value& b) {
  return compare(orderPredicate(a.type, "olt", "slt", "ult"), a, b);
}
Value ScalarEmitter::le(const Value& a, const Value& b) {
  return compare(orderPredicate(a.type, "ole", "sle", "ule"), a, b);
}
Value ScalarEmitter::gt(const Value& a, const Value& b) {
  return compare(orderPredicate(a.type, "ogt", "sgt", "ugt"), a, b);
}
Value ScalarEmitter::bits(const Value& a) {
  TORCH_INTERNAL_ASSERT(a.type.mlir == "f32" || a.type.mlir == "f64", "bits of ", a.type.mlir);
  const ElementType integer = a.type.bits == 32 ? ElementType{NumberKind::kSigned, 32, "i32"}
                                                : ElementType{NumberKind::kSigned, 64, "i64"};
  return emit("arith.bitcast " + a.name + " : " + a.type.mlir + " to " + integer.mlir, integer);
}

Value ScalarEmitter::isNan(const Value& a) {
  if (!a.type.isFloat()) return intConstant(0, boolType());
  return compare("uno", a, a);
}

// f32 and f64 max/min are emitted as LLVM intrinsics: arith-expand would turn arith.maximumf
// and friends into compare-and-select chains, which LLVM does not vectorize as reductions;
// llvm.maximum/minimum (NaN-propagating, like arith.maximumf) reductions it does.
Value ScalarEmitter::floatMinMax(const std::string& intrinsic, const std::string& arith_op,
                                 const Value& a, const Value& b) {
  TORCH_INTERNAL_ASSERT(a.type.mlir == b.type.mlir, intrinsic, " on ", a.type.mlir, " and ",
                        b.type.mlir);
  if (a.type.mlir != "f32" && a.type.mlir != "f64") return binary(arith_op, a, b);
  return emit("llvm.intr." + intrinsic + "(" + a.name + ", " + b.name + ") : (" + a.type.mlir +
                  ", " + a.type.mlir + ") -> " + a.type.mlir,
              a.type);
}

Value ScalarEmitter::maximum(const Value& a, const Value& b) {
  if (a.type.isFloat()) return floatMinMax("maximum", "arith.maximumf", a, b);
  return binary(a.type.kind == NumberKind::kSigned ? "arith.maxsi" : "arith.maxui", a, b);
}
Value ScalarEmitter::maxIgnoringNanAndZeroSign(const Value& a, const Value& b) {
  if (a.type.mlir != "f32" && a.type.mlir != "f64") return maximum(a, b);
  return fastMinMax("maxnum", a, b);
}
Value ScalarEmitter::minIgnoringNanAndZeroSign(const Value& a, const Value& b) {
  if (a.type.mlir != "f32" && a.type.mlir != "f64") return minimum(a, b);
  return fastMinMax("minnum", a, b);
}
Value ScalarEmitter::fastMinMax(const std::string& intrinsic, const Value& a, const Value& b) {
  TORCH_INTERNAL_ASSERT(a.type.mlir == b.type.mlir, intrinsic, " on ", a.type.mlir, " and ",
                        b.type.mlir);
  return emit("llvm.intr." + intrinsic + "(" + a.name + ", " + b.name +
                  ") {fastmathFlags = #llvm.fastmath<nnan, nsz>} : (" + a.type.mlir + ", " +
                  a.type.mlir + ") -> " + a.type.mlir,
              a.type);
}
Value ScalarEmitter::minimum(const Value& a, const Value& b) {
  if (a.type.isFloat()) return floatMinMax("minimum", "arith.minimumf", a, b);
  return binary(a.type.kind == NumberKind::kSigned ? "arith.minsi" : "arith.minui", a, b);
}

Value ScalarEmitter::stdMax(const Value& a, const Value& b) { return select(lt(a, b), b, a); }
Value ScalarEmitter::stdMin(const Value& a, const Value& b) { return select(lt(b, a), b, a); }

Value ScalarEmitter::nanIfAnyNan(const Value& value, const std::vector<Value>& inputs) {
  if (!value.type.isFloat()) return value;
  Value any_nan = isNan(inputs.front());
  for (size_t i = 1; i < inputs.size(); ++i)
    any_nan = binary("arith.ori", any_nan, isNan(inputs[i]));
  return select(any_nan, floatConstant(NAN, value.type), value);
}

} // namespace torchneuron::fusion

// Pointwise unary math (exp/log families, trig, roots, rounding, sign): one element each.
// Transcendentals call libm or LLVM intrinsics (vectorized through glibc's libmvec), so results
// agree with ATen's CPU kernels to a few ulps.

#include <limits>

#include "fusion/guarded_math.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

using UnaryFn = std::function<Value(ScalarEmitter&, const Value&)>;

ElementwiseOp unary(const char* name, TypePromotion promotion, uint8_t classes, UnaryFn fn) {
  ElementwiseOp op;
  op.name = name;
  op.operands = {{"self"}};
  op.promotion = promotion;
  op.compute_classes = classes;
  op.lower = [fn](LoweringContext& c) { return fn(c.emit, c.operands[0]); };
  return op;
}

// Float math: integer inputs compute in the default float dtype.
ElementwiseOp floatMath(const char* name, UnaryFn fn) {
  return unary(name, TypePromotion::kIntToFloat, kFloats, std::move(fn));
}

UnaryFn mathOp(const std::string& op) {
  return [op](ScalarEmitter& e, const Value& x) { return e.unary(op, x); };
}

UnaryFn libmOp(const std::string& function) {
  return [function](ScalarEmitter& e, const Value& x) { return e.libm(function, {x}); };
}

// Rounding keeps integers as they are.
UnaryFn rounding(const std::string& op) {
  return [op](ScalarEmitter& e, const Value& x) { return x.type.isFloat() ? e.unary(op, x) : x; };
}

Value one(ScalarEmitter& e, const Value& like) { return e.constantLike(1.0, like.type); }

UnaryFn logarithm(const std::string& op) {
  return [op](ScalarEmitter& e, const Value& x) { return guardedLog(e, op, x); };
}

} // namespace

void addUnaryOps(std::vector<ElementwiseOp>& ops) {
  ops.push_back(floatMath("exp", guardedExp));
  ops.push_back(floatMath("exp2", mathOp("math.exp2")));
  ops.push_back(floatMath("expm1", libmOp("expm1")));
  ops.push_back(floatMath("log", logarithm("math.log")));
  ops.push_back(floatMath("log2", logarithm("math.log2")));
  ops.push_back(floatMath("log10", logarithm("math.log10")));
  ops.push_back(floatMath("log1p", libmOp("log1p")));
  ops.push_back(floatMath("sin", mathOp("math.sin")));
  ops.push_back(floatMath("cos", mathOp("math.cos")));
  ops.push_back(floatMath("tan", libmOp("tan")));
  ops.push_back(floatMath("asin", libmOp("asin")));
  ops.push_back(floatMath("acos", libmOp("acos")));
  ops.push_back(floatMath("atan", libmOp("atan")));
  ops.push_back(floatMath("sinh", libmOp("sinh")));
  ops.push_back(floatMath("cosh", libmOp("cosh")));
  ops.push_back(floatMath("tanh", libmOp("tanh")));
  ops.push_back(floatMath("asinh", libmOp("asinh")));
  ops.push_back(floatMath("acosh", libmOp("acosh")));
  ops.push_back(floatMath("atanh", libmOp("atanh")));
  ops.push_back(floatMath("erf", libmOp("erf")));
  ops.push_back(floatMath("erfc", libmOp("erfc")));
  ops.push_back(floatMath("sqrt", mathOp("math.sqrt")));
  ops.push_back(floatMath("rsqrt", [](ScalarEmitter& e, const Value& x) {
    return e.div(one(e, x), e.unary("math.sqrt", x));
  }));
  ops.push_back(floatMath("reciprocal",
                          [](ScalarEmitter& e, const Value& x) { return e.div(one(e, x), x); }));
  ops.push_back(floatMath("sigmoid", [](ScalarEmitter& e, const Value& x) {
    return e.div(one(e, x), e.add(one(e, x), e.unary("math.exp", e.neg(x))));
  }));
  // ATen: self * wrapped_scalar_tensor(factor), the factor converted to self's dtype first (in
  // half and bfloat16 a rounded factor, then one product in float).
  for (const auto& [name, factor] :
       {std::pair{"deg2rad", M_PI / 180.0}, {"rad2deg", 180.0 / M_PI}}) {
    ElementwiseOp angle = floatMath(name, nullptr);
    angle.lower = [factor = factor](LoweringContext& c) {
      const Value& x = c.operands[0];
      return c.emit.mul(x, c.roundedToStored(c.emit.floatConstant(factor, x.type)));
    };
    ops.push_back(angle);
  }

  ops.push_back(sameDtype(
      unary("floor", TypePromotion::kDefault, kFloats | kIntegers, rounding("math.floor"))));
  ops.push_back(sameDtype(
      unary("ceil", TypePromotion::kDefault, kFloats | kIntegers, rounding("math.ceil"))));
  ops.push_back(sameDtype(
      unary("trunc", TypePromotion::kDefault, kFloats | kIntegers, rounding("math.trunc"))));
  ops.push_back(sameDtype(
      unary("round", TypePromotion::kDefault, kFloats | kIntegers, rounding("math.roundeven"))));
  ops.push_back(sameDtype(
      unary("frac", TypePromotion::kDefault, kFloats,
            [](ScalarEmitter& e, const Value& x) { return e.sub(x, e.unary("math.trunc", x)); })));
  ops.push_back(sameDtype(unary("neg", TypePromotion::kDefault, kFloats | kIntegers,
                                [](ScalarEmitter& e, const Value& x) { return e.neg(x); })));
  ops.push_back(sameDtype(unary("abs", TypePromotion::kDefault, kFloats | kIntegers,
                                [](ScalarEmitter& e, const Value& x) {
                                  if (x.type.isFloat()) return e.unary("math.absf", x);
                                  if (x.type.kind == NumberKind::kUnsigned) return x;
                                  return e.unary("math.absi", x);
                                })));
  // sign(x) = (0 < x) - (x < 0): 0 for NaN and zero, like ATen.
  UnaryFn sign = [](ScalarEmitter& e, const Value& x) {
    if (x.type.kind == NumberKind::kBool) return x;
    const Value zero = e.constantLike(0, x.type);
    const Value positive = e.convert(e.lt(zero, x), x.type);
    const Value negative = e.convert(e.lt(x, zero), x.type);
    return e.sub(positive, negative);
  };
  ops.push_back(sameDtype(unary("sign", TypePromotion::kDefault, kAllClasses, sign)));
  ops.push_back(sameDtype(unary("sgn", TypePromotion::kDefault, kAllClasses, sign)));
  ops.push_back(sameDtype(unary("signbit", TypePromotion::kAlwaysBool, kFloats | kIntegers,
                                [](ScalarEmitter& e, const Value& x) {
                                  if (!x.type.isFloat()) return e.lt(x, e.constantLike(0, x.type));
                                  const Value with_sign = e.binary("math.copysign", one(e, x), x);
                                  return e.lt(with_sign, e.constantLike(0, x.type));
                                })));
  ops.push_back(sameDtype(unary("bitwise_not", TypePromotion::kDefault, kIntegers | kBools,
                                [](ScalarEmitter& e, const Value& x) {
                                  const Value all_ones = x.type.kind == NumberKind::kBool
                                                             ? e.intConstant(1, x.type)
                                                             : e.intConstant(-1, x.type);
                                  return e.binary("arith.xori", x, all_ones);
                                })));
  ops.push_back(unary("logical_not", TypePromotion::kAlwaysBool, kAllClasses,
                      [](ScalarEmitter& e, const Value& x) {
                        const Value truth = e.convert(x, boolType());
                        return e.binary("arith.xori", truth, e.intConstant(1, boolType()));
                      }));
  // Device-to-device copy_ with any dtype conversion (called by the device's _copy_from; no
  // ATen overload binds to it directly).
  ElementwiseOp copy;
  copy.name = "copy";
  copy.operands = {{"src"}};
  copy.lower = [](LoweringContext& c) { return c.operands[0]; };
  ops.push_back(copy);
  // fill_(self, value) and zero_(self): self is only written, so the compute dtype is its own.
  ElementwiseOp fill;
  fill.name = "fill";
  fill.operands = {{"value", /*promotes=*/false, /*bool_only=*/false, /*zero_dim_only=*/true,
                    /*checked_scalar=*/true}};
  fill.lower = [](LoweringContext& c) { return c.emit.convert(c.operands[0], c.compute); };
  fill.writes_overlapping_outputs = true;
  ops.push_back(fill);
  ElementwiseOp zero;
  zero.name = "zero";
  zero.writes_overlapping_outputs = true;
  zero.lower = [](LoweringContext& c) { return c.emit.constantLike(0, c.compute); };
  ops.push_back(zero);
  ops.push_back(unary("isnan", TypePromotion::kAlwaysBool, kAllClasses,
                      [](ScalarEmitter& e, const Value& x) { return e.isNan(x); }));
}

} // namespace torchneuron::fusion

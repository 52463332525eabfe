// Binary and ternary pointwise ops with tensor or scalar operands: arithmetic, comparisons,
// logical and bitwise ops, where, clamp, lerp, addcmul, addcdiv, masked_fill. Formulas follow
// ATen's CPU kernels operation by operation, so results round the same way.

#include "fusion/guarded_math.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

using BinaryFn = std::function<Value(ScalarEmitter&, const Value&, const Value&)>;

ElementwiseOp binary(const char* name, const char* rhs_arg, TypePromotion promotion,
                     uint8_t classes, BinaryFn fn) {
  ElementwiseOp op;
  op.name = name;
  op.operands = {{"self"}, {rhs_arg}};
  op.promotion = promotion;
  op.compute_classes = classes;
  op.lower = [fn](LoweringContext& c) { return fn(c.emit, c.operands[0], c.operands[1]); };
  return op;
}

ElementwiseOp arithmetic(const char* name, BinaryFn fn, uint8_t classes = kFloats | kIntegers) {
  return binary(name, "other", TypePromotion::kDefault, classes, std::move(fn));
}

ElementwiseOp floatBinary(const char* name, const char* rhs_arg, BinaryFn fn) {
  return binary(name, rhs_arg, TypePromotion::kIntToFloat, kFloats, std::move(fn));
}

// a + alpha * b, and the sub/rsub variants, with `alpha` a run-time scalar.
ElementwiseOp withAlpha(const char* name, bool subtract, bool reversed) {
  ElementwiseOp op;
  op.name = name;
  op.operands = {{"self"}, {"other"}};
  op.params = {{"alpha", 1.0}};
  op.compute_classes = kFloats | kIntegers;
  op.refuses_bool_operands = op.negates_alpha = subtract;
  op.lower = [subtract, reversed](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& a = reversed ? c.operands[1] : c.operands[0];
    const Value& b = reversed ? c.operands[0] : c.operands[1];
    if (!a.type.isFloat()) {
      const Value scaled = e.mul(c.params[0], b);
      return subtract ? e.sub(a, scaled) : e.add(a, scaled);
    }
    // ATen 1.13's add_kernel, bit for bit: sub is add with -alpha, alpha is converted to the
    // dtype (Scalar::to<scalar_t>: a half or bfloat16 op rounds it), and the vectorized loop
    // computes fmadd(b, alpha, a), one rounding (GCC contracts the scalar tail of float and
    // double to the same). Half has no vectorized type in 1.13: a + alpha * b with c10::Half,
    // whose product rounds to half first. (bfloat16's scalar path, taken by strided tensors and
    // the tail of a contiguous one, rounds the product too; the kernel follows the vector body.)
    Value alpha = c.roundedToStored(c.params[0]);
    if (subtract) alpha = e.neg(alpha);
    if (c.stored.mlir == "f16") return e.add(a, c.roundedToStored(e.mul(alpha, b)));
    return e.fma(b, alpha, a);
  };
  return op;
}

ElementwiseOp comparison(const char* name, const char* float_predicate,
                         const char* signed_predicate, const char* unsigned_predicate) {
  return binary(name, "other", TypePromotion::kAlwaysBool, kAllClasses,
                [=](ScalarEmitter& e, const Value& a, const Value& b) {
                  const char* predicate = a.type.isFloat()                     ? float_predicate
                                          : a.type.kind == NumberKind::kSigned ? signed_predicate
                                                                               : unsigned_predicate;
                  return e.compare(predicate, a, b);
                });
}

ElementwiseOp logical(const char* name, const char* op_name) {
  return binary(name, "other", TypePromotion::kAlwaysBool, kAllClasses,
                [op_name](ScalarEmitter& e, const Value& a, const Value& b) {
                  return e.binary(op_name, e.convert(a, boolType()), e.convert(b, boolType()));
                });
}

ElementwiseOp bitwise(const char* name, const char* op_name) {
  return binary(name, "other", TypePromotion::kDefault, kIntegers | kBools,
                [op_name](ScalarEmitter& e, const Value& a, const Value& b) {
                  return e.binary(op_name, a, b);
                });
}

// Python's remainder: the result takes the sign of the divisor (ATen's remainder kernel).
Value floatRemainder(ScalarEmitter& e, const Value& a, const Value& b) {
  const Value zero = e.constantLike(0, a.type);
  const Value mod = e.binary("arith.remf", a, b);
  const Value nonzero = e.compare("une", mod, zero);
  const Value signs_differ = e.compare("ne", e.lt(b, zero), e.lt(mod, zero));
  const Value adjust = e.binary("arith.andi", nonzero, signs_differ);
  return e.select(adjust, e.add(mod, b), mod);
}

// ATen's div_floor_floating: floor division that is exact where a/b rounds badly.
Value floatFloorDivide(ScalarEmitter& e, const Value& a, const Value& b) {
  const Value zero = e.constantLike(0, a.type);
  const Value mod = e.binary("arith.remf", a, b);
  Value div = e.div(e.sub(a, mod), b);
  const Value nonzero = e.compare("une", mod, zero);
  const Value signs_differ = e.compare("ne", e.lt(b, zero), e.lt(mod, zero));
  div = e.select(e.binary("arith.andi", nonzero, signs_differ),
                 e.sub(div, e.constantLike(1, a.type)), div);
  Value floordiv = e.unary("math.floor", div);
  const Value round_up = e.gt(e.sub(div, floordiv), e.constantLike(0.5, a.type));
  floordiv = e.select(round_up, e.add(floordiv, e.constantLike(1, a.type)), floordiv);
  const Value quotient = e.div(a, b);
  const Value signed_zero = e.binary("math.copysign", zero, quotient);
  floordiv = e.select(e.compare("oeq", div, zero), signed_zero, floordiv);
  return e.select(e.compare("oeq", b, zero), quotient, floordiv);
}

// ATen computes these in half and bfloat16 with a rounding after each step (c10::Half and
// c10::BFloat16 arithmetic: trunc(a / b) rounds a / b first), and its bfloat16 fmod is
// Sleef's vector fmodf, which gives NaN where |a / b| overflows float (fmod(-4.9, 1.2e-38)):
// the kernels compute in f32 and round once, so those dtypes are left to the CPU.
bool notHalfOrBFloat16(c10::ScalarType dtype, const std::vector<int64_t>&) {
  return dtype != c10::kHalf && dtype != c10::kBFloat16;
}

} // namespace

void addBinaryOps(std::vector<ElementwiseOp>& ops) {
  ops.push_back(withAlpha("add", /*subtract=*/false, /*reversed=*/false));
  ops.push_back(withAlpha("sub", /*subtract=*/true, /*reversed=*/false));
  ops.push_back(withAlpha("rsub", /*subtract=*/true, /*reversed=*/true));
  ops.push_back(arithmetic(
      "mul",
      [](ScalarEmitter& e, const Value& a, const Value& b) {
        return a.type.kind == NumberKind::kBool ? e.binary("arith.andi", a, b) : e.mul(a, b);
      },
      kAllClasses));

  // div: rounding_mode None (true division), "trunc" or "floor". With a rounding mode integers
  // keep their dtype (ATen's result type) and go to the CPU, which raises ZeroDivisionError.
  ElementwiseOp div = floatBinary(
      "div", "other", [](ScalarEmitter& e, const Value& a, const Value& b) { return e.div(a, b); });
  div.constants = {{"rounding_mode", {"trunc", "floor"}}};
  div.integral_with_constant = 0;
  div.matches_cpu = [](c10::ScalarType dtype, const std::vector<int64_t>& constants) {
    return constants[0] < 0 || notHalfOrBFloat16(dtype, constants); // true division is exact
  };
  div.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& a = c.operands[0];
    const Value& b = c.operands[1];
    switch (c.constants[0]) {
    case 0:
      return e.unary("math.trunc", e.div(a, b));
    case 1:
      return floatFloorDivide(e, a, b);
    default:
      return e.div(a, b);
    }
  };
  ops.push_back(div);
  ops.push_back(arithmetic("floor_divide", floatFloorDivide, kFloats));
  ops.back().matches_cpu = notHalfOrBFloat16;
  ops.push_back(arithmetic("remainder", floatRemainder, kFloats));
  ops.back().matches_cpu = notHalfOrBFloat16;
  ops.push_back(arithmetic(
      "fmod",
      [](ScalarEmitter& e, const Value& a, const Value& b) { return e.binary("arith.remf", a, b); },
      kFloats));
  ops.back().matches_cpu = notHalfOrBFloat16;
  // pow with a scalar exponent of 2, 3, 0.5, -0.5, -1, -2, 1 or 0 computes what ATen does for
  // those exponents (products, sqrt, reciprocals, a copy, ones: autograd's pow backward asks for
  // x ** 1); any other exponent calls powf. Integer tensors with an exponent of 2, 3, 1 or 0
  // (`x ** 2`, `x.square()`) take the same products, which wrap on overflow as ATen's powi
  // does; other integer exponents (negative ones raise ATen's error) and tensor exponents are
  // left to ATen.
  ElementwiseOp pow =
      binary("pow", "exponent", TypePromotion::kDefault, kFloats | kIntegers, nullptr);
  pow.operands[1].checked_scalar = true;
  pow.operands[1].unchecked_for_float32_and_float64 = true;
  pow.output_dtype = OutputDtypeRule::kExactWithNumber; // pow.Tensor_Scalar is a unary op
  pow.exact_dtype_operand = "exponent";
  pow.specialized_operand = "exponent";
  pow.special_values = {2, 3, 0.5, -0.5, -1, -2, 1, 0};
  pow.matches_cpu = [](c10::ScalarType dtype, const std::vector<int64_t>& constants) {
    if (!c10::isIntegralType(dtype, /*includeBool=*/false)) return true;
    const int64_t special = constants.empty() ? -1 : constants.back();
    return special == 0 || special == 1 || special == 6 || special == 7; // 2, 3, 1 and 0
  };
  pow.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& x = c.operands[0];
    const Value one = e.constantLike(1.0, x.type);
    // bfloat16's x ** 3 and x ** -2 round the square first (ATen: Vectorized<BFloat16>
    // products); half computes std::pow in float, as the other exponents do. For 0.5 and -0.5
    // that differs from sqrt at -0.0 and -inf (pow(-inf, 0.5) is inf, sqrt(-inf) NaN): half's
    // x ** 0.5 is sqrt with those two fixed (glibc's powf is correctly rounded there, as sqrtf is;
    // libmvec's vector powf is not, and its ulp off turned float results onto half midpoints:
    // 3.998046875 ** 0.5 gave 2.0, ATen 1.9990234375), and -0.5 calls powf.
    auto square = [&] {
      return c.stored.isBFloat16Bits() ? c.roundedToStored(e.mul(x, x)) : e.mul(x, x);
    };
    int64_t special = c.constants.empty() ? -1 : c.constants.back();
    if (c.stored.isHalf() && special == 3) special = -1;
    switch (special) {
    case 0:
      return e.mul(x, x);
    case 1:
      return e.mul(square(), x);
    case 2: {
      const Value root = e.unary("math.sqrt", x);
      if (!c.stored.isHalf()) return root;
      const Value zero = e.constantLike(0, x.type), inf = e.floatConstant(INFINITY, x.type);
      const Value signless = e.select(e.compare("oeq", x, zero), zero, root);
      return e.select(e.compare("oeq", x, e.neg(inf)), inf, signless);
    }
    case 3:
      return e.div(one, e.unary("math.sqrt", x));
    case 4:
      return e.div(one, x);
    case 5:
      return e.div(one, square());
    case 6:
      return x;
    case 7:
      return one;
    default:
      return guardedPow(e, x, c.operands[1]);
    }
  };
  ops.push_back(pow);
  ops.push_back(floatBinary("atan2", "other", [](ScalarEmitter& e, const Value& a, const Value& b) {
    return e.libm("atan2", {a, b});
  }));
  // hypot and logaddexp are ATen binary ops over float dtypes only: integer operands are not
  // promoted ("hypot_cpu" not implemented for 'Int'), so they stay out of the kernels' classes.
  ops.push_back(arithmetic(
      "hypot",
      [](ScalarEmitter& e, const Value& a, const Value& b) { return e.libm("hypot", {a, b}); },
      kFloats));
  ops.push_back(
      floatBinary("copysign", "other", [](ScalarEmitter& e, const Value& a, const Value& b) {
        return e.binary("math.copysign", a, b);
      }));
  ops.push_back(arithmetic(
      "logaddexp",
      [](ScalarEmitter& e, const Value& a, const Value& b) {
        // ATen: m + log1p(exp(-|a - b|)), and a itself when both are the same infinity.
        const Value m = e.maximum(a, b);
        const Value d = e.unary("math.absf", e.sub(a, b));
        const Value result = e.add(m, e.libm("log1p", {e.unary("math.exp", e.neg(d))}));
        const Value inf = e.floatConstant(INFINITY, a.type);
        const Value same_inf = e.binary(
            "arith.andi", e.compare("oeq", e.unary("math.absf", a), inf), e.compare("oeq", a, b));
        return e.select(same_inf, a, result);
      },
      kFloats));
  // ATen's scalar kernels: NaN if either is NaN, else std::max / std::min (of two zeros the
  // first wins). fmax/fmin return the other operand where one is NaN.
  ops.push_back(arithmetic(
      "maximum",
      [](ScalarEmitter& e, const Value& a, const Value& b) {
        return e.nanIfAnyNan(e.stdMax(a, b), {a, b});
      },
      kAllClasses));
  ops.push_back(arithmetic(
      "minimum",
      [](ScalarEmitter& e, const Value& a, const Value& b) {
        return e.nanIfAnyNan(e.stdMin(a, b), {a, b});
      },
      kAllClasses));
  ops.push_back(arithmetic("fmax", [](ScalarEmitter& e, const Value& a, const Value& b) {
    if (!a.type.isFloat()) return e.maximum(a, b);
    return e.select(e.isNan(b), a, e.select(e.isNan(a), b, e.stdMax(a, b)));
  }));
  ops.push_back(arithmetic("fmin", [](ScalarEmitter& e, const Value& a, const Value& b) {
    if (!a.type.isFloat()) return e.minimum(a, b);
    return e.select(e.isNan(b), a, e.select(e.isNan(a), b, e.stdMin(a, b)));
  }));
  ops.push_back(floatBinary("xlogy", "other", [](ScalarEmitter& e, const Value& x, const Value& y) {
    const Value zero = e.constantLike(0, x.type);
    const Value product = e.mul(x, e.unary("math.log", y));
    const Value nan = e.floatConstant(NAN, x.type);
    return e.select(e.isNan(y), nan, e.select(e.compare("oeq", x, zero), zero, product));
  }));
  ops.back().operands = {{"self"}, {"other"}};
  // ATen's bfloat16 xlogy rounds std::log(y) to bfloat16 before the product (c10's BFloat16
  // math); half's log stays float, as here.
  ops.back().matches_cpu = notBFloat16;

  ops.push_back(comparison("eq", "oeq", "eq", "eq"));
  ops.push_back(comparison("ne", "une", "ne", "ne"));
  ops.push_back(comparison("lt", "olt", "slt", "ult"));
  ops.push_back(comparison("le", "ole", "sle", "ule"));
  ops.push_back(comparison("gt", "ogt", "sgt", "ugt"));
  ops.push_back(comparison("ge", "oge", "sge", "uge"));
  ops.push_back(logical("logical_and", "arith.andi"));
  ops.push_back(logical("logical_or", "arith.ori"));
  ops.push_back(logical("logical_xor", "arith.xori"));
  ops.push_back(bitwise("bitwise_and", "arith.andi"));
  ops.push_back(bitwise("bitwise_or", "arith.ori"));
  ops.push_back(bitwise("bitwise_xor", "arith.xori"));

  ElementwiseOp where;
  where.name = "where";
  where.operands = {{"condition", /*promotes=*/false, /*bool_only=*/true}, {"self"}, {"other"}};
  where.operands[1].checked_scalar = where.operands[2].checked_scalar = true;
  where.lower = [](LoweringContext& c) {
    return c.emit.select(c.operands[0], c.operands[1], c.operands[2]);
  };
  ops.push_back(where);

  // clamp(x, min, max) = std::min(std::max(x, lo), hi) as ATen's scalar kernel: a NaN x stays,
  // a NaN bound makes NaN (a NaN Python-number bound goes to the CPU, which ignores it in
  // clamp(min=nan) and not in clamp_min(nan)); of two zeros x wins. Either bound optional.
  ElementwiseOp clamp;
  clamp.name = "clamp";
  clamp.operands = {{"self"}, {"min"}, {"max"}};
  clamp.operands[1].checked_scalar = clamp.operands[2].checked_scalar = true;
  clamp.optional_operands = {"min", "max"};
  clamp.compute_classes = kFloats | kIntegers;
  clamp.output_dtype = OutputDtypeRule::kExactWithNumber; // clamp.Scalar is a unary op
  clamp.exact_dtype_operand = "min";
  clamp.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    Value result = c.operands[0];
    std::vector<Value> bounds;
    size_t next = 1;
    if (c.present[0]) { // present: {min, max}
      bounds.push_back(c.operands[next++]);
      result = e.stdMax(result, bounds.back());
    }
    if (c.present[1]) {
      bounds.push_back(c.operands[next++]);
      result = e.stdMin(result, bounds.back());
    }
    return e.nanIfAnyNan(result, bounds);
  };
  ops.push_back(clamp);
  ops.push_back(binary("clamp_min", "min", TypePromotion::kDefault, kFloats | kIntegers,
                       [](ScalarEmitter& e, const Value& a, const Value& b) {
                         return e.nanIfAnyNan(e.stdMax(a, b), {b});
                       }));
  ops.back().operands[1].checked_scalar = true;
  ops.back().output_dtype = OutputDtypeRule::kExactWithNumber;
  ops.back().exact_dtype_operand = "min";
  ops.push_back(binary("clamp_max", "max", TypePromotion::kDefault, kFloats | kIntegers,
                       [](ScalarEmitter& e, const Value& a, const Value& b) {
                         return e.nanIfAnyNan(e.stdMin(a, b), {b});
                       }));
  ops.back().operands[1].checked_scalar = true;
  ops.back().output_dtype = OutputDtypeRule::kExactWithNumber;
  ops.back().exact_dtype_operand = "max";

  ElementwiseOp lerp;
  lerp.name = "lerp";
  // ATen's lerp computes in self's dtype: a Python number as the weight takes no part in type
  // promotion (integer tensors with a weight of 0.5 are ATen's "not implemented for 'Long'", on
  // the CPU fallback), and a weight tensor must have self's dtype (ATen checks that first).
  lerp.operands = {{"self"}, {"end"}, {"weight", /*promotes=*/false}};
  // A number weight: weight.to<opmath_t>() (1e39: an error).
  lerp.operands[2].checked_scalar = lerp.operands[2].checked_in_opmath = true;
  lerp.compute_classes = kFloats;
  // lerp.Tensor checks that all its tensors, the output too, have one dtype; lerp.Scalar casts.
  lerp.output_dtype = OutputDtypeRule::kExactWithTensor;
  lerp.exact_dtype_operand = "weight";
  lerp.same_dtype_as_self = {"end", "weight"};
  lerp.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value &start = c.operands[0], &end = c.operands[1];
    const Value weight = e.convert(c.operands[2], start.type);
    const Value diff = e.sub(end, start);
    const Value small = e.lt(e.unary("math.absf", weight), e.floatConstant(0.5, weight.type));
    // ATen's lerp() as GCC compiles it: each form's product and sum contract to one fma.
    const Value from_start = e.fma(weight, diff, start);
    const Value from_end = e.fma(e.neg(diff), e.sub(e.floatConstant(1, weight.type), weight), end);
    return e.select(small, from_start, from_end);
  };
  ops.push_back(lerp);

  ElementwiseOp addcmul;
  addcmul.name = "addcmul";
  addcmul.operands = {{"self"}, {"tensor1"}, {"tensor2"}};
  addcmul.params = {{"value", 1.0, /*checked_in_opmath=*/true}};
  addcmul.compute_classes = kFloats | kIntegers;
  addcmul.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value scaled = e.mul(c.params[0], c.operands[1]);
    // ATen's loop is self + value * t1 * t2, which GCC contracts to fmadd(value * t1, t2, self)
    // (one rounding for the last product and the sum); integers wrap as written.
    if (c.compute.isFloat()) return e.fma(scaled, c.operands[2], c.operands[0]);
    return e.add(c.operands[0], e.mul(scaled, c.operands[2]));
  };
  ops.push_back(addcmul);

  ElementwiseOp addcdiv = addcmul;
  addcdiv.name = "addcdiv";
  addcdiv.compute_classes = kFloats;
  addcdiv.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    return e.add(c.operands[0], e.div(e.mul(c.params[0], c.operands[1]), c.operands[2]));
  };
  // ATen's meta function refuses two integral (or bool) divisor operands; its text, double space
  // included.
  addcdiv.aten_checks = [](c10::ArrayRef<c10::ScalarType> dtypes, c10::ArrayRef<c10::Scalar>,
                           const std::vector<int64_t>&) {
    TORCH_CHECK(!(c10::isIntegralType(dtypes[1], true) && c10::isIntegralType(dtypes[2], true)),
                "Integer division with addcdiv is no longer supported, and in a future  release "
                "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
                "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2))."
                "to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
                "for float inputs. The future addcdiv behavior is just the latter implementation: "
                "(input + value * tensor1 / tensor2), for all dtypes.");
  };
  ops.push_back(addcdiv);

  ElementwiseOp masked_fill;
  masked_fill.name = "masked_fill";
  masked_fill.operands = {{"self"}, {"mask", false, true}, {"value", false, false, true, true}};
  masked_fill.writes_overlapping_outputs = true; // ATen only warns (deprecated)
  masked_fill.lower = [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    return e.select(c.operands[1], e.convert(c.operands[2], c.compute), c.operands[0]);
  };
  ops.push_back(masked_fill);
}

} // namespace torchneuron::fusion

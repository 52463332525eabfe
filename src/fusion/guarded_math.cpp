#include "fusion/guarded_math.h"

#include <cmath>
#include <limits>

namespace torchneuron::fusion {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kQuietNaN = std::numeric_limits<double>::quiet_NaN();

} // namespace

// A signalling NaN passed through would stay signalling, so NaN lanes get the quiet NaN ATen's
// kernels return (0x7fc00000 as float32).
Value guardedLog(ScalarEmitter& e, const std::string& op, const Value& x) {
  const Value zero = e.constantLike(0, x.type);
  const Value infinity = e.floatConstant(kInfinity, x.type);
  const Value positive = e.compare("ogt", x, zero);
  const Value ordinary = e.binary("arith.andi", positive, e.compare("olt", x, infinity));
  const Value result = e.unary(op, e.select(ordinary, x, e.constantLike(1, x.type)));
  const Value nan = e.floatConstant(kQuietNaN, x.type);
  const Value special = e.select(e.compare("oeq", x, zero), e.floatConstant(-kInfinity, x.type),
                                 e.select(positive, x, nan));
  return e.select(ordinary, result, special);
}

// libmvec's vector exp handles |x| up to `vector_limit`: ln(FLT_MIN), 87.34, and ln(DBL_MIN),
// 708.40 (measured: 64K float32 exp(87.5) took 265 us, exp(87.0) 28 us). A lane beyond it
// computes exp(x -+ shift) * exp(+-shift) instead: x -+ shift is exact (both are multiples of
// x's ulp and the difference is below 128, or 1024, in magnitude), so the exp is of a normal
// result and the product rounds once, within about an ulp of the exact value as the scalar
// function's result is; it is a subnormal or 0 for large negative x, near the largest finite
// value or +inf for large positive x. The shifted argument is clamped to [-shift - 40.5,
// 56.75] (float32; float64 [-681.5, 646]), whose results with the scale are 0 and +inf, so
// infinities of either sign stay in the vector code too. NaN lanes, which this does not treat,
// still reach the scalar function.
Value guardedExp(ScalarEmitter& e, const Value& x) {
  const bool f32 = x.type.mlir == "f32";
  if (!f32 && x.type.mlir != "f64") return e.unary("math.exp", x);
  const double shift = f32 ? 32.0 : 64.0;
  const Value vector_limit = e.floatConstant(f32 ? 87.33654 : 708.3964, x.type);
  const Value lowest = e.floatConstant(f32 ? -72.5 : -681.5, x.type); // + shift: -104.5, -745.5
  const Value highest = e.floatConstant(f32 ? 56.75 : 646.0, x.type); // + shift: 88.75, 710
  const Value beyond = e.compare("ogt", e.unary("math.absf", x), vector_limit);
  const Value shifted = e.sub(x, e.binary("math.copysign", e.floatConstant(shift, x.type), x));
  const Value above_lowest = e.select(e.lt(shifted, lowest), lowest, shifted);
  const Value clamped = e.select(e.lt(highest, above_lowest), highest, above_lowest);
  const Value value = e.unary("math.exp", e.select(beyond, clamped, x));
  const Value scale =
      e.select(e.lt(x, e.constantLike(0, x.type)), e.floatConstant(std::exp(-shift), x.type),
               e.floatConstant(std::exp(shift), x.type));
  return e.mul(value, e.select(beyond, scale, e.constantLike(1, x.type)));
}

// y is an integer when floor(y) == y (infinities included, NaN not), odd when also y / 2 is
// not an integer (y * 0.5 is exact; integers from 2^24, or 2^53, up are even). Measured: 64K
// float32 `x.pow(2.5)` of half negative x took 484-566 us, 0.48x-0.56x stock's speed.
Value guardedPow(ScalarEmitter& e, const Value& x, const Value& y) {
  const bool f32 = x.type.mlir == "f32";
  if ((!f32 && x.type.mlir != "f64") || y.type.mlir != x.type.mlir)
    return e.binary("math.powf", x, y);
  const Value finite_negative = e.binary("arith.andi", e.lt(x, e.constantLike(0, x.type)),
                                         e.compare("ogt", x, e.floatConstant(-kInfinity, x.type)));
  const Value power = e.binary("math.powf", e.select(finite_negative, e.neg(x), x), y);
  const Value integer = e.compare("oeq", e.unary("math.floor", y), y);
  const Value half = e.mul(y, e.floatConstant(0.5, x.type));
  const Value odd =
      e.binary("arith.andi", integer, e.compare("une", e.unary("math.floor", half), half));
  const Value negative_power =
      e.select(integer, e.select(odd, e.neg(power), power), e.floatConstant(kQuietNaN, x.type));
  return e.select(finite_negative, negative_power, power);
}

} // namespace torchneuron::fusion

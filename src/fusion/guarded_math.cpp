#include "fusion/guarded_math.h"

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

// Below -104 (float64 -745.2) the exact exp(x) is under half the smallest subnormal
// (e^-104 = 6.8e-46 < 2^-150 = 7.0e-46), so its correctly rounded value is 0. Three vector
// operations, which ordinary arguments pay: 64K float32 `exp` took 22.1 us with a plain call and
// 23.3-23.7 with this guard. Guarding the overflow side too (+inf above 88.72284, float64
// 709.79) cost 17% (25.9 us), and in sigmoid's and silu's exp(-x) 13% and 31% of their time,
// so they call exp plainly; computing the lanes between these bounds and the vector code's own
// limit (|x| > 87.34: results subnormal or near the overflow) in the vector too, through an
// exact shifted argument and a scale, cost 42% (31.5 us). Those lanes and NaN take the scalar
// path.
Value guardedExp(ScalarEmitter& e, const Value& x) {
  const bool f32 = x.type.mlir == "f32";
  if (!f32 && x.type.mlir != "f64") return e.unary("math.exp", x);
  const Value zero = e.constantLike(0, x.type);
  const Value low = e.lt(x, e.floatConstant(f32 ? -104.0 : -745.2, x.type));
  return e.select(low, zero, e.unary("math.exp", e.select(low, zero, x)));
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

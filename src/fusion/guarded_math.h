#pragma once
// Vector math that keeps special inputs away from glibc's libmvec slow paths. libmvec's vector
// functions hand a whole vector to their scalar function, lane by lane, when any lane is outside
// the range their vector code handles (an infinity, a NaN, an argument whose result overflows,
// underflows or is not defined): `exp` of a tensor holding -inf ran at 0.12x stock's speed,
// `log` of one holding zeros at 0.16x (bench/special_inputs.py). These pass such lanes an
// ordinary argument and select their results after the call, the results ATen's kernels give,
// where the guard costs ordinary arguments little.

#include <string>

#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {

// log, log2 or log10 (`op`, a math dialect op) of x: -inf for zeros, +inf for +inf, a quiet
// NaN for negatives and NaN.
Value guardedLog(ScalarEmitter& e, const std::string& op, const Value& x);

// exp(x) for float32 and float64 x (other types: math.exp): arguments whose result is 0 (-inf
// included: `exp` of log-space probabilities and of masked scores) pass 0 to the vector call and
// take 0 after it. Arguments whose results are subnormal, near the overflow or infinite, and
// NaN, still take the scalar path.
Value guardedExp(ScalarEmitter& e, const Value& x);

// pow(x, y) for float32 and float64 (other types: math.powf): a finite negative base takes
// the power of its magnitude, negated for an odd integer y and NaN for a y that is not an
// integer (C's pow), since libmvec's vector pow hands every vector holding a negative base to
// its scalar function. Other special bases (zeros, infinities, NaN) still take that path.
Value guardedPow(ScalarEmitter& e, const Value& x, const Value& y);

} // namespace torchneuron::fusion

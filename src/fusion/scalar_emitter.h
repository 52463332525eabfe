#pragma once
// Builds the MLIR text of a scalar computation (one element of a kernel body). Lowerings in the
// op registry speak only through this class, so every op's MLIR is written the same way.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fusion/element_type.h"

namespace torchneuron::fusion {

// An SSA value of the body being built.
struct Value {
  std::string name;
  ElementType type;
};

class ScalarEmitter {
public:
  // `prefix` names this emitter's SSA values (%<prefix>0, ...), unique per emitter in a function.
  ScalarEmitter(std::string indent, std::string prefix)
      : indent_(std::move(indent)), prefix_(std::move(prefix)) {}

  // `value` is exact for any float type (written as its bit pattern).
  Value floatConstant(double value, const ElementType& type);
  Value intConstant(int64_t value, const ElementType& type);
  // A constant of `type` from a double: float types get it as is, integers truncated.
  Value constantLike(double value, const ElementType& type);

  // Converts with C++ semantics: float->int truncates, x->bool is x != 0, bool->x is 0/1;
  // 16-bit floats round as c10::Half and c10::BFloat16 do (through f32).
  Value convert(const Value& value, const ElementType& to);
  // An f32 rounded to bfloat16 bits (nearest even, NaN to 0x7FC0), integer operations only.
  Value roundToBFloat16(const Value& value);
  // `value` rounded to `narrow` and converted back to its own type (an f32 that a half or
  // bfloat16 step of ATen's would have rounded).
  Value roundThrough(const Value& value, const ElementType& narrow);

  // `%r = <op> %a : type` and `%r = <op> %a, %b : type`; the result has the operand's type.
  Value unary(const std::string& op, const Value& a);
  Value binary(const std::string& op, const Value& a, const Value& b);
  Value fma(const Value& a, const Value& b, const Value& c);
  // arith.cmpf / arith.cmpi with a predicate; the result is i1.
  Value compare(const std::string& predicate, const Value& a, const Value& b);
  Value select(const Value& condition, const Value& if_true, const Value& if_false);
  // A call to a libm function taking and returning `args[0].type` (f32 uses the `f` suffix).
  Value libm(const std::string& name, const std::vector<Value>& args);

  // Arithmetic helpers that pick the float or integer instruction from the type.
  Value add(const Value& a, const Value& b);
  Value sub(const Value& a, const Value& b);
  Value mul(const Value& a, const Value& b);
  Value div(const Value& a, const Value& b); // floats only
  // acc + x and acc * x for a reduction's accumulator: float adds may reassociate
  // (fastmath<reassoc>), which lets LLVM vectorize the reduction loop; sums accumulate in f64,
  // so the changed order costs no accuracy a float32 result could show.
  Value accumulate(const Value& acc, const Value& x);
  Value accumulateProduct(const Value& acc, const Value& x);
  Value neg(const Value& a);
  Value lt(const Value& a, const Value& b);
  Value le(const Value& a, const Value& b);
  Value gt(const Value& a, const Value& b);
  Value isNan(const Value& a); // i1; false for non-floats
  // The bits of an f32 or f64 as an i32 or i64 (arith.bitcast): unsigned integer operations on
  // them order zeros by sign and find NaNs without float compares.
  Value bits(const Value& a);
  Value maximum(const Value& a, const Value& b); // NaN-propagating for floats
  Value minimum(const Value& a, const Value& b);
  // The larger of `a` and `b` for a max reduction that finds its NaNs itself: llvm.maxnum with
  // the nnan and nsz flags, which LLVM vectorizes as a plain vector max with a shuffle tree at
  // the end, where maximum() needs blends per element and a serial horizontal step. A NaN operand
  // makes the result poison and of two zeros either may win, so the caller replaces the result
  // where an operand was NaN (isNan) and must not depend on the sign of a zero maximum. Other
  // float types than f32 and f64 get maximum().
  Value maxIgnoringNanAndZeroSign(const Value& a, const Value& b);
  Value minIgnoringNanAndZeroSign(const Value& a, const Value& b); // the same with minnum
  // std::max(a, b) and std::min(a, b), as ATen's scalar CPU kernels compute them:
  // (a < b) ? b : a and (b < a) ? b : a. A NaN `a` is returned, a NaN `b` ignored, and of two
  // zeros `a` wins, sign included. Reductions keep maximum/minimum (which vectorize as such).
  Value stdMax(const Value& a, const Value& b);
  Value stdMin(const Value& a, const Value& b);
  // NaN (floats) where any of `inputs` is NaN, else `value`.
  Value nanIfAnyNan(const Value& value, const std::vector<Value>& inputs);

  const std::string& body() const { return body_; }
  const std::set<std::string>& declarations() const { return declarations_; }
  // Emits a raw line (already indented by the caller's convention).
  void line(const std::string& text) { body_ += indent_ + text + "\n"; }
  std::string freshName();

private:
  Value emit(const std::string& rhs, const ElementType& result);
  Value floatMinMax(const std::string& intrinsic, const std::string& arith_op, const Value& a,
                    const Value& b);
  Value fastMinMax(const std::string& intrinsic, const Value& a, const Value& b);

  std::string indent_;
  std::string prefix_;
  std::string body_;
  std::set<std::string> declarations_;
  int next_ = 0;
};

ElementType boolType();

// An elementwise op's result, computed in computeType(compute), as stored into an output of
// dtype `output`: a half or bfloat16 computation (done in f32) rounds to its own dtype first,
// since ATen computes into a temporary of the common dtype and casts that into an out= tensor
// of another dtype (bfloat16 operands with a float32 out= give bfloat16 values).
Value storeElementwiseResult(ScalarEmitter& e, const Value& result, c10::ScalarType compute,
                             c10::ScalarType output);

} // namespace torchneuron::fusion

// Activations and the pointwise backward ops autograd calls for them. Formulas follow ATen's
// CPU kernels (aten/src/ATen/native/cpu/Activation.cpp, BinaryOpsKernel.cpp) step by step.

#include "fusion/op_registry.h"

#include <cmath>

namespace torchneuron::fusion {
namespace {

ElementwiseOp activation(const char* name, std::vector<OperandSpec> operands,
                         std::vector<ParamSpec> params, ElementwiseLowering lower,
                         uint8_t classes = kFloats) {
  ElementwiseOp op;
  op.name = name;
  op.operands = std::move(operands);
  op.params = std::move(params);
  op.compute_classes = classes;
  op.lower = std::move(lower);
  return op;
}

Value constant(ScalarEmitter& e, double value, const Value& like) {
  return e.constantLike(value, like.type);
}

Value sigmoidOf(ScalarEmitter& e, const Value& x) {
  const Value one = constant(e, 1, x);
  return e.div(one, e.add(one, e.unary("math.exp", e.neg(x))));
}

// Zero where the condition holds, else the value.
Value zeroWhere(ScalarEmitter& e, const Value& condition, const Value& value) {
  return e.select(condition, constant(e, 0, value), value);
}

// ATen's check in the meta function of a backward op that an in-place activation records: one
// computed from the forward result (constant 0 set) cannot tell the branches apart for a negative
// slope (param 0), and raises `message`.
std::function<void(c10::ArrayRef<c10::ScalarType>, c10::ArrayRef<c10::Scalar>,
                   const std::vector<int64_t>&)>
refusesNegativeSlopeOfResult(std::string message) {
  return [message = std::move(message)](c10::ArrayRef<c10::ScalarType>,
                                        c10::ArrayRef<c10::Scalar> params,
                                        const std::vector<int64_t>& constants) {
    TORCH_CHECK(constants[0] == 0 || params[0].to<double>() >= 0.0, message);
  };
}

// `op` with every number taken as ATen's bfloat16 kernels take it: as float (ParamSpec).
ElementwiseOp paramsInOpmath(ElementwiseOp op) {
  for (ParamSpec& param : op.params)
    param.checked_in_opmath = true;
  return op;
}

// `op` as ATen builds it with no memory-overlap check (ElementwiseOp::skips_overlap_checks).
ElementwiseOp withoutOverlapChecks(ElementwiseOp op) {
  op.skips_overlap_checks = true;
  return op;
}

} // namespace

void addActivationOps(std::vector<ElementwiseOp>& ops) {
  // ATen builds the forward activations as unary ops (sameDtype: an out= must have the input's
  // dtype); the backward ops are binary ops and cast. relu has no out= overload; threshold casts.
  // relu is ATen's clamp_min(x, 0): (x < 0) ? 0 : x, so -0 and NaN stay.
  ops.push_back(activation(
      "relu", {{"self"}}, {},
      [](LoweringContext& c) {
        return c.emit.stdMax(c.operands[0], constant(c.emit, 0, c.operands[0]));
      },
      kFloats | kIntegers));
  ops.push_back(withoutOverlapChecks(activation(
      "threshold", {{"self"}}, {{"threshold"}, {"value"}},
      [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        return e.select(e.le(c.operands[0], c.params[0]), c.params[1], c.operands[0]);
      },
      kFloats | kIntegers)));
  ops.push_back(withoutOverlapChecks(activation(
      "threshold_backward", {{"grad_output"}, {"self"}}, {{"threshold"}},
      [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        return zeroWhere(e, e.le(c.operands[1], c.params[0]), c.operands[0]);
      },
      kFloats | kIntegers)));

  ElementwiseOp gelu = activation("gelu", {{"self"}}, {}, [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& x = c.operands[0];
    const Value half = constant(e, 0.5, x), one = constant(e, 1, x);
    if (c.constants[0] == 1) { // tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      const Value cube = e.mul(e.mul(x, x), x);
      const Value inner = e.mul(constant(e, M_SQRT2 * M_2_SQRTPI * 0.5, x),
                                e.add(x, e.mul(constant(e, 0.044715, x), cube)));
      return e.mul(e.mul(half, x), e.add(one, e.libm("tanh", {inner})));
    }
    const Value cdf = e.add(one, e.libm("erf", {e.mul(x, constant(e, M_SQRT1_2, x))}));
    return e.mul(e.mul(x, half), cdf);
  });
  gelu.constants = {{"approximate", {"none", "tanh"}}};
  // ATen 1.13 computes bfloat16's gelu in bfloat16 (Vectorized<BFloat16>: each product, sum, erf
  // or tanh and their constants rounded), too far from one rounding at the end to match (-4.5
  // gave -1.5140e-05 against ATen's -1.5259e-05); those calls run ATen's kernel
  // (reduced_precision_calls.h).
  gelu.matches_cpu = notBFloat16;
  ops.push_back(sameDtype(gelu));

  ElementwiseOp gelu_backward =
      activation("gelu_backward", {{"grad_output"}, {"self"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &x = c.operands[1];
        const Value half = constant(e, 0.5, x), one = constant(e, 1, x);
        if (c.constants[0] == 1) {
          const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
          const Value x_sq = e.mul(x, x);
          const Value x_cube = e.mul(x_sq, x);
          const Value inner =
              e.mul(constant(e, beta, x), e.add(x, e.mul(constant(e, kappa, x), x_cube)));
          const Value tanh_inner = e.libm("tanh", {inner});
          const Value left = e.mul(half, x);
          const Value right = e.add(one, tanh_inner);
          const Value left_derivative = e.mul(half, right);
          const Value tanh_derivative = e.sub(one, e.mul(tanh_inner, tanh_inner));
          const Value inner_derivative =
              e.mul(constant(e, beta, x), e.add(one, e.mul(constant(e, 3 * kappa, x), x_sq)));
          const Value right_derivative = e.mul(e.mul(left, tanh_derivative), inner_derivative);
          return e.mul(dy, e.add(left_derivative, right_derivative));
        }
        const Value cdf =
            e.mul(half, e.add(one, e.libm("erf", {e.mul(x, constant(e, M_SQRT1_2, x))})));
        const Value pdf = e.mul(e.unary("math.exp", e.mul(constant(e, -0.5, x), e.mul(x, x))),
                                constant(e, M_2_SQRTPI * M_SQRT1_2 * 0.5, x));
        return e.mul(dy, e.add(cdf, e.mul(x, pdf)));
      });
  gelu_backward.constants = {{"approximate", {"none", "tanh"}}};
  gelu_backward.matches_cpu = gelu.matches_cpu; // the same bfloat16 steps
  ops.push_back(gelu_backward);

  ops.push_back(sameDtype(activation("silu", {{"self"}}, {}, [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& x = c.operands[0];
    return e.div(x, e.add(constant(e, 1, x), e.unary("math.exp", e.neg(x))));
  })));
  // As gelu: ATen rounds each bfloat16 step (silu(0.75) is 0.51171875 there, 0.5078125 rounded
  // once).
  ops.back().matches_cpu = notBFloat16;
  ops.push_back(
      activation("silu_backward", {{"grad_output"}, {"self"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &x = c.operands[1];
        const Value one = constant(e, 1, x);
        const Value sigmoid = sigmoidOf(e, x);
        return e.mul(e.mul(dy, sigmoid), e.add(one, e.mul(x, e.sub(one, sigmoid))));
      }));
  ops.push_back(sameDtype(activation("mish", {{"self"}}, {}, [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& x = c.operands[0];
    return e.mul(x, e.libm("tanh", {e.libm("log1p", {e.unary("math.exp", x)})}));
  })));
  ops.push_back(
      activation("mish_backward", {{"grad_output"}, {"self"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &x = c.operands[1];
        const Value one = constant(e, 1, x);
        const Value sigmoid = sigmoidOf(e, x);
        const Value tanh_softplus = e.libm("tanh", {e.libm("log1p", {e.unary("math.exp", x)})});
        const Value slope =
            e.mul(e.mul(x, sigmoid), e.sub(one, e.mul(tanh_softplus, tanh_softplus)));
        return e.mul(dy, e.add(tanh_softplus, slope));
      }));
  ops.push_back(
      activation("sigmoid_backward", {{"grad_output"}, {"output"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &y = c.operands[1];
        // ATen: a * (1 - b) * b; in half with c10::Half arithmetic, rounding each step (its
        // bfloat16 loop computes in float, as this does).
        if (c.stored.mlir == "f16")
          return e.mul(c.roundedToStored(e.mul(dy, c.roundedToStored(e.sub(constant(e, 1, y), y)))),
                       y);
        return e.mul(e.mul(dy, e.sub(constant(e, 1, y), y)), y);
      }));
  ops.push_back(
      activation("tanh_backward", {{"grad_output"}, {"output"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &y = c.operands[1];
        // ATen's a * (1 - b * b), as GCC contracts it in float: a * fma(-b, b, 1).
        if (c.compute.mlir == "f32") return e.mul(dy, e.fma(e.neg(y), y, constant(e, 1, y)));
        return e.mul(dy, e.sub(constant(e, 1, y), e.mul(y, y)));
      }));
  ops.push_back(sameDtype(paramsInOpmath(
      activation("softplus", {{"self"}}, {{"beta", 1}, {"threshold", 20}}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value& x = c.operands[0];
        const Value scaled = e.mul(x, c.params[0]);
        const Value smooth = e.div(e.libm("log1p", {e.unary("math.exp", scaled)}), c.params[0]);
        return e.select(e.gt(scaled, c.params[1]), x, smooth);
      }))));
  ops.push_back(paramsInOpmath(activation("softplus_backward", {{"grad_output"}, {"self"}},
                                          {{"beta", 1}, {"threshold", 20}}, [](LoweringContext& c) {
                                            ScalarEmitter& e = c.emit;
                                            const Value &dy = c.operands[0], &x = c.operands[1];
                                            const Value scaled = e.mul(x, c.params[0]);
                                            const Value z = e.unary("math.exp", scaled);
                                            const Value smooth =
                                                e.div(e.mul(dy, z), e.add(z, constant(e, 1, z)));
                                            return e.select(e.gt(scaled, c.params[1]), dy, smooth);
                                          })));
  ops.push_back(sameDtype(paramsInOpmath(activation(
      "elu", {{"self"}}, {{"alpha", 1}, {"scale", 1}, {"input_scale", 1}}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value& x = c.operands[0];
        // ATen 1.13: (exp(x * input_scale) - 1) * negcoef, not expm1 (elu(-0) is +0).
        const Value negcoef = e.mul(c.params[0], c.params[1]);
        const Value exp = e.unary("math.exp", e.mul(x, c.params[2]));
        const Value negative = e.mul(e.sub(exp, constant(e, 1, x)), negcoef);
        return e.select(e.le(x, constant(e, 0, x)), negative, e.mul(x, c.params[1]));
      }))));
  ElementwiseOp elu_backward = paramsInOpmath(
      activation("elu_backward", {{"grad_output"}, {"self_or_result"}},
                 {{"alpha", 1}, {"scale", 1}, {"input_scale", 1}}, [](LoweringContext& c) {
                   ScalarEmitter& e = c.emit;
                   const Value &dy = c.operands[0], &b = c.operands[1];
                   const Value negcoef = e.mul(c.params[0], c.params[1]);
                   const Value &poscoef = c.params[1], &negiptcoef = c.params[2];
                   Value negative;
                   if (c.constants[0] == 1) { // b is the forward result
                     negative = e.mul(e.mul(dy, negiptcoef), e.add(b, negcoef));
                   } else {
                     negative = e.mul(e.mul(e.mul(dy, negiptcoef), negcoef),
                                      e.unary("math.exp", e.mul(b, negiptcoef)));
                   }
                   return e.select(e.le(b, constant(e, 0, b)), negative, e.mul(dy, poscoef));
                 }));
  elu_backward.constants = {{"is_result", {}}};
  elu_backward.aten_checks = refusesNegativeSlopeOfResult(
      "In-place elu backward calculation is triggered with a negative slope which is not "
      "supported. This is caused by calling in-place forward function with a negative slope, "
      "please call out-of-place version instead.");
  ops.push_back(elu_backward);
  ops.push_back(sameDtype(paramsInOpmath(
      activation("leaky_relu", {{"self"}}, {{"negative_slope", 0.01}}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value& x = c.operands[0];
        return e.select(e.gt(x, constant(e, 0, x)), x, e.mul(x, c.params[0]));
      }))));
  ElementwiseOp leaky_relu_backward = paramsInOpmath(
      activation("leaky_relu_backward", {{"grad_output"}, {"self"}}, {{"negative_slope", 0.01}},
                 [](LoweringContext& c) {
                   ScalarEmitter& e = c.emit;
                   const Value &dy = c.operands[0], &x = c.operands[1];
                   return e.select(e.gt(x, constant(e, 0, x)), dy, e.mul(dy, c.params[0]));
                 }));
  leaky_relu_backward.constants = {{"self_is_result", {}}};
  leaky_relu_backward.aten_checks = refusesNegativeSlopeOfResult(
      "In-place leakyReLu backward calculation is triggered with a negative slope which is not "
      "supported. This is caused by calling in-place forward function with a negative slope, "
      "please call out-of-place version instead. File an issue at "
      "https://github.com/pytorch/pytorch if you do require supporting in-place leakRelu "
      "backward calculation with negative slope");
  ops.push_back(leaky_relu_backward);
  ops.push_back(sameDtype(activation(
      "hardtanh", {{"self"}}, {{"min_val", -1}, {"max_val", 1}},
      [](LoweringContext& c) {
        // ATen's clamp(x, min_val, max_val): std::min(std::max(x, lo), hi), NaN if a bound is.
        ScalarEmitter& e = c.emit;
        const Value clamped = e.stdMin(e.stdMax(c.operands[0], c.params[0]), c.params[1]);
        return e.nanIfAnyNan(clamped, {c.params[0], c.params[1]});
      },
      kFloats | kIntegers)));
  // ATen's hardtanh_out takes integral bounds with toLong() and refuses negative ones for uint8.
  ops.back().aten_checks = [](c10::ArrayRef<c10::ScalarType> dtypes,
                              c10::ArrayRef<c10::Scalar> params, const std::vector<int64_t>&) {
    TORCH_CHECK(dtypes[0] != c10::kByte || (params[0].toLong() >= 0 && params[1].toLong() >= 0),
                "cannot do hardtanh on an unsigned type with negative limits");
  };
  ops.push_back(activation("hardtanh_backward", {{"grad_output"}, {"self"}},
                           {{"min_val", -1}, {"max_val", 1}}, [](LoweringContext& c) {
                             ScalarEmitter& e = c.emit;
                             const Value& x = c.operands[1];
                             const Value outside =
                                 e.binary("arith.ori", e.le(x, c.params[0]), e.le(c.params[1], x));
                             return zeroWhere(e, outside, c.operands[0]);
                           }));
  ops.push_back(sameDtype(activation("hardswish", {{"self"}}, {}, [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& x = c.operands[0];
    const Value relu6 =
        e.stdMin(e.stdMax(e.add(x, constant(e, 3, x)), constant(e, 0, x)), constant(e, 6, x));
    return e.div(e.mul(x, relu6), constant(e, 6, x));
  })));
  ops.push_back(
      activation("hardswish_backward", {{"grad_output"}, {"self"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &x = c.operands[1];
        const Value middle = e.mul(dy, e.add(e.div(x, constant(e, 3, x)), constant(e, 0.5, x)));
        const Value upper = e.select(e.le(x, constant(e, 3, x)), middle, dy);
        return zeroWhere(e, e.lt(x, constant(e, -3, x)), upper);
      }));
  // ATen rounds each step of it in half and bfloat16 (the referee found 2-ulp differences).
  ops.back().matches_cpu = [](c10::ScalarType dtype, const std::vector<int64_t>&) {
    return dtype != c10::kHalf && dtype != c10::kBFloat16;
  };
  ops.push_back(sameDtype(activation("hardsigmoid", {{"self"}}, {}, [](LoweringContext& c) {
    ScalarEmitter& e = c.emit;
    const Value& x = c.operands[0];
    const Value relu6 =
        e.stdMin(e.stdMax(e.add(x, constant(e, 3, x)), constant(e, 0, x)), constant(e, 6, x));
    return e.div(relu6, constant(e, 6, x));
  })));
  ops.push_back(
      activation("hardsigmoid_backward", {{"grad_output"}, {"self"}}, {}, [](LoweringContext& c) {
        ScalarEmitter& e = c.emit;
        const Value &dy = c.operands[0], &x = c.operands[1];
        const Value inside =
            e.binary("arith.andi", e.gt(x, constant(e, -3, x)), e.lt(x, constant(e, 3, x)));
        // ATen multiplies by 1/6 rounded to float (a float literal, in float64 kernels too).
        const double one_sixth = static_cast<float>(1.0 / 6.0);
        return e.select(inside, e.mul(dy, constant(e, one_sixth, x)), constant(e, 0, x));
      }));
}

} // namespace torchneuron::fusion

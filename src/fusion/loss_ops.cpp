// The pointwise losses (mse, smooth L1, Huber) as registry reductions and row-wise ops, for
// device/compiled_losses.cpp: the loss of each element pair (`pointwise_loss`, reduction
// "none"), their mean or sum in one pass (`pointwise_loss_reduced`), and the input's gradient
// (`pointwise_loss_backward`). Elements are computed as ATen 1.13's vectorized CPU kernels compute
// them (its scalar tail, which rounds smooth L1's gradient in another order, is not followed);
// the mean and sum accumulate in f64, as the registry's sums do, where ATen sums the float
// losses.
//
// Constants: [0] the loss (LossKind), and for the reduced loss [1] 1 for the mean, 0 for the sum.
// Params: the loss's beta (smooth L1) or delta (Huber), unused by mse; the gradient's first param
// is ATen's norm (2 / numel or 2 for mse, 1 / numel or 1 for the others).

#include <stdexcept>

#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

using Values = std::vector<Value>;

enum LossKind : int64_t { kMse = 0, kSmoothL1 = 1, kHuber = 2 };

LossKind kindOf(const ReduceContext& c) {
  const int64_t kind = c.constants.at(0);
  if (kind < kMse || kind > kHuber)
    throw std::invalid_argument("[fusion] unknown pointwise loss " + std::to_string(kind));
  return static_cast<LossKind>(kind);
}

// One element's loss, in the compute type. `limit` is beta or delta.
Value elementLoss(ScalarEmitter& e, LossKind kind, const Value& input, const Value& target,
                  const Value& limit) {
  const Value diff = e.sub(input, target);
  if (kind == kMse) return e.mul(diff, diff);
  const Value z = e.unary("math.absf", diff);
  const Value half = e.floatConstant(0.5, z.type);
  const Value beyond = e.compare("oge", z, limit); // false for NaN: the quadratic side
  if (kind == kSmoothL1)                           // 0.5 z^2 / beta below beta, z - 0.5 beta beyond
    return e.select(beyond, e.sub(z, e.mul(half, limit)), e.div(e.mul(e.mul(half, z), z), limit));
  // Huber: 0.5 z^2 below delta, delta (z - 0.5 delta) beyond
  return e.select(beyond, e.mul(limit, e.sub(z, e.mul(half, limit))), e.mul(e.mul(half, z), z));
}

// One element's gradient, in the compute type: norm * slope * grad_output, where the slope is
// mse's diff, smooth L1's sign(diff) beyond beta and diff / beta within, Huber's sign(diff) delta
// beyond delta and diff within (ATen's sign is 1 for diff > 0, else -1).
Value elementGradient(ScalarEmitter& e, LossKind kind, const Value& grad_output, const Value& input,
                      const Value& target, const Value& norm, const Value& limit) {
  const Value diff = e.sub(input, target);
  if (kind == kMse) return e.mul(e.mul(norm, diff), grad_output);
  const Value one = e.floatConstant(1, diff.type);
  const Value sign = e.select(e.gt(diff, e.floatConstant(0, diff.type)), one, e.neg(one));
  const Value beyond = e.compare("oge", e.unary("math.absf", diff), limit);
  const Value slope = kind == kSmoothL1 ? e.select(beyond, sign, e.div(diff, limit))
                                        : e.select(beyond, e.mul(sign, limit), diff);
  return e.mul(e.mul(norm, slope), grad_output);
}

} // namespace

void addLossOps(std::vector<ReductionOp>& ops) {
  // inputs: self, target (of one shape); output: the loss per element. A row-wise op without
  // passes: each element is written once, rows only split the work.
  ReductionOp pointwise;
  pointwise.name = "pointwise_loss";
  pointwise.rule = internalFloatRule();
  pointwise.passes = 0;
  pointwise.row_output = true;
  pointwise.num_params = 1;
  pointwise.finish = [](ReduceContext& c, const Values& x) {
    return Values{
        elementLoss(c.emit, kindOf(c), x[0], x[1], c.emit.convert(c.params[0], c.compute))};
  };
  ops.push_back(pointwise);

  // inputs: self, target; output: the losses' mean or sum, over every element.
  ReductionOp reduced;
  reduced.name = "pointwise_loss_reduced";
  reduced.rule = internalFloatRule();
  reduced.num_params = 1;
  reduced.init = [](ReduceContext& c, int) { return Values{c.emit.floatConstant(0, c.wide)}; };
  reduced.combine = [](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    ScalarEmitter& e = c.emit;
    const Value loss = elementLoss(e, kindOf(c), x[0], x[1], e.convert(c.params[0], c.compute));
    return Values{e.accumulate(acc[0], e.convert(loss, c.wide))};
  };
  reduced.finish = [](ReduceContext& c, const Values&) {
    const Value& sum = c.results[0][0];
    return Values{c.constants.at(1) == 1 ? c.emit.div(sum, c.count) : sum};
  };
  // Chunks' means (equal chunks) or sums, then their mean or sum.
  reduced.partials = [](const std::vector<int64_t>& constants) {
    return ReductionOp::Partials{constants.at(1) == 1 ? "mean" : "sum", {}};
  };
  reduced.widen_partials = true;
  ops.push_back(reduced);

  // inputs: grad_output (broadcast to self's shape), self, target; output: self's gradient.
  // params: norm, then beta or delta.
  ReductionOp backward;
  backward.name = "pointwise_loss_backward";
  backward.rule = internalFloatRule();
  backward.passes = 0;
  backward.row_output = true;
  backward.num_params = 2;
  backward.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    return Values{elementGradient(e, kindOf(c), x[0], x[1], x[2], e.convert(c.params[0], c.compute),
                                  e.convert(c.params[1], c.compute))};
  };
  ops.push_back(backward);
}

} // namespace torchneuron::fusion

// Reductions (sum, mean, prod, amax/amin, all/any, argmax/argmin with values, var/std, vector
// norms, logsumexp) and row-wise ops (softmax, log_softmax and their backward). Sums and
// products accumulate in f64 (floats) or i64 (integers); sum and mean add float32 rows in
// float32 blocks whose sums add in f64 (ReductionOp::sums_in_blocks), as accurate as ATen's
// cascade sum; the row-wise ops sum float32 rows in float32, as ATen does (rowSumType).

#include "fusion/op_registry.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace torchneuron::fusion {
namespace {

using Values = std::vector<Value>;

// The ATen side of a reduction (ReductionRule): the overloads that run it and its result dtype;
// the family builders below add what their family shares.
ReductionRule atenRule(ReductionResult result, std::vector<std::string> overloads) {
  ReductionRule rule;
  rule.result = result;
  rule.overloads = std::move(overloads);
  return rule;
}

Value lowest(ScalarEmitter& e, const ElementType& type) {
  if (type.isFloat()) return e.floatConstant(-INFINITY, type);
  if (type.kind == NumberKind::kUnsigned || type.kind == NumberKind::kBool)
    return e.intConstant(0, type);
  return e.intConstant(type.bits == 64 ? std::numeric_limits<int64_t>::min()
                                       : -(int64_t{1} << (type.bits - 1)),
                       type);
}

Value highest(ScalarEmitter& e, const ElementType& type) {
  if (type.isFloat()) return e.floatConstant(INFINITY, type);
  if (type.kind == NumberKind::kBool) return e.intConstant(1, type);
  if (type.kind == NumberKind::kUnsigned) return e.intConstant((int64_t{1} << type.bits) - 1, type);
  return e.intConstant(type.bits == 64 ? std::numeric_limits<int64_t>::max()
                                       : (int64_t{1} << (type.bits - 1)) - 1,
                       type);
}

// ReductionOp::partials of an op whose result over a row is its result over its chunks' results
// (equal chunks: a mean of means).
std::function<ReductionOp::Partials(const std::vector<int64_t>&)>
partialsOfItself(const char* name) {
  return [op = std::string(name)](const std::vector<int64_t>&) {
    return ReductionOp::Partials{op, {}};
  };
}

// A one-pass fold into a single wide accumulator.
ReductionOp fold(const char* name, double initial,
                 std::function<Value(ReduceContext&, const Value& acc, const Value& x)> step,
                 std::function<Value(ReduceContext&, const Value& acc)> done) {
  ReductionOp op;
  op.name = name;
  op.init = [initial](ReduceContext& c, int) {
    return Values{c.emit.constantLike(initial, c.wide)};
  };
  op.combine = [step](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    return Values{step(c, acc[0], c.emit.convert(x[0], c.wide))};
  };
  op.finish = [done](ReduceContext& c, const Values&) { return Values{done(c, c.results[0][0])}; };
  op.partials = partialsOfItself(name); // sum, mean and prod
  op.widen_partials = true;
  return op;
}

Value identity(ReduceContext&, const Value& acc) { return acc; }

// amax/amin (and max()/min() without a dim): maximum()/minimum(), NaN-propagating, -0 below +0.
// A float row in row order, whose horizontal step maximum() would take serially, keeps three
// accumulators instead, each a plain vector operation per element: the extreme ignoring NaN and
// zero signs (maxIgnoringNanAndZeroSign), the unsigned maximum of the elements' magnitude bits
// (above infinity's exactly when a NaN was seen), and the unsigned minimum (for max) or maximum
// (for min) of their bits. pass_results then rebuilds maximum()'s result exactly: NaN if one was
// seen; else a zero extreme gets the winning sign (+0 for max, -0 for min) if a zero of that
// sign was seen, and the other sign if not. Without NaNs, a zero maximum means every element is
// -0, +0 or negative, all of whose bits are above +0's (0) as unsigned; a zero minimum means
// every element is +0, -0 (the sign bit alone) or positive, all of whose bits are below -0's.
// Column order keeps one accumulator per column: it has no horizontal step.
bool fastExtremum(const ReduceContext& c) {
  return !c.column_order && (c.compute.mlir == "f32" || c.compute.mlir == "f64");
}

// The bit patterns of a float type (f32 or f64), as ScalarEmitter::bits gives them: its integer
// type, its sign bit alone (-0) and +infinity.
struct FloatBits {
  ElementType integer;
  int64_t sign, infinity;
};
FloatBits floatBits(const ElementType& type) {
  if (type.bits == 32)
    return {{NumberKind::kSigned, 32, "i32"}, std::numeric_limits<int32_t>::min(), 0x7F800000};
  return {
      {NumberKind::kSigned, 64, "i64"}, std::numeric_limits<int64_t>::min(), 0x7FF0000000000000};
}

ReductionOp extremum(const char* name, bool maximum, std::vector<std::string> overloads) {
  ReductionOp op;
  op.name = name;
  op.rule = atenRule(ReductionResult::kInput, std::move(overloads));
  op.rule.exact_in_half = true;
  op.rule.needs_elements = true;
  op.init = [maximum](ReduceContext& c, int) {
    ScalarEmitter& e = c.emit;
    const Value start = maximum ? lowest(e, c.compute) : highest(e, c.compute);
    if (!fastExtremum(c)) return Values{start};
    const ElementType& integer = floatBits(c.compute).integer;
    const Value none = e.intConstant(0, integer);
    // The bits' unsigned minimum starts at the greatest value, ~0 (-1); maxima start at 0.
    return Values{start, none, maximum ? e.intConstant(-1, integer) : none};
  };
  op.combine = [maximum](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    ScalarEmitter& e = c.emit;
    if (!fastExtremum(c))
      return Values{maximum ? e.maximum(acc[0], x[0]) : e.minimum(acc[0], x[0])};
    const Value bits = e.bits(x[0]);
    const FloatBits pattern = floatBits(x[0].type);
    const Value magnitude = e.binary("arith.andi", bits, e.intConstant(~pattern.sign, bits.type));
    return Values{maximum ? e.maxIgnoringNanAndZeroSign(acc[0], x[0])
                          : e.minIgnoringNanAndZeroSign(acc[0], x[0]),
                  e.binary("arith.maxui", acc[1], magnitude),
                  e.binary(maximum ? "arith.minui" : "arith.maxui", acc[2], bits)};
  };
  op.pass_results = [maximum](ReduceContext& c, int, const Values& acc) {
    if (acc.size() == 1) return acc;
    ScalarEmitter& e = c.emit;
    const ElementType& type = acc[0].type;
    const FloatBits pattern = floatBits(type);
    const Value nan_seen = e.compare("ugt", acc[1], e.intConstant(pattern.infinity, acc[1].type));
    const Value winning_bits = e.intConstant(maximum ? 0 : pattern.sign, acc[2].type);
    const Value winning_zero_seen = e.compare("eq", acc[2], winning_bits);
    const Value winning = e.floatConstant(maximum ? 0.0 : -0.0, type);
    const Value losing = e.floatConstant(maximum ? -0.0 : 0.0, type);
    const Value zero_extreme = e.select(winning_zero_seen, winning, losing);
    const Value is_zero = e.compare("oeq", acc[0], e.floatConstant(0, type));
    const Value exact = e.select(is_zero, zero_extreme, acc[0]);
    return Values{e.select(nan_seen, e.floatConstant(NAN, type), exact)};
  };
  op.finish = [](ReduceContext& c, const Values&) { return c.results[0]; };
  op.partials = partialsOfItself(name); // exact: the extreme of the chunks' extremes
  return op;
}

// A float max (or min) pass that LLVM vectorizes as a plain vector max with a shuffle tree at
// the end, where maximum() needs blends per element and a serial horizontal step. Its two
// accumulators are the extreme ignoring NaN and zero signs and whether a NaN was seen; its result
// is NaN if one was, else that extreme: maximum()'s but for the sign of a zero extreme. Used by
// softmax's max pass and argmax's.
Values nanFlaggedExtremeInit(ReduceContext& c, bool maximum) {
  return Values{maximum ? lowest(c.emit, c.compute) : highest(c.emit, c.compute),
                c.emit.intConstant(0, boolType())};
}
Values nanFlaggedExtremeStep(ScalarEmitter& e, bool maximum, const Values& acc, const Value& x) {
  return Values{maximum ? e.maxIgnoringNanAndZeroSign(acc[0], x)
                        : e.minIgnoringNanAndZeroSign(acc[0], x),
                e.binary("arith.ori", acc[1], e.isNan(x))};
}
Values nanFlaggedExtremeResult(ScalarEmitter& e, const Values& acc) {
  return Values{e.select(acc[1], e.floatConstant(NAN, acc[0].type), acc[0])};
}

// Whether float `x`'s sign bit is set (-0, NaNs with the bit, and negative values).
Value signBitSet(ScalarEmitter& e, const Value& x) {
  if (x.type.mlir != "f32" && x.type.mlir != "f64") {
    const Value sign = e.binary("math.copysign", e.floatConstant(1, x.type), x);
    return e.lt(sign, e.floatConstant(0, x.type));
  }
  const Value bits = e.bits(x);
  return e.compare("slt", bits, e.intConstant(0, bits.type));
}

// argmax/argmin and max.dim/min.dim: the first extreme element wins; NaN counts as extreme.
// Two passes, each a plain reduction LLVM vectorizes (one pass carrying the extreme and its place
// with a compare and select per element does not vectorize):
//   0. the extreme: for floats, a NaN-flagged extreme (nanFlaggedExtremeInit);
//   1. the first place of the extreme: the least index whose element equals it, or is NaN (no
//      element is NaN unless the extreme is). With values, a float row also keeps the least such
//      index whose element has its sign bit set, because the value is the first extreme element
//      itself: of a zero extreme, -0 if that index is the first, else +0.
ReductionOp argExtremum(const char* name, bool maximum, bool with_values,
                        std::vector<std::string> overloads) {
  ReductionOp op;
  op.name = name;
  op.rule = atenRule(with_values ? ReductionResult::kValuesAndIndices : ReductionResult::kIndices,
                     std::move(overloads));
  op.rule.bool_input = false;
  op.rule.exact_in_half = true;
  op.rule.needs_elements = true;
  op.needs_index = true;
  op.num_outputs = with_values ? 2 : 1;
  op.passes = 2;
  const ElementType i64{NumberKind::kSigned, 64, "i64"};
  op.init = [maximum, with_values, i64](ReduceContext& c, int pass) {
    ScalarEmitter& e = c.emit;
    const bool is_float = c.compute.isFloat();
    if (pass == 0) {
      if (is_float) return nanFlaggedExtremeInit(c, maximum);
      return Values{maximum ? lowest(e, c.compute) : highest(e, c.compute)};
    }
    const Value none = e.intConstant(std::numeric_limits<int64_t>::max(), i64);
    if (with_values && is_float) return Values{none, none};
    return Values{none};
  };
  op.combine = [maximum, i64](ReduceContext& c, int pass, const Values& acc, const Values& x,
                              const Value& index) {
    ScalarEmitter& e = c.emit;
    const bool is_float = x[0].type.isFloat();
    if (pass == 0) {
      if (is_float) return nanFlaggedExtremeStep(e, maximum, acc, x[0]);
      return Values{maximum ? e.maximum(acc[0], x[0]) : e.minimum(acc[0], x[0])};
    }
    const Value& extreme = c.results[0][0];
    const Value none = e.intConstant(std::numeric_limits<int64_t>::max(), i64);
    Value hit = e.compare(is_float ? "oeq" : "eq", x[0], extreme);
    if (is_float) hit = e.binary("arith.ori", hit, e.isNan(x[0]));
    Values updated{e.binary("arith.minsi", acc[0], e.select(hit, index, none))};
    if (acc.size() == 2) {
      const Value negative_hit = e.binary("arith.andi", hit, signBitSet(e, x[0]));
      updated.push_back(e.binary("arith.minsi", acc[1], e.select(negative_hit, index, none)));
    }
    return updated;
  };
  op.pass_results = [](ReduceContext& c, int pass, const Values& acc) {
    if (pass != 0 || acc.size() == 1) return acc; // integers: the extreme itself
    return nanFlaggedExtremeResult(c.emit, acc);
  };
  op.finish = [with_values](ReduceContext& c, const Values&) {
    const Values& place = c.results[1];
    if (!with_values) return Values{place[0]};
    ScalarEmitter& e = c.emit;
    const Value& extreme = c.results[0][0];
    if (place.size() == 1) return Values{extreme, place[0]};
    const Value zero = e.floatConstant(0, extreme.type);
    const Value first_is_negative = e.compare("eq", place[1], place[0]);
    const Value zero_value = e.select(first_is_negative, e.floatConstant(-0.0, extreme.type), zero);
    const Value value = e.select(e.compare("oeq", extreme, zero), zero_value, extreme);
    return Values{value, place[0]};
  };
  return op;
}

// The parts of the two max pool reductions below (device/compiled_pooling.cpp) that are the
// same: an internal op (no ATen overload) with the maxima and their int64 places as results, over
// a window of constant shape (static_window), accumulating the maximum, where it was, and
// whether the window's start was seen.
ReductionOp windowMaximum(const char* name) {
  ReductionOp op;
  op.name = name;
  op.rule = atenRule(ReductionResult::kValuesAndIndices, {});
  op.rule.floats_only = true;
  op.rule.bool_input = false;
  op.rule.exact_in_half = true;
  op.rule.needs_elements = true;
  op.static_window = true;
  op.num_outputs = 2;
  return op;
}

// ATen's rule for taking element `x` over the maximum so far: `val > max || isnan(val)`, from the
// window's start on (`seen`: the start was passed). The start is a flag of its own, not a sentinel
// place: in the unrolled window it is a constant after the first element, so the later elements'
// selects do not wait on a test of the place.
Value takesElement(ScalarEmitter& e, const Value& x, const Value& maximum, const Value& seen) {
  const Value first = e.binary("arith.xori", seen, e.intConstant(1, boolType()));
  return e.binary("arith.ori", first, e.binary("arith.ori", e.gt(x, maximum), e.isNan(x)));
}

// A max pool's windows as reduced dimensions: the first of equal maxima and the last NaN win, and
// a window of -inf gives its first element. The index is the element's place in its input plane:
// its offset in the contiguous input modulo the plane's size (param 0, H * W).
ReductionOp maxPoolWindow() {
  ReductionOp op = windowMaximum("max_pool_window");
  op.needs_index = true;
  op.index_is_input_offset = true;
  op.num_params = 1;
  op.init = [](ReduceContext& c, int) {
    const ElementType i64{NumberKind::kSigned, 64, "i64"};
    return Values{lowest(c.emit, c.compute), c.emit.intConstant(0, i64),
                  c.emit.intConstant(0, boolType())};
  };
  op.combine = [](ReduceContext& c, int, const Values& acc, const Values& x, const Value& offset) {
    ScalarEmitter& e = c.emit;
    const Value take = takesElement(e, x[0], acc[0], acc[2]);
    return Values{e.select(take, x[0], acc[0]), e.select(take, offset, acc[1]),
                  e.intConstant(1, boolType())};
  };
  op.finish = [](ReduceContext& c, const Values&) {
    ScalarEmitter& e = c.emit;
    // offset mod plane without an integer division per window: the quotient through f64 (exact
    // to within one for offsets below 2^52), then the remainder corrected into [0, plane).
    const Value& offset = c.results[0][1];
    const ElementType f64{NumberKind::kFloat, 64, "f64"};
    const Value plane = e.convert(c.params[0], offset.type);
    const Value inverse = e.div(e.floatConstant(1, f64), e.convert(c.params[0], f64));
    const Value quotient = e.convert(e.mul(e.convert(offset, f64), inverse), offset.type);
    Value rest = e.sub(offset, e.mul(quotient, plane));
    const Value zero = e.intConstant(0, offset.type);
    rest = e.select(e.compare("slt", rest, zero), e.add(rest, plane), rest);
    rest = e.select(e.compare("sge", rest, plane), e.sub(rest, plane), rest);
    return Values{c.results[0][0], rest};
  };
  return op;
}

// A max pool over windows of a plane padded with -inf: input 0 the values, input 1 each element's
// place in the unpadded plane, -1 on the padding. Padding is skipped, as ATen's clipped windows
// skip it: the window starts at its first element inside the input (padding, -inf and never NaN,
// is taken only before it, and never beats an element after it); then max_pool_window's rule.
// The result's index is the chosen element's place, accumulated in the compute type as the
// places come.
ReductionOp maxPoolWindowMasked() {
  ReductionOp op = windowMaximum("max_pool_window_masked");
  op.rule.inputs = {"self", "places"};
  op.init = [](ReduceContext& c, int) {
    return Values{lowest(c.emit, c.compute), c.emit.floatConstant(-1, c.compute),
                  c.emit.intConstant(0, boolType())};
  };
  op.combine = [](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    ScalarEmitter& e = c.emit;
    const Value inside = e.compare("oge", x[1], e.floatConstant(0, x[1].type));
    const Value take = takesElement(e, x[0], acc[0], acc[2]);
    return Values{e.select(take, x[0], acc[0]), e.select(take, x[1], acc[1]),
                  e.binary("arith.ori", acc[2], inside)};
  };
  op.finish = [](ReduceContext& c, const Values&) {
    const ElementType i64{NumberKind::kSigned, 64, "i64"};
    return Values{c.results[0][0], c.emit.convert(c.results[0][1], i64)};
  };
  return op;
}

ReductionOp boolean(const char* name, bool all, std::vector<std::string> overloads) {
  ReductionOp op;
  op.name = name;
  op.rule = atenRule(ReductionResult::kTruth, std::move(overloads));
  op.rule.exact_in_half = true;
  op.init = [all](ReduceContext& c, int) {
    return Values{c.emit.intConstant(all ? 1 : 0, boolType())};
  };
  op.combine = [all](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    const Value truth = c.emit.convert(x[0], boolType());
    return Values{c.emit.binary(all ? "arith.andi" : "arith.ori", acc[0], truth)};
  };
  op.finish = [](ReduceContext& c, const Values&) { return c.results[0]; };
  return op;
}

// Whether the first pass of a variance keeps a running mean (float64 inputs, whose sum can
// overflow where their mean does not) rather than a sum in f64 (narrower floats, exact).
bool runningMean(const ReduceContext& c) { return c.compute.bits == 64; }

// The row mean after the first pass of a variance.
Value meanAfterFirstPass(ReduceContext& c) {
  return runningMean(c) ? c.results[0][0] : c.emit.div(c.results[0][0], c.count);
}

// var/std: the mean, then the sum of squared deviations over max(N - correction, 0). For
// float64 the mean is a running mean, mean += (x - mean) / (i + 1) (as ATen's Welford keeps
// it), so equal values of any size have variance 0 instead of an overflowing sum.
ReductionOp variance(const char* name, bool root, std::vector<std::string> overloads) {
  ReductionOp op;
  op.name = name;
  op.passes = 2;
  op.num_params = 1;
  op.rule = atenRule(ReductionResult::kInput, std::move(overloads));
  op.rule.floats_only = true;
  op.rule.params = {{{"correction", "unbiased"}, 1}};
  op.needs_index = true;
  op.init = [](ReduceContext& c, int) { return Values{c.emit.floatConstant(0, c.wide)}; };
  op.combine = [](ReduceContext& c, int pass, const Values& acc, const Values& x,
                  const Value& index) {
    ScalarEmitter& e = c.emit;
    const Value wide = e.convert(x[0], c.wide);
    if (pass == 0 && runningMean(c)) {
      const Value seen = e.add(e.convert(index, c.wide), e.floatConstant(1, c.wide));
      return Values{e.add(acc[0], e.div(e.sub(wide, acc[0]), seen))};
    }
    if (pass == 0) return Values{e.accumulate(acc[0], wide)};
    const Value deviation = e.sub(wide, meanAfterFirstPass(c));
    return Values{e.accumulate(acc[0], e.mul(deviation, deviation))};
  };
  op.finish = [root](ReduceContext& c, const Values&) {
    ScalarEmitter& e = c.emit;
    const Value divisor = e.maximum(e.sub(c.count, c.params[0]), e.floatConstant(0, c.wide));
    const Value result = e.div(c.results[1][0], divisor);
    return Values{root ? e.unary("math.sqrt", result) : result};
  };
  return op;
}

// linalg_vector_norm: constants[0] picks the order (0: 2, 1: 1, 2: inf, 3: -inf, 4: 0,
// 5: any other p, given as params[0]; the rule's special values).
ReductionOp vectorNorm() {
  ReductionOp op;
  op.name = "vector_norm";
  op.num_params = 1;
  op.rule =
      atenRule(ReductionResult::kRequested, {"linalg_vector_norm", "linalg_vector_norm.out",
                                             "norm.ScalarOpt_dim", "norm.out", "norm.Scalar"});
  op.rule.floats_only = true;
  op.rule.params = {{{"ord", "p"}, 2, {2, 1, INFINITY, -INFINITY, 0}, {2, 1, 0}}};
  op.rule.params[0].rounded_to_float = true;
  op.init = [](ReduceContext& c, int) {
    const double start = c.constants[0] == 3 ? INFINITY : 0.0;
    return Values{c.emit.floatConstant(start, c.wide)};
  };
  op.combine = [](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    ScalarEmitter& e = c.emit;
    const Value magnitude = e.unary("math.absf", e.convert(x[0], c.wide));
    switch (c.constants[0]) {
    case 0:
      return Values{e.accumulate(acc[0], e.mul(magnitude, magnitude))};
    case 1:
      return Values{e.accumulate(acc[0], magnitude)};
    case 2:
      return Values{e.maximum(acc[0], magnitude)};
    case 3:
      return Values{e.minimum(acc[0], magnitude)};
    case 4: {
      const Value nonzero = e.compare("une", magnitude, e.floatConstant(0, c.wide));
      return Values{e.accumulate(acc[0], e.convert(nonzero, c.wide))};
    }
    default:
      return Values{e.accumulate(acc[0], e.binary("math.powf", magnitude, c.params[0]))};
    }
  };
  op.finish = [](ReduceContext& c, const Values&) {
    ScalarEmitter& e = c.emit;
    const Value& acc = c.results[0][0];
    if (c.constants[0] == 0) return Values{e.unary("math.sqrt", acc)};
    if (c.constants[0] == 5)
      return Values{e.binary("math.powf", acc, e.div(e.floatConstant(1, c.wide), c.params[0]))};
    return Values{acc};
  };
  // The 2-, 1-, inf- and -inf-norms of a row are those norms of its chunks' norms; its count of
  // nonzeros is the sum of theirs. Another order p would need p again (a run-time param).
  op.partials = [](const std::vector<int64_t>& constants) {
    if (constants.at(0) == 4) return ReductionOp::Partials{"sum", {}};
    if (constants.at(0) == 5) return ReductionOp::Partials{};
    return ReductionOp::Partials{"vector_norm", constants};
  };
  op.widen_partials = true;
  return op;
}

// exp(x) for softmax-style arguments (x - max <= 0, -inf under attention masks). glibc's vector
// expf sends every lane whose result would be subnormal or zero (x below ln(FLT_MIN), -87.34)
// to a scalar slow path, which made masked softmax rows 4x slower; so such x give exactly 0
// (results under FLT_MIN, 1.2e-38, are flushed, as with flush-to-zero) and the vector exp only
// sees arguments it handles fast. The argument is clamped with the same comparison the result
// selects by, (x < lowest) ? lowest : x, which equals maximum(x, lowest) for every x (NaN fails
// the comparison and stays NaN; `lowest` is not a zero) in a compare and a blend, where
// llvm.maximum expands to four instructions per vector.
Value expFlushingSubnormals(ScalarEmitter& e, const Value& x) {
  if (x.type.mlir != "f32" && x.type.mlir != "f64") return e.unary("math.exp", x);
  const Value lowest = e.floatConstant(x.type.mlir == "f32" ? -87.33654 : -708.3964, x.type);
  const Value below = e.lt(x, lowest);
  const Value clamped = e.unary("math.exp", e.select(below, lowest, x));
  return e.select(below, e.floatConstant(0, x.type), clamped);
}

// The row maximum, shifted to 0 when it is infinite (ATen's logsumexp and softmax do the same).
Value finiteShift(ScalarEmitter& e, const Value& maximum) {
  const Value infinite =
      e.compare("oeq", e.unary("math.absf", maximum), e.floatConstant(INFINITY, maximum.type));
  return e.select(infinite, e.floatConstant(0, maximum.type), maximum);
}

// The type the row-wise ops (softmax, log_softmax and their backward) sum a row in: float32
// rows in float32, as ATen's vectorized kernels do, so that the sum vectorizes at float32's width
// (16 lanes with AVX-512, and the vector expf of the same width) instead of converting every
// element to f64 (half the lanes, the 8-lane expf); others in `wide`. Vectorized, the lanes'
// partial sums make its accuracy comparable to ATen's 8-lane float sum. Sum and mean sum in
// float32 blocks added in f64 (sums_in_blocks); logsumexp's sum stays in f64.
const ElementType& rowSumType(const ReduceContext& c) {
  return c.compute.mlir == "f32" ? c.compute : c.wide;
}

// Two passes shared by softmax, log_softmax and logsumexp: the row max, then sum(exp(x - max)).
// Logsumexp replaces the max pass with its own (maximum(), in its wide type). This one is a
// NaN-flagged maximum (nanFlaggedExtremeInit: maximum() cost a quarter of a softmax's time in
// its per-element blends and per-row serial reduction), which equals maximum()'s result but for
// the sign of a zero maximum. No user depends on that sign: a row
// whose maximum is a zero of either sign has exp(x - max) = 1 at that element and the same
// value elsewhere, and the log of its sum (at least 2 when zeros of both signs are in the row,
// the only case the sign can differ) is positive, absorbing the sign wherever a zero is added.
ReductionOp expSum(const char* name) {
  ReductionOp op;
  op.name = name;
  op.passes = 2;
  op.init = [](ReduceContext& c, int pass) {
    if (pass == 0) return nanFlaggedExtremeInit(c, /*maximum=*/true);
    return Values{c.emit.floatConstant(0, rowSumType(c))};
  };
  op.combine = [](ReduceContext& c, int pass, const Values& acc, const Values& x, const Value&) {
    ScalarEmitter& e = c.emit;
    if (pass == 0) return nanFlaggedExtremeStep(e, /*maximum=*/true, acc, x[0]);
    const Value shifted = expFlushingSubnormals(e, e.sub(x[0], c.results[0][0]));
    return Values{e.accumulate(acc[0], e.convert(shifted, rowSumType(c)))};
  };
  op.pass_results = [](ReduceContext& c, int pass, const Values& acc) {
    return pass == 0 ? nanFlaggedExtremeResult(c.emit, acc) : acc;
  };
  return op;
}

// Layer norm as three kernels over rows of [M, N]: the forward (one row-wise kernel: the mean
// and variance passes over the row, then per row mean and rstd, then the normalized row, so the
// input is read from memory once), and for backward the input gradient (row-wise) and the weight
// and bias gradients (a reduction over rows). Weight and bias come in as broadcast views.
// Their rule is internalFloatRule(): native_layer_norm binds its own arguments, and ATen rounds
// half and bfloat16 statistics to the narrow dtype (those run on the CPU).

void addLayerNormOps(std::vector<ReductionOp>& ops) {
  // inputs: x, weight, bias; outputs: mean, rstd (per row), y; params: eps. float64 computes
  // as var() does. float32 sums in float32, as ATen's layer norm does (its moments are float
  // for float inputs), so the passes run at twice the vector width, which decides the speed of
  // a row once it is in cache; the second pass also sums the deviations from the first pass's
  // mean and corrects mean and variance by them (the corrected two-pass algorithm), so a row
  // far from zero (mean 1000, deviation 1) loses no more precision than ATen's Welford does.
  ReductionOp forward = variance("layer_norm", false, {});
  forward.rule = internalFloatRule();
  forward.num_outputs = 3;
  forward.row_output = true;
  forward.row_stats = 2;
  auto narrow = [](const ReduceContext& c) { return c.compute.bits == 32; };
  auto wide_init = forward.init;
  auto wide_combine = forward.combine;
  forward.init = [=](ReduceContext& c, int pass) {
    const Value zero = c.emit.floatConstant(0, c.compute);
    if (!narrow(c)) return wide_init(c, pass);
    return pass == 0 ? Values{zero} : Values{zero, zero};
  };
  forward.combine = [=](ReduceContext& c, int pass, const Values& acc, const Values& x,
                        const Value& index) {
    if (!narrow(c)) return wide_combine(c, pass, acc, x, index);
    ScalarEmitter& e = c.emit;
    if (pass == 0) return Values{e.accumulate(acc[0], x[0])};
    const Value mean = e.div(c.results[0][0], e.convert(c.count, c.compute));
    const Value deviation = e.sub(x[0], mean);
    return Values{e.accumulate(acc[0], e.mul(deviation, deviation)),
                  e.accumulate(acc[1], deviation)};
  };
  forward.finish_row = [=](ReduceContext& c) { // rstd = 1 / sqrt(max(var, 0) + eps)
    ScalarEmitter& e = c.emit;
    const ElementType type = narrow(c) ? c.compute : c.wide;
    const Value count = e.convert(c.count, type);
    Value mean, squares = c.results[1][0];
    if (narrow(c)) { // corrected by the deviations' sum
      const Value drift = c.results[1][1];
      mean = e.add(e.div(c.results[0][0], count), e.div(drift, count));
      squares = e.sub(squares, e.div(e.mul(drift, drift), count));
    } else {
      mean = meanAfterFirstPass(c);
    }
    const Value var = e.maximum(e.div(squares, count), e.floatConstant(0, type));
    const Value eps = e.convert(c.params[0], type);
    const Value rstd = e.div(e.floatConstant(1, type), e.unary("math.sqrt", e.add(var, eps)));
    // Squares that overflowed (float32 rows of |x| from about 1e18) make an infinite variance,
    // whose rstd of 0 would give a row of zeros (then the bias) that looks like a result: NaN
    // statistics instead. ATen's float moments give NaN once the variance itself overflows
    // (|x| from about 1e20) and rstd 0, zeros, for some rows below that.
    const Value overflowed = e.compare("oeq", var, e.floatConstant(INFINITY, type));
    return Values{mean, e.select(overflowed, e.floatConstant(NAN, type), rstd)};
  };
  // As the statistics are stored (rounded to the compute type), then applied.
  forward.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    const Value mean = e.convert(c.row[0], c.compute), rstd = e.convert(c.row[1], c.compute);
    const Value normalized = e.mul(e.sub(x[0], mean), rstd);
    return Values{e.add(e.mul(normalized, x[1]), x[2])};
  };
  ops.push_back(forward);

  // inputs: dy, x, mean, rstd, weight. dx = rstd * (g - sum(g)/N - xhat * sum(g * xhat)/N).
  ReductionOp input_grad;
  input_grad.name = "layer_norm_backward_input";
  input_grad.rule = internalFloatRule();
  input_grad.row_output = true;
  input_grad.init = [](ReduceContext& c, int) {
    return Values{c.emit.floatConstant(0, c.wide), c.emit.floatConstant(0, c.wide)};
  };
  input_grad.combine = [](ReduceContext& c, int, const Values& acc, const Values& x, const Value&) {
    ScalarEmitter& e = c.emit;
    const Value g = e.convert(e.mul(x[0], x[4]), c.wide);
    const Value xhat = e.convert(e.mul(e.sub(x[1], x[2]), x[3]), c.wide);
    return Values{e.accumulate(acc[0], g), e.accumulate(acc[1], e.mul(g, xhat))};
  };
  // float32 rows compute each element in float32 from the row's means, as ATen's float kernel
  // does (16 lanes instead of 8); others in the wide type.
  input_grad.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    const ElementType& type = c.compute.mlir == "f32" ? c.compute : c.wide;
    const Value g = e.convert(e.mul(x[0], x[4]), type);
    const Value xhat = e.convert(e.mul(e.sub(x[1], x[2]), x[3]), type);
    const Value mean_g = e.convert(e.div(c.results[0][0], c.count), type);
    const Value mean_gx = e.convert(e.div(c.results[0][1], c.count), type);
    const Value centered = e.sub(e.sub(g, mean_g), e.mul(xhat, mean_gx));
    return Values{e.mul(e.convert(x[3], type), centered)};
  };
  // float32 rows sum g and g * xhat in float32 blocks (as ATen's float kernel sums them, in
  // float) added in f64.
  input_grad.sums_in_blocks = true;
  ops.push_back(input_grad);

  // inputs: dy, x, mean, rstd, reduced over rows: (sum(dy * xhat), sum(dy)).
  ReductionOp param_grads;
  param_grads.name = "layer_norm_backward_params";
  param_grads.rule = internalFloatRule();
  param_grads.num_outputs = 2;
  param_grads.init = input_grad.init;
  param_grads.combine = [](ReduceContext& c, int, const Values& acc, const Values& x,
                           const Value&) {
    ScalarEmitter& e = c.emit;
    const Value dy = e.convert(x[0], c.wide);
    const Value xhat = e.convert(e.mul(e.sub(x[1], x[2]), x[3]), c.wide);
    return Values{e.accumulate(acc[0], e.mul(dy, xhat)), e.accumulate(acc[1], dy)};
  };
  param_grads.finish = [](ReduceContext& c, const Values&) { return c.results[0]; };
  param_grads.sums_in_blocks = true; // column order: float32 blocks of 64 rows
  ops.push_back(param_grads);
}

// Batch norm (device/compiled_batch_norm.cpp) from layer norm's pieces: its forward's element
// write (`layer_norm`) and its parameter-gradient sums (`layer_norm_backward_params`), which
// addLayerNormOps added to `ops` before.
void addBatchNormOps(std::vector<ReductionOp>& ops) {
  auto named = [&](const char* name) { // a copy: `ops` grows below
    for (const ReductionOp& op : ops)
      if (op.name == name) return op;
    throw std::logic_error(std::string("[fusion] batch norm needs ") + name + " registered first");
  };
  const ReductionOp layer_norm = named("layer_norm");
  const ReductionOp param_grads = named("layer_norm_backward_params");
  // Batch norm's training forward (device/compiled_batch_norm.cpp), one row per channel: the row
  // is every element of the channel, reduced over all other dimensions. inputs: x, weight, bias
  // (per channel, broadcast); outputs: mean, invstd and the unbiased variance (per channel, for
  // the running statistics; rows of at least two elements), then y; params: eps. As ATen's batch
  // norm: the mean is the f64 sum over the count (float64 too: var()'s running mean would turn a
  // channel's +inf into NaN where ATen's mean is inf), then the sum of squared deviations, in f64
  // for float32 as well (a channel's row is the whole batch, tens of thousands of elements); and
  // invstd is 0 where the variance and eps are both 0 (ATen's InvStd), not 1 / 0.
  ReductionOp batch_norm;
  batch_norm.name = "batch_norm";
  batch_norm.passes = 2;
  batch_norm.num_params = 1;
  batch_norm.rule = internalFloatRule();
  batch_norm.num_outputs = 4;
  batch_norm.row_output = true;
  batch_norm.row_stats = 3;
  batch_norm.init = [](ReduceContext& c, int) { return Values{c.emit.floatConstant(0, c.wide)}; };
  batch_norm.combine = [](ReduceContext& c, int pass, const Values& acc, const Values& x,
                          const Value&) {
    ScalarEmitter& e = c.emit;
    const Value wide = e.convert(x[0], c.wide);
    if (pass == 0) return Values{e.accumulate(acc[0], wide)};
    const Value deviation = e.sub(wide, e.div(c.results[0][0], c.count));
    return Values{e.accumulate(acc[0], e.mul(deviation, deviation))};
  };
  batch_norm.finish_row = [](ReduceContext& c) {
    ScalarEmitter& e = c.emit;
    const Value squares = c.results[1][0], zero = e.floatConstant(0, c.wide);
    const Value var = e.maximum(e.div(squares, c.count), zero);
    const Value eps = e.convert(c.params[0], c.wide);
    const Value defined =
        e.binary("arith.ori", e.compare("une", var, zero), e.compare("une", eps, zero));
    const Value invstd = e.select(
        defined, e.div(e.floatConstant(1, c.wide), e.unary("math.sqrt", e.add(var, eps))), zero);
    const Value unbiased = e.div(squares, e.sub(c.count, e.floatConstant(1, c.wide)));
    return Values{e.div(c.results[0][0], c.count), invstd, unbiased};
  };
  batch_norm.finish = layer_norm.finish;
  ops.push_back(batch_norm);

  // Its training backward in one kernel over the same rows, so dy and x are read twice per
  // channel instead of three times: inputs dy, x, mean, invstd, weight; outputs sum(dy * xhat)
  // and sum(dy) per channel (the weight and bias gradients, summed in the wide type), then, as
  // ATen's kernel computes it in the input's type, dx = (dy - sum(dy)/N - (x - mean) * k) *
  // invstd * weight with k = sum(dy * xhat)/N * invstd (xhat = (x - mean) * invstd). The element
  // math in f64 had made the kernel compute-bound: 1.2x-1.35x the hand-written loop's time.
  ReductionOp batch_norm_backward;
  batch_norm_backward.name = "batch_norm_backward";
  batch_norm_backward.rule = internalFloatRule();
  batch_norm_backward.num_outputs = 3;
  batch_norm_backward.row_output = true;
  batch_norm_backward.row_stats = 2;
  batch_norm_backward.init = param_grads.init;
  batch_norm_backward.combine = param_grads.combine;
  batch_norm_backward.finish_row = [](ReduceContext& c) { return c.results[0]; };
  batch_norm_backward.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    const Value &dy = x[0], &input = x[1], &mean = x[2], &invstd = x[3], &weight = x[4];
    const Value mean_dy = e.convert(e.div(c.results[0][1], c.count), c.compute);
    const Value k = e.mul(e.convert(e.div(c.results[0][0], c.count), c.compute), invstd);
    const Value centered = e.sub(e.sub(dy, mean_dy), e.mul(e.sub(input, mean), k));
    return Values{e.mul(centered, e.mul(invstd, weight))};
  };
  ops.push_back(batch_norm_backward);
}

} // namespace

ReductionRule internalFloatRule() {
  ReductionRule rule;
  rule.floats_only = true;
  rule.exact_in_half = false;
  rule.bool_input = false;
  return rule;
}

void addReductionOps(std::vector<ReductionOp>& ops) {
  addLayerNormOps(ops);
  addBatchNormOps(ops);
  addLossOps(ops);
  auto add = [](ReduceContext& c, const Value& acc, const Value& x) {
    return c.emit.accumulate(acc, x);
  };
  ReductionOp sum = fold("sum", 0, add, identity);
  sum.rule = atenRule(ReductionResult::kAccumulated, {"sum", "sum.dim_IntList", "sum.IntList_out"});
  sum.sums_in_blocks = true;
  ops.push_back(sum);
  ReductionOp mean = fold(
      "mean", 0, add, [](ReduceContext& c, const Value& acc) { return c.emit.div(acc, c.count); });
  mean.rule = atenRule(ReductionResult::kRequestedOrOut, {"mean", "mean.dim", "mean.out"});
  mean.rule.floats_only = true;
  mean.sums_in_blocks = true;
  ops.push_back(mean);
  ReductionOp prod = fold(
      "prod", 1,
      [](ReduceContext& c, const Value& acc, const Value& x) {
        return c.emit.accumulateProduct(acc, x);
      },
      identity);
  prod.rule = atenRule(ReductionResult::kAccumulated, {"prod", "prod.dim_int", "prod.int_out"});
  ops.push_back(prod);
  ops.push_back(extremum("amax", true, {"amax", "amax.out", "max"}));
  ops.push_back(extremum("amin", false, {"amin", "amin.out", "min"}));
  ops.push_back(argExtremum("argmax", true, false, {"argmax", "argmax.out"}));
  ops.push_back(argExtremum("argmin", false, false, {"argmin", "argmin.out"}));
  ops.push_back(argExtremum("max", true, true, {"max.dim", "max.dim_max"}));
  ops.push_back(argExtremum("min", false, true, {"min.dim", "min.dim_min"}));
  ops.push_back(maxPoolWindow());
  ops.push_back(maxPoolWindowMasked());
  ops.push_back(boolean("all", true, {"all", "all.dim", "all.out", "all.all_out"}));
  ops.push_back(boolean("any", false, {"any", "any.dim", "any.out", "any.all_out"}));
  ops.push_back(variance("var", false, {"var.correction", "var.correction_out"}));
  ops.push_back(variance("std", true, {"std.correction", "std.correction_out"}));
  ops.push_back(vectorNorm());

  ReductionOp logsumexp = expSum("logsumexp");
  logsumexp.rule = atenRule(ReductionResult::kFloating, {"logsumexp", "logsumexp.out"});
  logsumexp.init = [](ReduceContext& c, int pass) {
    return Values{pass == 0 ? c.emit.floatConstant(-INFINITY, c.wide)
                            : c.emit.floatConstant(0, c.wide)};
  };
  logsumexp.combine = [](ReduceContext& c, int pass, const Values& acc, const Values& x,
                         const Value&) {
    ScalarEmitter& e = c.emit;
    const Value wide = e.convert(x[0], c.wide);
    if (pass == 0) return Values{e.maximum(acc[0], wide)};
    const Value shifted = expFlushingSubnormals(e, e.sub(wide, finiteShift(e, c.results[0][0])));
    return Values{e.accumulate(acc[0], shifted)};
  };
  logsumexp.pass_results = nullptr; // its own max pass: one accumulator, maximum()
  logsumexp.finish = [](ReduceContext& c, const Values&) {
    ScalarEmitter& e = c.emit;
    return Values{e.add(e.unary("math.log", c.results[1][0]), finiteShift(e, c.results[0][0]))};
  };
  ops.push_back(logsumexp);

  ReductionOp softmax = expSum("softmax");
  softmax.row_output = true;
  softmax.rule = atenRule(ReductionResult::kInput, {"_softmax", "_softmax.out"});
  softmax.rule.floats_only = true;
  softmax.rule.false_only = "half_to_float";
  softmax.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    // Times the reciprocal of the sum, as ATen does: the division is loop-invariant and LLVM
    // hoists it, leaving a multiply per element.
    const Value shifted = expFlushingSubnormals(e, e.sub(x[0], c.results[0][0]));
    const Value sum = e.convert(c.results[1][0], c.compute);
    return Values{e.mul(shifted, e.div(e.floatConstant(1, c.compute), sum))};
  };
  softmax.store_pass = 1;
  softmax.row_value = [](ReduceContext& c, const Values& x) {
    return expFlushingSubnormals(c.emit, c.emit.sub(x[0], c.results[0][0]));
  };
  softmax.combine_stored = [](ReduceContext& c, const Values& acc, const Value& stored) {
    return Values{c.emit.accumulate(acc[0], c.emit.convert(stored, rowSumType(c)))};
  };
  softmax.finish_stored = [](ReduceContext& c, const Value& stored) {
    ScalarEmitter& e = c.emit;
    const Value sum = e.convert(c.results[1][0], c.compute);
    return Values{e.mul(stored, e.div(e.floatConstant(1, c.compute), sum))};
  };
  ops.push_back(softmax);

  ReductionOp log_softmax = expSum("log_softmax");
  log_softmax.row_output = true;
  log_softmax.rule = softmax.rule;
  log_softmax.rule.overloads = {"_log_softmax", "_log_softmax.out"};
  log_softmax.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    const Value log_sum = e.convert(e.unary("math.log", c.results[1][0]), c.compute);
    return Values{e.sub(e.sub(x[0], c.results[0][0]), log_sum)};
  };
  ops.push_back(log_softmax);

  // Backward of softmax: y * (g - sum(g * y)); inputs are (grad_output, output).
  ReductionOp softmax_backward;
  softmax_backward.name = "softmax_backward";
  softmax_backward.row_output = true;
  softmax_backward.rule =
      atenRule(ReductionResult::kInput, {"_softmax_backward_data", "_softmax_backward_data.out"});
  softmax_backward.rule.inputs = {"grad_output", "output"};
  softmax_backward.rule.floats_only = true;
  softmax_backward.rule.input_dtype = "input_dtype";
  softmax_backward.init = [](ReduceContext& c, int) {
    return Values{c.emit.floatConstant(0, rowSumType(c))};
  };
  softmax_backward.combine = [](ReduceContext& c, int, const Values& acc, const Values& x,
                                const Value&) {
    ScalarEmitter& e = c.emit;
    return Values{e.accumulate(acc[0], e.convert(e.mul(x[0], x[1]), rowSumType(c)))};
  };
  softmax_backward.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    return Values{e.mul(x[1], e.sub(x[0], e.convert(c.results[0][0], c.compute)))};
  };
  ops.push_back(softmax_backward);

  // Backward of log_softmax: g - exp(y) * sum(g).
  ReductionOp log_softmax_backward = softmax_backward;
  log_softmax_backward.name = "log_softmax_backward";
  log_softmax_backward.rule.overloads = {"_log_softmax_backward_data",
                                         "_log_softmax_backward_data.out"};
  log_softmax_backward.combine = [](ReduceContext& c, int, const Values& acc, const Values& x,
                                    const Value&) {
    return Values{c.emit.accumulate(acc[0], c.emit.convert(x[0], rowSumType(c)))};
  };
  log_softmax_backward.finish = [](ReduceContext& c, const Values& x) {
    ScalarEmitter& e = c.emit;
    const Value sum = e.convert(c.results[0][0], c.compute);
    return Values{e.sub(x[0], e.mul(expFlushingSubnormals(e, x[1]), sum))};
  };
  ops.push_back(log_softmax_backward);
}

} // namespace torchneuron::fusion

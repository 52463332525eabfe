// The op registry's rules and the kernel signature key.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "fusion/kernel_builder.h"
#include "fusion/kernel_signature.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

TEST(OpRegistry, PromotionRulesFollowPyTorch) {
  EXPECT_EQ(findElementwiseOp("add")->promotion, TypePromotion::kDefault);
  EXPECT_EQ(findElementwiseOp("div")->promotion, TypePromotion::kIntToFloat);
  EXPECT_EQ(findElementwiseOp("exp")->promotion, TypePromotion::kIntToFloat);
  EXPECT_EQ(findElementwiseOp("eq")->promotion, TypePromotion::kAlwaysBool);
  EXPECT_EQ(findElementwiseOp("logical_and")->promotion, TypePromotion::kAlwaysBool);
  // Integer division raises ZeroDivisionError in ATen; kernels leave integers to the CPU.
  EXPECT_EQ(findElementwiseOp("div")->compute_classes, kFloats);
  EXPECT_EQ(findElementwiseOp("bitwise_and")->compute_classes & kFloats, 0);
  EXPECT_FALSE(findElementwiseOp("where")->operands[0].promotes);
  EXPECT_TRUE(findElementwiseOp("where")->operands[0].bool_only);
  EXPECT_EQ(findElementwiseOp("nonexistent_op"), nullptr);
}

TEST(OpRegistry, EveryOpIsComplete) {
  std::set<std::string> names;
  for (const ElementwiseOp& op : elementwiseOps()) {
    EXPECT_TRUE(names.insert(op.name).second) << op.name;
    EXPECT_TRUE(static_cast<bool>(op.lower)) << op.name;
    EXPECT_NE(op.compute_classes, 0) << op.name;
    std::set<std::string> args;
    for (const OperandSpec& spec : op.operands)
      EXPECT_TRUE(args.insert(spec.arg).second) << op.name;
    for (const ParamSpec& spec : op.params)
      EXPECT_TRUE(args.insert(spec.arg).second) << op.name;
    for (const std::string& optional : op.optional_operands)
      EXPECT_EQ(args.count(optional), 1u) << op.name << " " << optional;
  }
  EXPECT_GE(names.size(), 100u);
  for (const char* name :
       {"sum", "mean", "amax", "argmax", "var", "softmax", "log_softmax_backward"})
    EXPECT_NE(findReductionOp(name), nullptr) << name;
}

TEST(OpRegistry, ReductionsCarryTheirAtenRulesAsData) {
  std::set<std::string> overloads;
  for (const ReductionOp& op : reductionOps()) {
    for (const std::string& overload : op.rule.overloads)
      EXPECT_TRUE(overloads.insert(overload).second) << overload << " bound twice";
    if (!op.rule.overloads.empty()) { // the rule reads every run-time scalar of the kernel
      EXPECT_EQ(op.rule.params.size(), static_cast<size_t>(op.num_params)) << op.name;
    }
  }
  const ReductionRule& sum = findReductionOp("sum")->rule;
  EXPECT_EQ(sum.result, ReductionResult::kAccumulated);
  EXPECT_EQ(overloads.count("sum.dim_IntList"), 1u);
  EXPECT_FALSE(sum.exact_in_half);
  const ReductionRule& amax = findReductionOp("amax")->rule;
  EXPECT_TRUE(amax.needs_elements && amax.exact_in_half);
  EXPECT_NE(std::find(amax.overloads.begin(), amax.overloads.end(), "max"), amax.overloads.end());
  EXPECT_FALSE(findReductionOp("argmax")->rule.bool_input);
  const ReductionRule& norm = findReductionOp("vector_norm")->rule;
  ASSERT_EQ(norm.params.size(), 1u);
  EXPECT_EQ(norm.params[0].special_values.size(), 5u);
  EXPECT_EQ(norm.params[0].reduces_nothing_for, (std::vector<double>{2, 1, 0}));
  EXPECT_EQ(findReductionOp("softmax_backward")->rule.inputs,
            (std::vector<std::string>{"grad_output", "output"}));
  EXPECT_EQ(findReductionOp("softmax")->rule.false_only, "half_to_float");
  EXPECT_TRUE(findReductionOp("layer_norm")->rule.overloads.empty()); // internal
}

ElementwiseSignature addSignature() {
  ElementwiseSignature s;
  s.op = findElementwiseOp("add");
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.rank = 1;
  s.inner = {InnerStride::kContiguous, InnerStride::kContiguous, InnerStride::kContiguous};
  return s;
}

TEST(KernelSignature, KeyCoversWhatCodegenUsesOnly) {
  const ElementwiseSignature base = addSignature();
  const Hash64 key = base.key();
  EXPECT_EQ(key, addSignature().key()); // deterministic
  ElementwiseSignature other = base;
  other.inputs[1] = c10::kDouble;
  EXPECT_NE(other.key(), key);
  other = base;
  other.rank = 2;
  EXPECT_NE(other.key(), key);
  other = base;
  other.inner[2] = InnerStride::kBroadcast;
  EXPECT_NE(other.key(), key);
  other = base;
  other.op = findElementwiseOp("sub");
  EXPECT_NE(other.key(), key);
  EXPECT_EQ(kernelEntryName(key).rfind("neuron_kernel_", 0), 0u);
  // Sizes, strides and alpha are run-time slots, not part of the signature: 3 memrefs of rank 1
  // (5 slots each) and alpha.
  EXPECT_EQ(kernelArgumentSlots(base), 16);
}

} // namespace
} // namespace torchneuron::fusion

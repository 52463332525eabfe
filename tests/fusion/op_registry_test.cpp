// The op registry's rules and the kernel signature key.

#include <gtest/gtest.h>

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

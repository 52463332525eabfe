#include "distributed/collective_fingerprint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace torchneuron {
namespace {

using c10d::OpType;

CollectiveFingerprint allReduceOf(std::vector<at::Tensor> tensors) {
  return CollectiveFingerprint::of(OpType::ALLREDUCE, c10d::ReduceOp::SUM, tensors);
}

TEST(CollectiveFingerprintTest, SurvivesTheExchangeAsATensor) {
  const auto print = allReduceOf({at::empty({2, 3, 4, 5, 6}, at::kDouble), at::empty({7})});
  const auto back = CollectiveFingerprint::fromTensor(print.toTensor());
  EXPECT_EQ(back, print);
  EXPECT_EQ(back.numel, 2 * 3 * 4 * 5 * 6 + 7);
  EXPECT_EQ(back.ndim, 5);
}

TEST(CollectiveFingerprintTest, SameElementCountInAnotherShapeDiffers) {
  EXPECT_EQ(allReduceOf({at::empty({4, 6})}), allReduceOf({at::empty({4, 6})}));
  EXPECT_NE(allReduceOf({at::empty({4, 6})}), allReduceOf({at::empty({6, 4})}));
  EXPECT_NE(allReduceOf({at::empty({24})}), allReduceOf({at::empty({24}, at::kInt)}));
  // Sizes past the four the fingerprint shows still count, through the layout hash.
  EXPECT_NE(allReduceOf({at::empty({1, 1, 1, 1, 2, 3})}),
            allReduceOf({at::empty({1, 1, 1, 1, 3, 2})}));
  const auto max =
      CollectiveFingerprint::of(OpType::ALLREDUCE, c10d::ReduceOp::MAX, {at::empty({4, 6})});
  EXPECT_NE(allReduceOf({at::empty({4, 6})}), max);
}

TEST(CollectiveFingerprintTest, DescribesTheCallAsPythonNamesIt) {
  EXPECT_EQ(allReduceOf({at::empty({4, 5})}).describe(), "all_reduce(sum) on float32[4, 5]");
  EXPECT_EQ(CollectiveFingerprint::of(OpType::BROADCAST, 1, {at::empty({3}, at::kLong)}).describe(),
            "broadcast(root 1) on int64[3]");
  EXPECT_EQ(
      CollectiveFingerprint::of(OpType::REDUCE, c10d::ReduceOp::MIN + 256 * 2, {at::empty({3})})
          .describe(),
      "reduce(min, root 2) on float32[3]");
  EXPECT_EQ(CollectiveFingerprint::of(OpType::BARRIER, -1, {}).describe(), "barrier");
  EXPECT_EQ(allReduceOf({at::empty({2, 3, 4, 5, 6}, at::kBFloat16), at::empty({7})}).describe(),
            "all_reduce(sum) on 2 tensors, first bfloat16[2, 3, 4, 5, ...], 727 elements in all");
}

} // namespace
} // namespace torchneuron

// Iteration planning: coalescing, layout order and stride classes.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "device/iteration_plan.h"

namespace torchneuron {
namespace {

using fusion::InnerStride;

c10::SmallVector<ViewGeometry, 4> views(std::initializer_list<at::Tensor> tensors) {
  c10::SmallVector<ViewGeometry, 4> result;
  for (const at::Tensor& t : tensors)
    result.push_back(ViewGeometry::of(t));
  return result;
}

TEST(IterationPlan, ContiguousOperandsOfAnyShapeBecomeRankOne) {
  const at::Tensor a = at::empty({3, 4, 5}), b = at::empty({3, 4, 5}), out = at::empty({3, 4, 5});
  const IterationPlan plan = planIteration(a.sizes(), views({out, a, b}));
  ASSERT_EQ(plan.rank(), 1);
  EXPECT_EQ(plan.sizes[0], 60);
  for (InnerStride inner : plan.inner)
    EXPECT_EQ(inner, InnerStride::kContiguous);
}

TEST(IterationPlan, BroadcastRowKeepsTwoDimensions) {
  const at::Tensor a = at::empty({3, 4}), row = at::empty({4}), column = at::empty({3, 1});
  const at::Tensor out = at::empty({3, 4});
  const IterationPlan plan = planIteration(a.sizes(), views({out, a, row, column}));
  ASSERT_EQ(plan.rank(), 2);
  EXPECT_EQ(plan.strides[2][0], 0); // the row repeats along dimension 0
  EXPECT_EQ(plan.inner[2], InnerStride::kContiguous);
  EXPECT_EQ(plan.inner[3], InnerStride::kBroadcast); // the column repeats along dimension 1
}

TEST(IterationPlan, TransposedInputsIterateInMemoryOrder) {
  const at::Tensor a = at::empty({4, 3}).t(); // [3, 4], strides [1, 3]
  const at::Tensor out = at::empty_strided(a.sizes(), stridesLike(a.sizes(), views({a})));
  EXPECT_EQ(out.strides(), a.strides()); // outputs follow the input's layout, like ATen
  const IterationPlan plan = planIteration(a.sizes(), views({out, a}));
  ASSERT_EQ(plan.rank(), 1); // both walk memory contiguously
  EXPECT_EQ(plan.inner[0], InnerStride::kContiguous);
}

TEST(IterationPlan, SingleElementMatchesItsBroadcastSiblings) {
  const at::Tensor a = at::empty({1}), scalar = at::scalar_tensor(2.0), out = at::empty({1});
  const IterationPlan plan = planIteration(a.sizes(), views({out, a, scalar}));
  EXPECT_EQ(plan.inner[1], InnerStride::kContiguous);
  EXPECT_EQ(plan.inner[2], InnerStride::kBroadcast);
}

} // namespace
} // namespace torchneuron

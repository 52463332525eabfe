// Prologue fusion on hand-written launches: the common dimensions of two iteration spaces
// (fusion/common_dims.h), and the partitioner (fusion/window_partition.h) making a reduction the
// consumer of the elementwise group before it, with the fused kernel's arguments gathered in its
// ABI order (fusion/fused_kernel.h), or refusing when the reduction reads other elements.

#include <gtest/gtest.h>

#include <vector>

#include "fusion/common_dims.h"
#include "fusion/fused_kernel.h"
#include "fusion/op_registry.h"
#include "fusion/window_partition.h"
#include "partition_launches.h"
#include "signatures.h"

namespace torchneuron::fusion {
namespace {

TEST(CommonDims, SplitEveryDimensionWhereAnySpaceHasABoundary) {
  const std::vector<int64_t> rows{12, 2}, blocks{6, 4};
  const c10::optional<DimList> dims = commonDims({rows, blocks});
  ASSERT_TRUE(dims.has_value());
  EXPECT_EQ(*dims, DimList({6, 2, 2}));
  // A [6, 4] memref with strides (4, 1) over them; one broadcast along its rows, (0, 1).
  EXPECT_EQ(stridesOver(blocks, std::vector<int64_t>{4, 1}, *dims), DimList({4, 2, 1}));
  EXPECT_EQ(stridesOver(blocks, std::vector<int64_t>{0, 1}, *dims), DimList({0, 2, 1}));
  // Size-1 dimensions have no boundary of their own.
  const std::vector<int64_t> padded{1, 24, 1};
  EXPECT_EQ(*commonDims({padded, blocks}), DimList({6, 4}));
  EXPECT_EQ(stridesOver(padded, std::vector<int64_t>{99, 1, 7}, DimList({6, 4})), DimList({4, 1}));
  // A size-1 dimension added to them (a full reduction's kept row) has stride 0.
  EXPECT_EQ(stridesOver(blocks, std::vector<int64_t>{4, 1}, DimList({1, 6, 2, 2})),
            DimList({0, 4, 2, 1}));
}

TEST(CommonDims, SpacesWhoseBoundariesDoNotNestHaveNone) {
  const std::vector<int64_t> a{6, 4}, b{4, 6}, empty{0, 3};
  EXPECT_FALSE(commonDims({a, b}).has_value());
  EXPECT_FALSE(commonDims({empty}).has_value());
}

// Slots of a memref over `data`.
void memref(std::vector<int64_t>& slots, const float* data, std::vector<int64_t> sizes,
            std::vector<int64_t> strides) {
  const auto address = reinterpret_cast<int64_t>(data);
  slots.insert(slots.end(), {address, address, 0});
  slots.insert(slots.end(), sizes.begin(), sizes.end());
  slots.insert(slots.end(), strides.begin(), strides.end());
}

ReductionSignature rowSum() {
  ReductionSignature s;
  s.op = findReductionOp("sum");
  s.inputs = {c10::kFloat};
  s.outputs = {c10::kFloat};
  s.inner.assign(2, InnerStride::kContiguous);
  return s;
}

// h = x + r over 6 x 8 elements (one dimension), then sums of 8-element rows of h from
// `row_start` (0: all of h; 1: h shifted by a row).
struct AddThenRowSum {
  std::vector<float> x = std::vector<float>(56), r = std::vector<float>(56),
                     h = std::vector<float>(56), sums = std::vector<float>(6);
  ElementwiseSignature add = contiguous("add", 2);
  ReductionSignature sum = rowSum();
  std::vector<int64_t> add_slots, sum_slots;
  const void* add_touched[3] = {h.data(), x.data(), r.data()};
  const void* sum_touched[2] = {sums.data(), h.data()};
  std::vector<PartitionLaunch> launches = std::vector<PartitionLaunch>(2);

  explicit AddThenRowSum(int64_t row_start) {
    memref(add_slots, h.data(), {48}, {1});
    memref(add_slots, x.data(), {48}, {1});
    memref(add_slots, r.data(), {48}, {1});
    add_slots.push_back(1); // alpha
    memref(sum_slots, sums.data(), {6}, {1});
    memref(sum_slots, h.data() + 8 * row_start, {6, 8}, {8, 1});
    sum_slots.push_back(8); // the reduced count
    launches[0] = elementwiseLaunch(add, add_slots.data(), h.data(), false, add_touched);
    launches[1] = reductionLaunch(sum, sum_slots.data(), sum_touched);
  }
};

TEST(WindowPartition, AGroupFeedingAReductionBecomesItsPrologue) {
  AddThenRowSum program(0);
  const PartitionResult result = partitionWindow(program.launches);
  ASSERT_EQ(result.groups.size(), 1u);
  const FusedGroup& group = result.groups[0];
  EXPECT_EQ(group.first, 0u);
  EXPECT_EQ(group.count, 2u);
  EXPECT_EQ(group.shape_launch, 1u);
  EXPECT_EQ(group.range, 6);
  ASSERT_TRUE(group.signature.consumer);
  EXPECT_EQ(group.signature.consumer->input_members, (c10::SmallVector<int, 6>{0}));
  EXPECT_EQ(group.signature.consumer->reduction.kept_rank, 1);
  EXPECT_EQ(group.signature.consumer->reduction.reduced_rank, 1);
  EXPECT_FALSE(group.signature.members[0].stored); // h is dead: never written
  EXPECT_TRUE(result.dead_launches.empty());
  // The sums' memref, x and r over [6, 8], add's alpha, the count.
  c10::SmallVector<int64_t, 32> slots;
  group.gatherSlots([&](size_t i) { return program.launches[i].slots; }, slots);
  const auto x = reinterpret_cast<int64_t>(program.x.data());
  const auto r = reinterpret_cast<int64_t>(program.r.data());
  const auto sums = reinterpret_cast<int64_t>(program.sums.data());
  const std::vector<int64_t> expected{sums, sums, 0, 6, 1, x, x, 0, 6, 8, 8,
                                      1,    r,    r, 0, 6, 8, 8, 1, 1, 8};
  EXPECT_EQ(std::vector<int64_t>(slots.begin(), slots.end()), expected);
  EXPECT_EQ(static_cast<int>(slots.size()), group.signature.argumentSlots());
  EXPECT_NE(buildFusedElementwiseKernel(group.signature).find("memref.load %e1"),
            std::string::npos);
}

TEST(WindowPartition, AReductionReadingOtherElementsOfTheGroupsOutputTakesNoPrologue) {
  AddThenRowSum program(1); // rows 1..6 of h: not the elements the add computes in order
  const PartitionResult result = partitionWindow(program.launches);
  EXPECT_TRUE(result.groups.empty()); // the add runs alone, stored for the sum
  EXPECT_TRUE(result.dead_launches.empty());
}

TEST(WindowPartition, LaunchesOverDifferentDimensionsOfTheSameElementsFuseOverTheirCommonOnes) {
  // h = x + bias over [6, 8] (the bias broadcast over rows), then y = relu(h) over [48].
  std::vector<float> x(48), bias(8), h(48), y(48);
  const ElementwiseSignature add = contiguous("add", 2, 2), relu = contiguous("relu", 1);
  std::vector<int64_t> add_slots, relu_slots;
  memref(add_slots, h.data(), {6, 8}, {8, 1});
  memref(add_slots, x.data(), {6, 8}, {8, 1});
  memref(add_slots, bias.data(), {6, 8}, {0, 1});
  add_slots.push_back(1); // alpha
  memref(relu_slots, y.data(), {48}, {1});
  memref(relu_slots, h.data(), {48}, {1});
  const void* add_touched[3] = {h.data(), x.data(), bias.data()};
  const void* relu_touched[2] = {y.data(), h.data()};
  std::vector<PartitionLaunch> launches(2);
  launches[0] = elementwiseLaunch(add, add_slots.data(), h.data(), false, add_touched);
  launches[1] = elementwiseLaunch(relu, relu_slots.data(), y.data(), true, relu_touched);
  const PartitionResult result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  const FusedGroup& group = result.groups[0];
  EXPECT_EQ(group.count, 2u);
  EXPECT_EQ(group.range, 6);
  EXPECT_EQ(group.signature.rank, 2);
  EXPECT_EQ(group.signature.members[1].signature.rank, 2);
  EXPECT_EQ(group.signature.members[1].sources[0].kind, FusedSource::kMember);
  EXPECT_FALSE(group.signature.members[0].stored);
  // y, x and the bias over [6, 8], then the add's alpha.
  c10::SmallVector<int64_t, 32> slots;
  group.gatherSlots([&](size_t i) { return launches[i].slots; }, slots);
  const auto yp = reinterpret_cast<int64_t>(y.data()), xp = reinterpret_cast<int64_t>(x.data()),
             bp = reinterpret_cast<int64_t>(bias.data());
  const std::vector<int64_t> expected{yp, yp, 0, 6,  8,  8, 1, xp, xp, 0, 6,
                                      8,  8,  1, bp, bp, 0, 6, 8,  0,  1, 1};
  EXPECT_EQ(std::vector<int64_t>(slots.begin(), slots.end()), expected);
  EXPECT_EQ(static_cast<int>(slots.size()), group.signature.argumentSlots());
}

// sums = x.sum(-1) over [6, 8] (no prologue), then scaled = sums * w over the 6 kept rows.
struct RowSumTimesWeight {
  std::vector<float> x = std::vector<float>(48), sums = std::vector<float>(6),
                     w = std::vector<float>(6), scaled = std::vector<float>(6);
  ReductionSignature sum = rowSum();
  ElementwiseSignature mul = contiguous("mul", 2);
  std::vector<int64_t> sum_slots, mul_slots;
  const void* sum_touched[2] = {sums.data(), x.data()};
  const void* mul_touched[3] = {scaled.data(), sums.data(), w.data()};

  RowSumTimesWeight() {
    memref(sum_slots, sums.data(), {6}, {1});
    memref(sum_slots, x.data(), {6, 8}, {8, 1});
    sum_slots.push_back(8); // the reduced count
    memref(mul_slots, scaled.data(), {6}, {1});
    memref(mul_slots, sums.data(), {6}, {1});
    memref(mul_slots, w.data(), {6}, {1});
  }
  // The two launches; with `sums_escape` false, the sums are dead outside the window.
  std::vector<PartitionLaunch> launches(bool sums_escape = true) const {
    std::vector<PartitionLaunch> both(2);
    both[0] = sums_escape ? reductionLaunch(sum, sum_slots.data(), sum_touched)
                          : reductionLaunch(sum, sum_slots.data(), sum_touched, {sums.data()}, 0);
    both[1] = elementwiseLaunch(mul, mul_slots.data(), scaled.data(), true, mul_touched);
    return both;
  }
};

TEST(WindowPartition, OpsConsumingAReductionsOutputBecomeItsEpilogue) {
  RowSumTimesWeight program;
  const std::vector<float>&x = program.x, &sums = program.sums, &w = program.w,
        &scaled = program.scaled;
  std::vector<int64_t>& mul_slots = program.mul_slots;
  std::vector<PartitionLaunch> launches = program.launches();
  const PartitionResult result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  const FusedGroup& group = result.groups[0];
  EXPECT_EQ(group.first, 0u);
  EXPECT_EQ(group.count, 2u);
  EXPECT_EQ(group.shape_launch, 0u); // the reduction's launch shape
  ASSERT_TRUE(group.signature.consumer);
  const FusedReductionConsumer& consumer = *group.signature.consumer;
  EXPECT_TRUE(group.signature.members.empty());
  EXPECT_FALSE(consumer.epilogue_over_rows);
  ASSERT_EQ(consumer.epilogue.size(), 1u);
  EXPECT_EQ(consumer.epilogue[0].sources[0].kind, FusedSource::kReductionOutput);
  EXPECT_EQ(consumer.epilogue[0].sources[1].kind, FusedSource::kExternal);
  EXPECT_TRUE(consumer.epilogue[0].stored);
  // The sums, x over [6, 8], the product and w over [6], the count.
  c10::SmallVector<int64_t, 32> slots;
  group.gatherSlots([&](size_t i) { return launches[i].slots; }, slots);
  const auto xp = reinterpret_cast<int64_t>(x.data()), sp = reinterpret_cast<int64_t>(sums.data()),
             wp = reinterpret_cast<int64_t>(w.data()),
             pp = reinterpret_cast<int64_t>(scaled.data());
  const std::vector<int64_t> expected{sp, sp, 0, 6, 1, xp, xp, 0, 6, 8, 8, 1,
                                      pp, pp, 0, 6, 1, wp, wp, 0, 6, 1, 8};
  EXPECT_EQ(std::vector<int64_t>(slots.begin(), slots.end()), expected);
  EXPECT_EQ(static_cast<int>(slots.size()), group.signature.argumentSlots());
  EXPECT_NE(buildFusedElementwiseKernel(group.signature).find("memref.store"), std::string::npos);

  // A product that reads the sums from another row each (shifted by one) is no consumer.
  mul_slots.clear();
  memref(mul_slots, scaled.data(), {5}, {1});
  memref(mul_slots, sums.data() + 1, {5}, {1});
  memref(mul_slots, w.data(), {5}, {1});
  launches[1].slots = mul_slots.data();
  EXPECT_TRUE(partitionWindow(launches).groups.empty());
}

TEST(WindowPartition, AReductionOutputOnlyItsEpilogueReadsIsNeitherPassedNorStored) {
  // The sums are dead outside the window.
  RowSumTimesWeight program;
  const std::vector<float>&x = program.x, &sums = program.sums, &w = program.w,
        &scaled = program.scaled;
  std::vector<float> other(6);
  std::vector<int64_t> neg_slots;
  std::vector<PartitionLaunch> launches = program.launches(false);
  PartitionResult result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  const FusedGroup& group = result.groups[0];
  ASSERT_TRUE(group.signature.consumer);
  EXPECT_EQ(group.signature.consumer->dead_outputs, 1u);
  EXPECT_FALSE(group.signature.consumer->outputStored(0));
  // x over [6, 8], the product and w over [6], the count: no memref of the sums.
  c10::SmallVector<int64_t, 32> slots;
  group.gatherSlots([&](size_t i) { return launches[i].slots; }, slots);
  const auto xp = reinterpret_cast<int64_t>(x.data()), wp = reinterpret_cast<int64_t>(w.data()),
             pp = reinterpret_cast<int64_t>(scaled.data());
  const std::vector<int64_t> expected{xp, xp, 0, 6, 8, 8, 1, pp, pp, 0, 6, 1, wp, wp, 0, 6, 1, 8};
  EXPECT_EQ(std::vector<int64_t>(slots.begin(), slots.end()), expected);
  EXPECT_EQ(static_cast<int>(slots.size()), group.signature.argumentSlots());
  const std::string kernel = buildFusedElementwiseKernel(group.signature);
  EXPECT_EQ(kernel.find("%o0"), std::string::npos) << kernel;
  EXPECT_NE(kernel.find("memref.store"), std::string::npos) << kernel;
  FusedElementwiseSignature sums_stored = group.signature;
  auto storing = std::make_shared<FusedReductionConsumer>(*group.signature.consumer);
  storing->dead_outputs = 0;
  sums_stored.consumer = storing;
  EXPECT_NE(sums_stored.key(), group.signature.key());

  // The same with a launch after the group that reads the sums: they are stored.
  memref(neg_slots, other.data(), {6}, {1});
  memref(neg_slots, sums.data(), {6}, {1});
  const void* neg_touched[2] = {other.data(), sums.data()};
  const ElementwiseSignature neg = contiguous("neg", 1);
  launches.push_back(elementwiseLaunch(neg, neg_slots.data(), other.data(), true, neg_touched));
  // (The negation reads the sums, so it could join the epilogue: it is kept out by a library
  // step between, which touches the sums too.)
  PartitionLaunch library;
  library.storages = c10::ArrayRef<const void*>(program.sum_touched, 1);
  launches.insert(launches.begin() + 2, library);
  result = partitionWindow(launches);
  ASSERT_FALSE(result.groups.empty());
  ASSERT_TRUE(result.groups[0].signature.consumer);
  EXPECT_EQ(result.groups[0].signature.consumer->dead_outputs, 0u);

  // Dead sums whose epilogue stores nothing either (the product is dead too): the kernel
  // stores the sums, its only result.
  launches.resize(2);
  launches[1].output_escapes = false;
  result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  ASSERT_TRUE(result.groups[0].signature.consumer);
  EXPECT_EQ(result.groups[0].signature.consumer->dead_outputs, 0u);

  // A signature naming dead outputs the reduction lacks, or dead outputs with no stored epilogue
  // member, is malformed.
  FusedElementwiseSignature malformed = group.signature;
  auto consumer = std::make_shared<FusedReductionConsumer>(*group.signature.consumer);
  consumer->dead_outputs = 2;
  malformed.consumer = consumer;
  EXPECT_THROW(buildFusedElementwiseKernel(malformed), std::logic_error);
  consumer->dead_outputs = 1;
  consumer->epilogue[0].stored = false;
  EXPECT_THROW(buildFusedElementwiseKernel(malformed), std::logic_error);
}

TEST(WindowPartition, ASmallLaunchBeforeTheNextEpilogueMemberRunsBeforeTheKernelAsAHole) {
  // sums = x.sum(-1) over [4, 6, 5]; t = w + w over [6] (independent, a quarter of the sums'
  // 24 elements); scaled = sums * t, t broadcast over the 4 rows.
  std::vector<float> x(120), sums(24), w(6), t(6), scaled(24);
  ReductionSignature sum = rowSum();
  sum.kept_rank = 2;
  const ElementwiseSignature add = contiguous("add", 2), mul = contiguous("mul", 2, 2);
  std::vector<int64_t> sum_slots, add_slots, mul_slots;
  memref(sum_slots, sums.data(), {4, 6}, {6, 1});
  memref(sum_slots, x.data(), {4, 6, 5}, {30, 5, 1});
  sum_slots.push_back(5);
  memref(add_slots, t.data(), {6}, {1});
  memref(add_slots, w.data(), {6}, {1});
  memref(add_slots, w.data(), {6}, {1});
  memref(mul_slots, scaled.data(), {4, 6}, {6, 1});
  memref(mul_slots, sums.data(), {4, 6}, {6, 1});
  memref(mul_slots, t.data(), {4, 6}, {0, 1});
  const void* sum_touched[2] = {sums.data(), x.data()};
  const void* add_touched[3] = {t.data(), w.data(), w.data()};
  const void* mul_touched[3] = {scaled.data(), sums.data(), t.data()};
  std::vector<PartitionLaunch> launches(3);
  launches[0] = reductionLaunch(sum, sum_slots.data(), sum_touched);
  launches[1] = elementwiseLaunch(add, add_slots.data(), t.data(), true, add_touched);
  launches[2] = elementwiseLaunch(mul, mul_slots.data(), scaled.data(), true, mul_touched);
  PartitionResult result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  const FusedGroup& group = result.groups[0];
  EXPECT_EQ(group.first, 0u);
  EXPECT_EQ(group.count, 3u);
  EXPECT_EQ(std::vector<size_t>(group.holes.begin(), group.holes.end()), std::vector<size_t>{1});
  ASSERT_TRUE(group.signature.consumer);
  ASSERT_EQ(group.signature.consumer->epilogue.size(), 1u);
  EXPECT_EQ(group.signature.consumer->epilogue[0].sources[0].kind, FusedSource::kReductionOutput);
  EXPECT_EQ(group.signature.consumer->epilogue[0].sources[1].kind, FusedSource::kExternal);

  // An add that writes what the reduction reads (x's first 6 elements) is no hole: the product
  // then joins nothing (it would have to run after the add), and nothing fuses.
  add_slots.clear();
  memref(add_slots, x.data(), {6}, {1});
  memref(add_slots, w.data(), {6}, {1});
  memref(add_slots, w.data(), {6}, {1});
  mul_slots.clear();
  memref(mul_slots, scaled.data(), {4, 6}, {6, 1});
  memref(mul_slots, sums.data(), {4, 6}, {6, 1});
  memref(mul_slots, x.data(), {4, 6}, {0, 1});
  const void* in_place_touched[3] = {x.data(), w.data(), w.data()};
  const void* reads_x[3] = {scaled.data(), sums.data(), x.data()};
  launches[1] = elementwiseLaunch(add, add_slots.data(), x.data(), true, in_place_touched);
  launches[2] = elementwiseLaunch(mul, mul_slots.data(), scaled.data(), true, reads_x);
  result = partitionWindow(launches);
  for (const FusedGroup& g : result.groups)
    EXPECT_TRUE(g.holes.empty());
  for (const FusedGroup& g : result.groups)
    EXPECT_FALSE(g.signature.consumer && !g.signature.consumer->epilogue.empty());
}

} // namespace
} // namespace torchneuron::fusion

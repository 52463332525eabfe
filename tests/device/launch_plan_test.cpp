// Launch plans are built from metadata alone: over storages that have no memory yet (a pending
// storage, as the tracer will hold), with aliasing decided by storage identity and view geometry;
// executing a plan gives what the op gives. Runs with the persistent cache off (main below).

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/elementwise_plan.h"
#include "device/plan_executor.h"
#include "device/reduction_launch.h"
#include "device/reduction_split.h"
#include "launcher/kernel_abi.h"

namespace torchneuron {
namespace {

using fusion::InnerStride;

const at::TensorOptions kFloatOnDevice =
    at::TensorOptions().device(kNeuronDeviceType).dtype(at::kFloat);

// A device storage of `elements` floats with no memory behind it: a plan that read or wrote
// through it would crash, and every such storage has the same (null) data pointer.
c10::Storage pendingStorage(int64_t elements) {
  return c10::Storage(c10::Storage::use_byte_size_t(), elements * 4,
                      c10::DataPtr(nullptr, c10::Device(kNeuronDeviceType, 0)), nullptr, false);
}

// A float view of `storage`.
at::Tensor viewOf(const c10::Storage& storage, at::IntArrayRef sizes, at::IntArrayRef strides,
                  int64_t offset = 0) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::Make<float>());
  impl->set_sizes_and_strides(sizes, strides);
  impl->set_storage_offset(offset);
  return at::Tensor(std::move(impl));
}

NativeOpBinding bindingOf(const char* name, const char* overload) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const c10::optional<NativeOpBinding> binding =
      bindSchema(op.schema(), *registryOpFor(op.schema().name()));
  EXPECT_TRUE(binding.has_value()) << name << "." << overload;
  return *binding;
}

BoundCall bound(const NativeOpBinding& binding, std::vector<c10::IValue> args) {
  BoundCall call;
  EXPECT_TRUE(bindCall(binding, args, call));
  return call;
}

at::Tensor randomOnDevice(at::IntArrayRef sizes) { return at::randn(sizes).to(kNeuronDeviceType); }

bool sameBits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.cpu().contiguous().view(at::kInt), b.cpu().contiguous().view(at::kInt));
}

TEST(LaunchPlan, ElementwisePlanIsBuiltWithoutMemory) {
  const NativeOpBinding add = bindingOf("aten::add", "Tensor");
  const at::Tensor a = viewOf(pendingStorage(20), {4, 5}, {5, 1});
  const at::Tensor b = viewOf(pendingStorage(20), {4, 5}, {5, 1});
  const int64_t allocations = allocatorStats().allocations;
  const c10::optional<LaunchPlan> plan = planElementwise(add, bound(add, {a, b, 2.0}));
  EXPECT_EQ(allocatorStats().allocations, allocations); // nothing allocated
  ASSERT_TRUE(plan.has_value());

  ASSERT_EQ(plan->outputs.size(), 1u);
  const PlannedOutput& out = plan->outputs[0];
  EXPECT_EQ(out.given, -1); // a new tensor, described by metadata
  EXPECT_EQ(at::IntArrayRef(out.sizes), at::IntArrayRef({4, 5}));
  EXPECT_EQ(at::IntArrayRef(out.strides), at::IntArrayRef({5, 1}));
  EXPECT_EQ(out.dtype, at::kFloat);

  ASSERT_EQ(plan->launches.size(), 1u);
  const PlannedLaunch& launch = plan->launches[0];
  EXPECT_EQ(launch.kind, KernelKind::kElementwise);
  EXPECT_EQ(launch.describe(), "add(Float,Float->Float) rank 1 [c,c,c]");
  EXPECT_EQ(launch.key, launch.elementwise.key());
  EXPECT_EQ(launch.elementwise.aliased_input, -1);
  ASSERT_EQ(launch.operands.size(), 3u); // output, self, other
  EXPECT_EQ(launch.operands[0].role, OperandRole::kOutput);
  EXPECT_EQ(launch.operands[1].role, OperandRole::kInput);
  EXPECT_EQ(launch.operands[1].index, 0);
  EXPECT_EQ(launch.operands[2].index, 1);
  for (const PlannedOperand& operand : launch.operands) {
    EXPECT_EQ(at::IntArrayRef(operand.sizes), at::IntArrayRef({20})); // merged to rank 1
    EXPECT_EQ(at::IntArrayRef(operand.strides), at::IntArrayRef({1}));
  }
  ASSERT_EQ(launch.words.size(), 1u);
  EXPECT_EQ(launch.words[0], floatSlot(2.0)); // alpha
  EXPECT_EQ(launch.range, 20);

  // The same geometry over allocated memory plans the same launch.
  const at::Tensor real_a = at::empty({4, 5}, kFloatOnDevice);
  const at::Tensor real_b = at::empty({4, 5}, kFloatOnDevice);
  const c10::optional<LaunchPlan> real = planElementwise(add, bound(add, {real_a, real_b, 2.0}));
  ASSERT_TRUE(real.has_value());
  EXPECT_EQ(real->launches[0].key, launch.key);
}

TEST(LaunchPlan, InPlaceSelfIsReadThroughTheOutput) {
  const NativeOpBinding add_ = bindingOf("aten::add_", "Tensor");
  const at::Tensor self = viewOf(pendingStorage(20), {4, 5}, {5, 1});
  const at::Tensor other = viewOf(pendingStorage(5), {5}, {1}); // broadcast along rows
  const c10::optional<LaunchPlan> plan = planElementwise(add_, bound(add_, {self, other, 1}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->outputs[0].given, 0); // self, written in place
  EXPECT_FALSE(plan->outputs[0].resize);
  const PlannedLaunch& launch = plan->launches[0];
  EXPECT_EQ(launch.elementwise.aliased_input, 0);
  ASSERT_EQ(launch.operands.size(), 2u); // self is not passed twice
  EXPECT_EQ(launch.operands[0].role, OperandRole::kOutput);
  EXPECT_EQ(launch.operands[1].role, OperandRole::kInput);
  EXPECT_EQ(launch.operands[1].index, 1);
  EXPECT_EQ(at::IntArrayRef(launch.operands[1].strides), at::IntArrayRef({0, 1}));
  EXPECT_EQ(launch.elementwise.inner[2], InnerStride::kContiguous);
}

TEST(LaunchPlan, AliasingFollowsStorageIdentityNotDataPointers) {
  const NativeOpBinding add_out = bindingOf("aten::add", "out");
  const c10::Storage written = pendingStorage(20), other = pendingStorage(20);
  const at::Tensor out = viewOf(written, {4, 5}, {5, 1});
  const at::Tensor y = viewOf(other, {4, 5}, {5, 1});
  // Same data pointer (null), different storage: not an alias.
  const at::Tensor elsewhere = viewOf(other, {4, 5}, {5, 1});
  ASSERT_EQ(elsewhere.data_ptr(), out.data_ptr());
  auto plan = planElementwise(add_out, bound(add_out, {elsewhere, y, 1, out}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->launches[0].elementwise.aliased_input, -1);
  EXPECT_EQ(plan->launches[0].operands.size(), 3u);
  // Another tensor over the output's storage, with its geometry: read through the output.
  const at::Tensor same_view = viewOf(written, {4, 5}, {5, 1});
  plan = planElementwise(add_out, bound(add_out, {same_view, y, 1, out}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->launches[0].elementwise.aliased_input, 0);
  // The same storage at another offset is not the output element for element.
  const c10::Storage shifted_storage = pendingStorage(40);
  const at::Tensor shifted_out = viewOf(shifted_storage, {4, 5}, {5, 1}, 20);
  const at::Tensor before = viewOf(shifted_storage, {4, 5}, {5, 1}, 0);
  plan = planElementwise(add_out, bound(add_out, {before, y, 1, shifted_out}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->launches[0].elementwise.aliased_input, -1);
}

TEST(LaunchPlan, OverlappingViewsAreJudgedFromGeometry) {
  const NativeOpBinding add_out = bindingOf("aten::add", "out");
  const c10::Storage storage = pendingStorage(8);
  const at::Tensor out = viewOf(storage, {4}, {1}, 0);
  const at::Tensor y = viewOf(pendingStorage(4), {4}, {1});
  // Elements 2..5 against 0..3 of one storage: ATen's partial-overlap error, before any write.
  const at::Tensor shifted = viewOf(storage, {4}, {1}, 2);
  try {
    planElementwise(add_out, bound(add_out, {shifted, y, 1, out}));
    ADD_FAILURE() << "partial overlap not raised";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("some elements of the input tensor and the written-to "
                                         "tensor refer to a single memory location"),
              std::string::npos)
        << e.what();
  }
  // Every other element of the same storage: too hard to judge, so the CPU decides.
  const at::Tensor strided = viewOf(storage, {4}, {2}, 0);
  EXPECT_FALSE(planElementwise(add_out, bound(add_out, {strided, y, 1, out})).has_value());
  // An expanded output (one element written four times): ATen's internal-overlap error.
  const at::Tensor expanded = viewOf(storage, {4}, {0}, 0);
  EXPECT_THROW(planElementwise(add_out, bound(add_out, {y, y, 1, expanded})), c10::Error);
}

TEST(LaunchPlan, OutputResizeIsPlannedNotDone) {
  const NativeOpBinding add_out = bindingOf("aten::add", "out");
  const at::Tensor out = at::empty({3}, kFloatOnDevice);
  const at::Tensor a = randomOnDevice({4, 5}), b = randomOnDevice({4, 5});
  const c10::optional<LaunchPlan> plan = planElementwise(add_out, bound(add_out, {a, b, 1, out}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->outputs[0].given, 0);
  EXPECT_TRUE(plan->outputs[0].resize);
  EXPECT_EQ(at::IntArrayRef(plan->outputs[0].strides), at::IntArrayRef({5, 1}));
  EXPECT_EQ(out.sizes(), at::IntArrayRef({3})); // planning left the tensor alone
}

TEST(LaunchPlan, ExecutingAnElementwisePlanGivesTheOpsResult) {
  const NativeOpBinding add = bindingOf("aten::add", "Tensor");
  const at::Tensor a = randomOnDevice({5, 7}).t(); // transposed: the output follows its layout
  const at::Tensor b = randomOnDevice({5});
  const BoundCall call = bound(add, {a, b, 0.5});
  const c10::optional<LaunchPlan> plan = planElementwise(add, call);
  ASSERT_TRUE(plan.has_value());
  LaunchCounter* launches = launchCounter(LaunchKind::kCompiled, "test::planned_add");
  const c10::optional<TensorList> outputs = executePlan(*plan, call.operands, {}, launches);
  ASSERT_TRUE(outputs.has_value());
  const at::Tensor& result = (*outputs)[0];
  EXPECT_EQ(result.strides(), a.strides());
  EXPECT_TRUE(sameBits(result, at::add(a, b, 0.5)));
  EXPECT_TRUE(sameBits(result, at::add(a.cpu(), b.cpu(), 0.5)));
  EXPECT_EQ(launches->load(), 1);
}

TEST(LaunchPlan, ExecutingAnInPlacePlanWritesSelf) {
  const NativeOpBinding mul_ = bindingOf("aten::mul_", "Tensor");
  at::Tensor self = randomOnDevice({6, 4});
  const at::Tensor other = randomOnDevice({6, 4});
  const at::Tensor expected = at::mul(self.cpu(), other.cpu());
  const BoundCall call = bound(mul_, {self, other});
  const c10::optional<LaunchPlan> plan = planElementwise(mul_, call);
  ASSERT_TRUE(plan.has_value());
  LaunchCounter* launches = launchCounter(LaunchKind::kCompiled, "test::planned_mul_");
  const c10::optional<TensorList> outputs = executePlan(*plan, call.operands, {self}, launches);
  ASSERT_TRUE(outputs.has_value());
  EXPECT_TRUE((*outputs)[0].is_same(self));
  EXPECT_TRUE(sameBits(self, expected));
}

ReductionCall sumOverDim1(const at::Tensor& x) {
  ReductionCall call;
  call.op = fusion::findReductionOp("sum");
  call.inputs = {x};
  call.dims = {1};
  call.compute = at::kFloat;
  call.output_dtypes = {at::kFloat};
  return call;
}

TEST(LaunchPlan, ReductionPlanSplitsKeptAndReducedDimensions) {
  const at::Tensor x = viewOf(pendingStorage(768), {8, 6, 16}, {96, 16, 1});
  const int64_t allocations = allocatorStats().allocations;
  const c10::optional<LaunchPlan> plan = planReduction(sumOverDim1(x));
  EXPECT_EQ(allocatorStats().allocations, allocations);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->outputs[0].given, -1);
  EXPECT_EQ(at::IntArrayRef(plan->outputs[0].sizes), at::IntArrayRef({8, 16}));
  const PlannedLaunch& launch = plan->launches[0];
  EXPECT_EQ(launch.kind, KernelKind::kReduction);
  EXPECT_EQ(launch.reduction.kept_rank, 2); // [8, 16]: not mergeable around the reduced dim
  EXPECT_EQ(launch.reduction.reduced_rank, 1);
  EXPECT_TRUE(launch.reduction.column_order); // reduced across contiguous columns
  ASSERT_EQ(launch.operands.size(), 2u);
  EXPECT_EQ(at::IntArrayRef(launch.operands[0].sizes), at::IntArrayRef({8, 16}));
  EXPECT_EQ(at::IntArrayRef(launch.operands[0].strides), at::IntArrayRef({16, 1}));
  EXPECT_EQ(at::IntArrayRef(launch.operands[1].sizes), at::IntArrayRef({8, 16, 6}));
  EXPECT_EQ(at::IntArrayRef(launch.operands[1].strides), at::IntArrayRef({96, 1, 16}));
  ASSERT_EQ(launch.words.size(), 1u);
  EXPECT_EQ(launch.words[0], 6); // elements per reduced row
  EXPECT_EQ(launch.range, 8);
}

TEST(LaunchPlan, ExecutingAReductionPlanGivesTheOpsResult) {
  const at::Tensor x = randomOnDevice({8, 6, 16});
  const ReductionCall call = sumOverDim1(x);
  const c10::optional<LaunchPlan> plan = planReduction(call);
  ASSERT_TRUE(plan.has_value());
  LaunchCounter* launches = launchCounter(LaunchKind::kCompiled, "test::planned_sum");
  const c10::optional<TensorList> outputs = executePlan(*plan, call.inputs, {}, launches);
  ASSERT_TRUE(outputs.has_value());
  EXPECT_TRUE(sameBits((*outputs)[0], at::sum(x, {1})));
}

TEST(ReductionSplit, ARowSplitsIntoItsLargestDivisorFrom4To64WithChunksOf4096) {
  auto merged = [](int64_t n) { return rowChunks(n, n); }; // a row of one dimension
  EXPECT_EQ(merged((int64_t{1} << 18) - 1), 0);            // too short
  EXPECT_EQ(merged(int64_t{1} << 18), 64);
  EXPECT_EQ(merged(int64_t{1} << 24), 64);
  EXPECT_EQ(merged(2 * 3 * 5 * 7 * 11 * 13 * 17), 55); // 56 to 64 do not divide it
  EXPECT_EQ(merged(1000003), 0);                       // a prime
  EXPECT_EQ(merged(2 * 1000003), 0);                   // only 2 of 2 to 64 divides it
  EXPECT_EQ(merged(5 * 65537), 5);
  // Rows of several dimensions are cut along the outermost one.
  EXPECT_EQ(rowChunks(1024 * 1000, 1024), 64);
  EXPECT_EQ(rowChunks(1031 * 1000, 1031), 0); // a prime outermost size
  EXPECT_EQ(rowChunks(6 * 100000, 6), 6);
}

ReductionCall fullSum(const at::Tensor& x) {
  ReductionCall call = sumOverDim1(x);
  call.dims = {0, 1};
  return call;
}

TEST(ReductionSplit, AFullSumOfALongRowPlansChunksThenTheirSum) {
  const int64_t n = 1024 * 1024;
  const at::Tensor x = viewOf(pendingStorage(2 * n), {1024, 1024}, {2048, 2}); // every other
  const c10::optional<LaunchPlan> plan = planReduction(fullSum(x));
  ASSERT_TRUE(plan.has_value());
  // The call's output, then the float64 partials, which the call does not return.
  ASSERT_EQ(plan->outputs.size(), 2u);
  EXPECT_EQ(plan->outputs[1].given, -1);
  EXPECT_EQ(at::IntArrayRef(plan->outputs[1].sizes), at::IntArrayRef({64}));
  EXPECT_EQ(plan->outputs[1].dtype, at::kDouble);
  ASSERT_EQ(plan->launches.size(), 2u);

  const PlannedLaunch& chunks = plan->launches[0];
  EXPECT_EQ(chunks.reduction.op->name, "sum");
  EXPECT_EQ(chunks.reduction.outputs[0], at::kDouble);
  EXPECT_EQ(chunks.operands[0].role, OperandRole::kOutput);
  EXPECT_EQ(chunks.operands[0].index, 1);
  EXPECT_EQ(at::IntArrayRef(chunks.operands[1].sizes), at::IntArrayRef({64, n / 64}));
  EXPECT_EQ(at::IntArrayRef(chunks.operands[1].strides), at::IntArrayRef({2 * n / 64, 2}));
  EXPECT_EQ(chunks.words.back(), n / 64);
  EXPECT_EQ(chunks.range, 64);
  EXPECT_EQ(chunks.key, chunks.reduction.key());

  const PlannedLaunch& combine = plan->launches[1];
  EXPECT_EQ(combine.reduction.op->name, "sum");
  EXPECT_EQ(combine.reduction.inputs[0], at::kDouble);
  EXPECT_EQ(combine.reduction.outputs[0], at::kFloat);
  ASSERT_EQ(combine.operands.size(), 2u);
  EXPECT_EQ(combine.operands[0].index, 0); // the call's output
  EXPECT_EQ(combine.operands[1].role, OperandRole::kOutput);
  EXPECT_EQ(combine.operands[1].index, 1); // reads the partials
  EXPECT_EQ(at::IntArrayRef(combine.operands[1].sizes), at::IntArrayRef({1, 64}));
  EXPECT_EQ(at::IntArrayRef(combine.words), at::IntArrayRef({64}));
  EXPECT_EQ(combine.range, 1);
  EXPECT_NE(combine.key, chunks.key);
}

TEST(ReductionSplit, ARowOfTwoDimensionsIsCutAlongItsOutermost) {
  // A column slice [1024, 1000] of a [1024, 1024] matrix: its dimensions do not merge.
  const at::Tensor x = viewOf(pendingStorage(1024 * 1024), {1024, 1000}, {1024, 1});
  const c10::optional<LaunchPlan> plan = planReduction(fullSum(x));
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->launches.size(), 2u);
  const PlannedLaunch& chunks = plan->launches[0];
  EXPECT_EQ(chunks.reduction.kept_rank, 1);
  EXPECT_EQ(chunks.reduction.reduced_rank, 2);
  EXPECT_EQ(at::IntArrayRef(chunks.operands[1].sizes), at::IntArrayRef({64, 16, 1000}));
  EXPECT_EQ(at::IntArrayRef(chunks.operands[1].strides), at::IntArrayRef({16 * 1024, 1024, 1}));
  EXPECT_EQ(chunks.words.back(), 16 * 1000);
  EXPECT_EQ(at::IntArrayRef(plan->launches[1].operands[1].sizes), at::IntArrayRef({1, 64}));
}

TEST(ReductionSplit, ExecutingASplitPlanReturnsOnlyTheCallsOutput) {
  const at::Tensor x = randomOnDevice({1 << 20});
  const c10::optional<TensorList> outputs = launchReduction(
      fullSum(x.view({1024, 1024})), launchCounter(LaunchKind::kCompiled, "test::split_sum"));
  ASSERT_TRUE(outputs.has_value());
  ASSERT_EQ(outputs->size(), 1u);
  const at::Tensor want = x.cpu().to(at::kDouble).sum();
  EXPECT_NEAR((*outputs)[0].cpu().item<double>(), want.item<double>(),
              1e-6 * x.cpu().abs().sum().item<double>());
}

TEST(ReductionSplit, ARowOfAnOpWithoutPartialsStaysOneLaunch) {
  ReductionCall call = fullSum(viewOf(pendingStorage(1 << 20), {1024, 1024}, {1024, 1}));
  call.op = fusion::findReductionOp("var");
  call.params = {1};
  const c10::optional<LaunchPlan> plan = planReduction(call);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->outputs.size(), 1u);
  EXPECT_EQ(plan->launches.size(), 1u);
}

// Batch norm's forward over dims (0, 2, 3) of `x`: input, weight and bias (expanded).
ReductionCall batchNormOver(const at::Tensor& x) {
  ReductionCall call;
  call.op = fusion::findReductionOp("batch_norm");
  const at::Tensor per_channel = at::ones({1, x.size(1), 1, 1}).to(kNeuronDeviceType);
  call.inputs = {x, per_channel.expand(x.sizes()), per_channel.expand(x.sizes())};
  call.dims = {0, 2, 3};
  call.compute = at::kFloat;
  call.output_dtypes.assign(static_cast<size_t>(call.op->num_outputs), at::kFloat);
  call.params = {1e-5};
  return call;
}

TEST(LaunchPlan, AChannelBetweenReducedDimensionsRunsInBlockedRows) {
  // [N, C, H, W]: a channel's elements are N planes, C * H * W apart.
  const c10::optional<LaunchPlan> plan = planReduction(
      batchNormOver(viewOf(pendingStorage(4 * 8 * 36), {4, 8, 6, 6}, {288, 36, 6, 1})));
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->launches.size(), 1u);
  const fusion::ReductionSignature& signature = plan->launches[0].reduction;
  EXPECT_EQ(signature.kept_rank, 1);
  EXPECT_EQ(signature.reduced_rank, 2); // the batch, then the merged plane
  EXPECT_TRUE(signature.blocked_rows);
  EXPECT_NE(signature.describe().find("blocked rows"), std::string::npos);
}

TEST(LaunchPlan, AChannelOutermostInMemoryKeepsRowOrder) {
  // The same logical shape with channels outermost in memory: each channel one contiguous run.
  const c10::optional<LaunchPlan> channels_outer = planReduction(
      batchNormOver(viewOf(pendingStorage(4 * 8 * 36), {4, 8, 6, 6}, {36, 144, 6, 1})));
  ASSERT_TRUE(channels_outer.has_value());
  EXPECT_FALSE(channels_outer->launches[0].reduction.blocked_rows);
  // A plain sum over the middle dimension is no row-wise op with per-row results: row order.
  const c10::optional<LaunchPlan> sum =
      planReduction(sumOverDim1(viewOf(pendingStorage(8 * 6 * 16), {8, 6, 16}, {96, 16, 1})));
  ASSERT_TRUE(sum.has_value());
  EXPECT_FALSE(sum->launches[0].reduction.blocked_rows);
}

TEST(LaunchPlan, BlockedRowsChangeTheKernelKeyOnly) {
  const c10::optional<LaunchPlan> plan = planReduction(
      batchNormOver(viewOf(pendingStorage(4 * 8 * 36), {4, 8, 6, 6}, {288, 36, 6, 1})));
  ASSERT_TRUE(plan.has_value());
  fusion::ReductionSignature rows = plan->launches[0].reduction;
  rows.blocked_rows = false;
  EXPECT_NE(rows.key(), plan->launches[0].reduction.key());
}

TEST(LaunchPlan, EmptyOutputPlansNoLaunch) {
  const NativeOpBinding add = bindingOf("aten::add", "Tensor");
  const at::Tensor a = viewOf(pendingStorage(0), {0, 5}, {5, 1});
  const c10::optional<LaunchPlan> plan = planElementwise(add, bound(add, {a, a, 1}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->outputs.size(), 1u);
  EXPECT_TRUE(plan->launches.empty());
}

} // namespace
} // namespace torchneuron

// Kernels compile into the in-memory cache only: the test writes nothing under $HOME.
int main(int argc, char** argv) {
  setenv("NEURON_CACHE", "0", 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

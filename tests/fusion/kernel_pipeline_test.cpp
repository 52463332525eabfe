// The compile pipeline end to end: a registry op's MLIR compiles to object code, links through
// ORC and computes the right numbers through the slot ABI.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/compiler.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"
#include "launcher/object_loader.h"
#include "launcher/parallel_launch.h"

namespace torchneuron::fusion {
namespace {

ElementwiseSignature rankOneSignature(const char* op, c10::ScalarType dtype, int inputs) {
  ElementwiseSignature s;
  s.op = findElementwiseOp(op);
  s.compute = dtype;
  s.output = dtype;
  s.inputs.assign(inputs, dtype);
  s.rank = 1;
  s.inner.assign(inputs + 1, InnerStride::kContiguous);
  for (size_t i = 0; i < s.op->constants.size(); ++i) s.constants.push_back(-1);
  return s;
}

// Slots of one contiguous rank-1 memref: allocated, aligned, offset, size, stride.
void pushVector(std::vector<int64_t>& slots, const void* data, int64_t size) {
  const auto address = reinterpret_cast<int64_t>(data);
  slots.insert(slots.end(), {address, address, 0, size, 1});
}

TEST(KernelPipeline, AddWithAlphaComputesThroughTheSlotAbi) {
  ElementwiseSignature s = rankOneSignature("add", c10::kFloat, 2);
  const std::string mlir = buildElementwiseKernel(s);
  const ObjectCode object = compileKernel(mlir, kernelEntryName(s.key()));
  ASSERT_FALSE(object.bytes.empty());
  const std::shared_ptr<LoadedCode> code = loadKernelObject(object.bytes, object.entry);
  KernelFunction kernel = code->function();

  const int64_t n = 1000;
  std::vector<float> a(n), b(n), out(n, -1);
  for (int64_t i = 0; i < n; ++i) a[i] = i * 0.5f, b[i] = 3.0f - i;
  std::vector<int64_t> slots;
  pushVector(slots, out.data(), n);
  pushVector(slots, a.data(), n);
  pushVector(slots, b.data(), n);
  const double alpha = 2.0;
  int64_t alpha_bits;
  std::memcpy(&alpha_bits, &alpha, sizeof alpha);
  slots.push_back(alpha_bits);
  ASSERT_EQ(static_cast<int>(slots.size()), kernelArgumentSlots(s));
  kernel(slots.data(), 10, 20);  // only [10, 20) is written
  for (int64_t i = 0; i < n; ++i) {
    const float expected = (i >= 10 && i < 20) ? a[i] + 2.0f * b[i] : -1.0f;
    EXPECT_EQ(out[i], expected) << "at " << i;
  }
  launchKernel(kernel, slots.data(), LaunchShape{n, 1, 2});
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + 2.0f * b[i]) << "at " << i;
}

TEST(KernelPipeline, EveryRegisteredOpCompilesForFloat32) {
  for (const ElementwiseOp& op : elementwiseOps()) {
    ElementwiseSignature s;
    s.op = &op;
    s.compute = c10::kFloat;
    s.output = op.promotion == TypePromotion::kAlwaysBool ? c10::kBool : c10::kFloat;
    if (!(op.compute_classes & kFloats)) s.compute = s.output = c10::kLong;
    for (const OperandSpec& spec : op.operands)
      s.inputs.push_back(spec.bool_only ? c10::kBool : s.compute);
    s.present.assign(op.optional_operands.size(), true);
    s.constants.assign(op.constants.size(), 0);
    s.rank = 2;
    s.inner.assign(s.inputs.size() + 1, InnerStride::kStrided);
    const std::string mlir = buildElementwiseKernel(s);
    EXPECT_NO_THROW(compileKernel(mlir, kernelEntryName(s.key()))) << op.name << "\n" << mlir;
  }
}

TEST(KernelPipeline, BadMlirIsAnErrorNamingTheProblem) {
  try {
    compileKernel("module { func.func @kernel(%a: i64) { bogus.op } }", "broken");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("[fusion] kernel MLIR does not parse"),
              std::string::npos) << error.what();
  }
}

// Runs a rank-1 float add kernel over four elements; true when it computed 1 + 2 everywhere.
bool addsCorrectly(KernelFunction kernel) {
  std::vector<float> a(4, 1.0f), b(4, 2.0f), out(4, 0.0f);
  std::vector<int64_t> slots;
  for (float* data : {out.data(), a.data(), b.data()}) pushVector(slots, data, 4);
  const double alpha = 1.0;
  int64_t alpha_bits;
  std::memcpy(&alpha_bits, &alpha, sizeof alpha);
  slots.push_back(alpha_bits);
  kernel(slots.data(), 0, 4);
  return out == std::vector<float>(4, 3.0f);
}

TEST(ObjectLoader, OneEntryLinksTwiceAndUnlinksWithItsLastReference) {
  ElementwiseSignature s = rankOneSignature("add", c10::kFloat, 2);
  const ObjectCode object = compileKernel(buildElementwiseKernel(s), "twice_linked_add");
  std::shared_ptr<LoadedCode> first = loadKernelObject(object.bytes, object.entry);
  // A second copy of the same symbol (an evicted kernel still running while it is reloaded).
  std::shared_ptr<LoadedCode> second = loadKernelObject(object.bytes, object.entry);
  EXPECT_NE(first->function(), second->function());
  EXPECT_EQ(first->bytes(), object.bytes.size());
  EXPECT_TRUE(addsCorrectly(first->function()));
  first.reset();  // unlinks the first copy; the second keeps working
  EXPECT_TRUE(addsCorrectly(second->function()));
  second.reset();
  EXPECT_TRUE(addsCorrectly(loadKernelObject(object.bytes, object.entry)->function()));
}

TEST(KernelCache, OneCompilePerKeyAndFailuresAreRemembered) {
  resetKernelCacheCounters();
  ElementwiseSignature s = rankOneSignature("mul", c10::kDouble, 2);
  int builds = 0;
  auto build = [&] { ++builds; return buildElementwiseKernel(s); };
  const KernelHandle first = kernelFor(s.key(), build);
  const KernelHandle second = kernelFor(s.key(), build);
  EXPECT_NE(first->function, nullptr);
  EXPECT_EQ(first->function, second->function);
  EXPECT_EQ(builds, 1);

  int broken_builds = 0;
  auto broken = [&] { ++broken_builds; return std::string("not mlir"); };
  const KernelHandle failed = kernelFor(12345, broken);
  EXPECT_EQ(failed->function, nullptr);
  EXPECT_NE(failed->failure.find("[fusion]"), std::string::npos);
  kernelFor(12345, broken);
  EXPECT_EQ(broken_builds, 1);
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.compile_failures, 1);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.hits, 2);
}

}  // namespace
}  // namespace torchneuron::fusion

// The compile pipeline end to end: a registry op's MLIR compiles to object code, links through
// ORC and computes the right numbers through the slot ABI.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fusion/compiler.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"
#include "launcher/kernel_abi.h"
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
  for (size_t i = 0; i < s.op->constants.size(); ++i)
    s.constants.push_back(-1);
  return s;
}

// One contiguous rank-1 memref.
void pushVector(KernelArguments& arguments, const void* data, const int64_t& size) {
  static const int64_t unit = 1;
  arguments.memref(data, &size, &unit, 1);
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
  for (int64_t i = 0; i < n; ++i)
    a[i] = i * 0.5f, b[i] = 3.0f - i;
  KernelArguments arguments;
  pushVector(arguments, out.data(), n);
  pushVector(arguments, a.data(), n);
  pushVector(arguments, b.data(), n);
  arguments.word(floatSlot(2.0)); // alpha
  ASSERT_EQ(arguments.size(), kernelArgumentSlots(s));
  kernel(arguments.slots(), 10, 20); // only [10, 20) is written
  for (int64_t i = 0; i < n; ++i) {
    const float expected = (i >= 10 && i < 20) ? a[i] + 2.0f * b[i] : -1.0f;
    EXPECT_EQ(out[i], expected) << "at " << i;
  }
  launchKernel(kernel, arguments.slots(), LaunchShape{n, 1, 2});
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] + 2.0f * b[i]) << "at " << i;
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
              std::string::npos)
        << error.what();
  }
}

} // namespace
} // namespace torchneuron::fusion

// The host CPU target: its description is the compile it runs (an option changes both the code
// and the key material; the same host gives the same key material), and a kernel compiled, linked
// and launched through the interface computes what ATen computes.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "fusion/compiler.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"
#include "target/host_cpu_target.h"

namespace torchneuron {
namespace {

// A binary op over contiguous rank-1 float tensors.
fusion::ElementwiseSignature binarySignature(const char* op) {
  fusion::ElementwiseSignature s;
  s.op = fusion::findElementwiseOp(op);
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.rank = 1;
  s.inner.assign(3, fusion::InnerStride::kContiguous);
  return s;
}

bool hostHasAvx2() { return fusion::hostCpu().features.find("+avx2") != std::string::npos; }

TEST(HostCpuTarget, DescriptionPrintsThePipelinesTheCompilerRuns) {
  const HostCpuTarget target;
  const TargetDescription& d = target.description();
  EXPECT_EQ(d.name, "host-cpu");
  EXPECT_EQ(d.triple, fusion::hostCpu().triple);
  EXPECT_EQ(d.features, fusion::hostCpu().features);
  // MLIR's print of the parsed pipeline spells out options the source string leaves at default.
  EXPECT_EQ(d.lowering_pipeline.rfind("builtin.module(convert-linalg-to-loops", 0), 0)
      << d.lowering_pipeline;
  EXPECT_NE(d.lowering_pipeline.find("include-bf16=true"), std::string::npos);
  EXPECT_GT(d.lowering_pipeline.size(), std::string(fusion::kLoweringPipeline).size());
  // LLVM's print of its O3 module pipeline, vectorizers included, then the code generator's level.
  EXPECT_NE(d.optimization_pipeline.find("loop-vectorize"), std::string::npos);
  EXPECT_NE(d.optimization_pipeline.find("slp-vectorizer"), std::string::npos);
  EXPECT_NE(d.optimization_pipeline.find("; codegen O3"), std::string::npos);
  EXPECT_EQ(d.vector_math.rfind("LIBMVEC-X86", 0), 0) << d.vector_math;
  if (hostHasAvx2()) {
    EXPECT_NE(d.vector_math.find(" _ZGVdN8v_tanhf 8 "), std::string::npos);
  }
  // With AVX-512, exp and its kin get their 16-lane variants under the intrinsics' names too
  // (math.exp lowers to llvm.exp.f32), so a float loop calling them keeps every op's width.
  const bool avx512 = fusion::hostCpu().features.find("+avx512f") != std::string::npos;
  for (const char* entry : {"; llvm.exp.f32 _ZGVeN16v_expf 16 ", "; expf _ZGVeN16v_expf 16 ",
                            "; llvm.log.f64 _ZGVeN8v_log 8 ", "; llvm.pow.f32 _ZGVeN16vv_powf 16 "})
    EXPECT_EQ(d.vector_math.find(entry) != std::string::npos, avx512) << entry;
  EXPECT_NE(d.optimization_pipeline.find("; unmasked selected loads; realigned stack; codegen O3"),
            std::string::npos);
}

TEST(HostCpuTarget, ThePrintedLoweringPipelineIsTheOneThatRuns) {
  // Compiling with the printed pipeline (its anchor stripped) describes and compiles the same.
  const HostCpuTarget standard;
  const TargetDescription& d = standard.description();
  const std::string anchor = "builtin.module(";
  fusion::CodegenOptions printed;
  printed.lowering_pipeline =
      d.lowering_pipeline.substr(anchor.size(), d.lowering_pipeline.size() - anchor.size() - 1);
  const HostCpuTarget reparsed(printed);
  EXPECT_EQ(reparsed.description(), d);
  const std::string mlir = fusion::buildElementwiseKernel(binarySignature("add"));
  EXPECT_EQ(reparsed.compile(mlir, "reparsed_add").bytes,
            standard.compile(mlir, "reparsed_add").bytes);
}

TEST(HostCpuTarget, EachCodegenOptionChangesTheCodeAndTheKeyMaterial) {
  const HostCpuTarget standard;
  const std::string mlir = fusion::buildElementwiseKernel(binarySignature("add"));
  const std::string standard_ir = standard.lower(mlir, "option_add")->text();
  fusion::CodegenOptions scalar;
  scalar.vectorize = false;
  fusion::CodegenOptions o1;
  o1.optimization_level = 1;
  fusion::CodegenOptions o0;
  o0.optimization_level = 0;
  fusion::CodegenOptions no_vector_math;
  no_vector_math.vector_math = false;
  fusion::CodegenOptions reordered; // the same passes, expand-strided-metadata after lower-affine
  reordered.lowering_pipeline =
      "convert-linalg-to-loops, lower-affine, expand-strided-metadata,"
      " arith-expand{include-bf16=true}, convert-scf-to-cf, convert-math-to-llvm,"
      " convert-math-to-libm, convert-arith-to-llvm, finalize-memref-to-llvm,"
      " convert-cf-to-llvm, convert-func-to-llvm, convert-index-to-llvm,"
      " reconcile-unrealized-casts";
  for (const fusion::CodegenOptions& options : {scalar, o1, o0, no_vector_math, reordered}) {
    const HostCpuTarget changed(options);
    EXPECT_NE(changed.description().compileOptions(), standard.description().compileOptions())
        << changed.description().compileOptions();
  }
  // The options are live in the compile, not only in the key: no vectorizer, no vector loop.
  if (hostHasAvx2()) {
    EXPECT_NE(standard_ir.find("<8 x float>"), std::string::npos);
    EXPECT_EQ(HostCpuTarget(scalar).lower(mlir, "option_add")->text().find("<8 x float>"),
              std::string::npos);
  }
  EXPECT_NE(HostCpuTarget(o0).lower(mlir, "option_add")->text(), standard_ir);
}

TEST(HostCpuTarget, TwoTargetsOnOneHostShareKeyMaterialFreeOfPaths) {
  const HostCpuTarget first, second;
  EXPECT_EQ(first.description(), second.description());
  EXPECT_EQ(first.description().compileOptions(), second.description().compileOptions());
  EXPECT_EQ(deviceTarget().description(), first.description());
  const std::string options = first.description().compileOptions();
  EXPECT_EQ(options.find('/'), std::string::npos) << options;
}

TEST(HostCpuTarget, InvalidOptionsAreRejectedNamingTheProblem) {
  fusion::CodegenOptions bad_level;
  bad_level.optimization_level = 4;
  EXPECT_THROW(HostCpuTarget{bad_level}, std::logic_error);
  fusion::CodegenOptions bad_pipeline;
  bad_pipeline.lowering_pipeline = "no-such-pass";
  try {
    HostCpuTarget target(bad_pipeline);
    FAIL() << "expected an error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("no-such-pass"), std::string::npos) << error.what();
  }
}

TEST(HostCpuTarget, LowerEmitLinkLaunchComputesWhatATenComputes) {
  const Target& target = deviceTarget();
  const fusion::ElementwiseSignature s = binarySignature("mul"); // exactly rounded, as ATen's
  std::unique_ptr<LoweredKernel> lowered =
      target.lower(fusion::buildElementwiseKernel(s), "target_mul");
  EXPECT_EQ(lowered->entry(), "target_mul");
  const ObjectCode object = target.emitObject(std::move(lowered));
  const std::shared_ptr<LoadedCode> code = target.link(object.bytes, object.entry);

  const int64_t n = 100003; // above the inline limit: split across threads
  const at::Tensor a = at::randn({n}), b = at::randn({n});
  at::Tensor out = at::full({n}, -1.0f);
  std::vector<int64_t> slots;
  for (const at::Tensor* t : {&std::as_const(out), &a, &b}) {
    const auto address = reinterpret_cast<int64_t>(t->data_ptr<float>());
    slots.insert(slots.end(), {address, address, 0, n, 1});
  }
  ASSERT_EQ(static_cast<int>(slots.size()), fusion::kernelArgumentSlots(s));
  target.launch(code->function(), slots.data(), LaunchShape{n, 1, 4});
  EXPECT_TRUE(at::equal(out, at::mul(a, b)));
}

} // namespace
} // namespace torchneuron

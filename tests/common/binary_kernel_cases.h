#pragma once
// Float binary elementwise kernels for the cache and launcher tests: a few ops with their scalar
// reference, their signature over contiguous float tensors, and a check that a loaded kernel
// computes them.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cache/kernel_cache.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"
#include "launcher/kernel_abi.h"

namespace torchneuron {
namespace test {

struct BinaryCase {
  const char* op;
  std::function<float(float, float)> reference;
};

inline const std::vector<BinaryCase>& cases() {
  static const std::vector<BinaryCase> all = {
      {"add", [](float a, float b) { return a + b; }},
      {"sub", [](float a, float b) { return a - b; }},
      {"mul", [](float a, float b) { return a * b; }},
      {"maximum", [](float a, float b) { return std::max(a, b); }},
      {"minimum", [](float a, float b) { return std::min(a, b); }},
      {"hypot", [](float a, float b) { return std::hypot(a, b); }},
  };
  return all;
}

inline fusion::ElementwiseSignature signatureOf(const char* op) {
  fusion::ElementwiseSignature s;
  s.op = fusion::findElementwiseOp(op);
  s.compute = s.output = c10::kFloat;
  s.inputs = {c10::kFloat, c10::kFloat};
  s.inner.assign(3, fusion::InnerStride::kContiguous);
  return s;
}

inline KernelHandle kernelOf(const fusion::ElementwiseSignature& s) {
  return kernelFor(s.key(), [&] { return fusion::buildElementwiseKernel(s); });
}

// Runs `kernel` (case `c`) over 64 elements; true when every element matches the reference.
inline bool computesCorrectly(KernelFunction kernel, const BinaryCase& c,
                              const fusion::ElementwiseSignature& s) {
  const int64_t n = 64;
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (int64_t i = 0; i < n; ++i)
    a[i] = 0.25f * i - 3.0f, b[i] = 2.0f - 0.5f * i;
  KernelArguments arguments;
  const int64_t unit = 1;
  for (float* data : {out.data(), a.data(), b.data()})
    arguments.memref(data, &n, &unit, 1);
  while (arguments.size() < fusion::kernelArgumentSlots(s)) // alpha = 1
    arguments.word(floatSlot(1.0));
  kernel(arguments.slots(), 0, n);
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(out[i] - c.reference(a[i], b[i])) > 1e-5f * (1 + std::fabs(out[i]))) return false;
  return true;
}

inline bool computesCorrectly(const KernelHandle& kernel, const BinaryCase& c,
                              const fusion::ElementwiseSignature& s) {
  return computesCorrectly(kernel->function, c, s);
}

} // namespace test
} // namespace torchneuron

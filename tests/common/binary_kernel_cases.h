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
  std::vector<int64_t> slots;
  for (float* data : {out.data(), a.data(), b.data()}) {
    const auto address = reinterpret_cast<int64_t>(data);
    slots.insert(slots.end(), {address, address, 0, n, 1});
  }
  while (static_cast<int>(slots.size()) < fusion::kernelArgumentSlots(s)) { // alpha = 1
    const double one = 1.0;
    int64_t bits;
    std::memcpy(&bits, &one, sizeof bits);
    slots.push_back(bits);
  }
  kernel(slots.data(), 0, n);
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

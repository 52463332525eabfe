// Random ops whose CPU kernels call PyTorch's CPU generator once per element, drawn here in bulk
// from the generator's engine instead (mt19937_stream.h), with the same numbers bit for bit and
// the generator left where ATen's kernel leaves it:
//
// - bernoulli_(p) with a scalar p, dropout's mask (`empty_like(x).bernoulli_(1 - p)`): per
//   element two engine words (CPUGeneratorImpl::random64, first word high), their low 53 bits
//   as a double in [0, 1) compared with p;
// - uniform_(from, to), torch.rand's and nn.init's (kaiming_uniform_ initializes every Linear and
//   convolution): per float element one word, its low 24 bits times 2^-24; per double element
//   two words as above; then x * (to - from) + from in the element type.
//
// ATen's kernels cost about 8 ns an element here (a generator call per word); these run the
// words' generation and the per-element arithmetic as vector loops. Only contiguous float32 and
// float64 tensors with arguments ATen accepts take this path; everything else (other dtypes,
// strided tensors, arguments ATen rejects, another device's generator) takes the generic library
// path, where ATen raises its own errors.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Config.h>
#include <ATen/core/DistributionsHelper.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "device/host_view.h"
#include "device/library_ops.h"
#include "device/metrics.h"
#include "device/mt19937_stream.h"
#include "support/made_once.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

#define NEURON_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

constexpr uint64_t kMantissaMask53 = (uint64_t{1} << 53) - 1;
constexpr double kTwoTo53 = 9007199254740992.0;

// The element's 53-bit draw from words 2i (high) and 2i+1 (low), as CPUGeneratorImpl::random64
// makes them.
inline uint64_t draw53(const uint32_t* words, int64_t i) {
  return (uint64_t{words[2 * i]} << 32 | words[2 * i + 1]) & kMantissaMask53;
}

// out[i] = 1 where the element's draw, as ATen's uniform double (the draw times 2^-53), is below
// p: the same test as the integer draw below `limit` (limitFor).
template <typename T>
inline void bernoulliFromWords(const uint32_t* __restrict words, T* __restrict out, int64_t count,
                               int64_t limit) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = static_cast<int64_t>(draw53(words, i)) < limit ? T(1) : T(0);
}

// The integers d in [0, 2^53) with d * 2^-53 < p are those below ceil(p * 2^53): both scalings by
// 2^53 are exact, and for an integer d, d < t exactly when d < ceil(t). At most 2^53 (p = 1).
int64_t limitFor(double p) { return static_cast<int64_t>(std::ceil(p * kTwoTo53)); }

NEURON_VECTOR_CLONES void bernoulliFloats(const uint32_t* words, float* out, int64_t count,
                                          int64_t limit) {
  bernoulliFromWords(words, out, count, limit);
}

NEURON_VECTOR_CLONES void bernoulliDoubles(const uint32_t* words, double* out, int64_t count,
                                           int64_t limit) {
  bernoulliFromWords(words, out, count, limit);
}

// ATen's uniform_real: x * (to - from) + from, with x the draw scaled into [0, 1) in the element
// type (float: one word's low 24 bits; double: two words' 53). ATen's kernel is compiled once
// per CPU capability, and a build may fuse the multiply and add (one rounding; its AVX2 build
// does for float here) or round twice: `fused` says which (atenUniformRounding).
template <typename T> inline T uniformOf(T x, T from, T range, bool fused) {
  return fused ? std::fma(x, range, from) : x * range + from; // this file: -ffp-contract=off
}

NEURON_VECTOR_CLONES void uniformFloats(const uint32_t* __restrict words, float* __restrict out,
                                        int64_t count, float from, float range, bool fused) {
  constexpr float kScale = 1.0f / float(1 << 24);
  if (fused)
    for (int64_t i = 0; i < count; ++i)
      out[i] = uniformOf(static_cast<float>(words[i] & 0xFFFFFFU) * kScale, from, range, true);
  else
    for (int64_t i = 0; i < count; ++i)
      out[i] = uniformOf(static_cast<float>(words[i] & 0xFFFFFFU) * kScale, from, range, false);
}

NEURON_VECTOR_CLONES void uniformDoubles(const uint32_t* __restrict words, double* __restrict out,
                                         int64_t count, double from, double range, bool fused) {
  if (fused)
    for (int64_t i = 0; i < count; ++i)
      out[i] = uniformOf(static_cast<double>(draw53(words, i)) / kTwoTo53, from, range, true);
  else
    for (int64_t i = 0; i < count; ++i)
      out[i] = uniformOf(static_cast<double>(draw53(words, i)) / kTwoTo53, from, range, false);
}

// Fills `count` elements at `out`, `words_per_element` engine words each, chunk by chunk: `fill`
// turns a chunk's words into its elements.
template <typename T, typename Fill>
void fillFromEngine(T* out, int64_t count, int words_per_element, at::mt19937_data_pod& engine,
                    Fill fill) {
  constexpr int64_t kChunk = 2048; // elements per bulk draw: at most 16 KiB of words, in L1
  uint32_t words[2 * kChunk];
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t n = std::min(kChunk, count - begin);
    drawMt19937Words(engine, words, words_per_element * n);
    fill(words, out + begin, n);
  }
}

// How ATen's uniform_ rounds for element type T in this process, asked of ATen itself once: a
// CPU tensor of 4096 elements drawn by its kernel from a fresh generator, against both roundings
// of the same engine's words over a range where they differ. kNeither when neither matches every
// element, or when the two roundings agree on the whole sample (it cannot tell them apart):
// uniform_ then keeps ATen's kernel.
enum class UniformRounding { kFused, kTwoRoundings, kNeither };

template <typename T> UniformRounding atenUniformRounding() {
  static MadeOnce<UniformRounding> made; // fork-safe (made_once.h)
  return made.get([] {
    constexpr int64_t kCount = 4096;
    constexpr uint64_t kSeed = 20261206;
    constexpr double kFrom = -0.1;
    constexpr double kTo = 0.1;
    at::Tensor reference =
        at::empty({kCount}, at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
    reference.uniform_(kFrom, kTo, at::make_generator<at::CPUGeneratorImpl>(kSeed));
    at::mt19937_data_pod engine = at::mt19937(kSeed).data();
    std::vector<uint32_t> words(2 * kCount);
    const int per_element = std::is_same_v<T, float> ? 1 : 2;
    drawMt19937Words(engine, words.data(), per_element * kCount);
    const T from = static_cast<T>(kFrom);
    const T range = static_cast<T>(kTo) - from;
    std::vector<T> fused(kCount), separate(kCount);
    if constexpr (std::is_same_v<T, float>) {
      uniformFloats(words.data(), fused.data(), kCount, from, range, true);
      uniformFloats(words.data(), separate.data(), kCount, from, range, false);
    } else {
      uniformDoubles(words.data(), fused.data(), kCount, from, range, true);
      uniformDoubles(words.data(), separate.data(), kCount, from, range, false);
    }
    const T* drawn = reference.data_ptr<T>();
    const size_t bytes = kCount * sizeof(T);
    if (std::memcmp(fused.data(), separate.data(), bytes) == 0)
      return new UniformRounding(UniformRounding::kNeither);
    if (std::memcmp(drawn, fused.data(), bytes) == 0)
      return new UniformRounding(UniformRounding::kFused);
    if (std::memcmp(drawn, separate.data(), bytes) == 0)
      return new UniformRounding(UniformRounding::kTwoRoundings);
    return new UniformRounding(UniformRounding::kNeither);
  });
}

// Whether `self` and `gen` are a call this file draws itself (before the op's own arguments).
bool drawableTensor(const at::Tensor& self, const c10::optional<at::Generator>& gen) {
  return isDenseDeviceTensor(self) &&
         (self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble) &&
         self.numel() > 0 && self.is_contiguous() &&
         (!gen || !gen->defined() || gen->device().type() == at::kCPU);
}

// The generator a call draws from.
at::CPUGeneratorImpl* generatorOf(const c10::optional<at::Generator>& gen) {
  return at::get_generator_or_default<at::CPUGeneratorImpl>(gen,
                                                            at::detail::getDefaultCPUGenerator());
}

// Runs `draw(host address of self, engine state)` under the generator's lock, as ATen's kernel
// does, and writes the engine's state back; counts the launch as `name`'s. False, having drawn
// nothing, when the engine's state is one the bulk draw does not continue (drawableMt19937State:
// torch.set_rng_state accepts a few such states); the caller then runs ATen's kernel. In a window
// of the adaptive tracer it runs at its place: the recorded launches touching self run first.
template <typename Draw>
bool drawInto(const at::Tensor& self, at::CPUGeneratorImpl* generator, SiteLaunchCounter& site,
              const char* name, Draw draw) {
  tracer::EagerLibraryStep step;
  char* out = hostAddressOf(self);
  {
    // See ATen's Note [Acquire lock when using random generators].
    std::lock_guard<std::mutex> lock(generator->mutex_);
    at::mt19937 engine = generator->engine();
    at::mt19937_data_pod state = engine.data();
    if (!drawableMt19937State(state)) return false;
    draw(out, state);
    engine.set_data(state);
    generator->set_engine(engine);
  }
  recordLaunch(site.get(LaunchKind::kLibrary, name));
  return true;
}

// ATen built with MKL draws bernoulli_'s mask from an MKL stream seeded by one generator word,
// not per element: this file's bulk draw would differ, so such builds keep ATen's kernel.
constexpr bool kAtenBernoulliDrawsPerElement = !AT_MKL_ENABLED();

} // namespace

void runLibraryBernoulliScalar(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 3; // self, p, generator
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, kArguments);
  const at::Tensor& self = args[0].toTensor();
  const double p = args[1].toDouble();
  const c10::optional<at::Generator> gen = args[2].toOptional<at::Generator>();
  if (!kAtenBernoulliDrawsPerElement || !drawableTensor(self, gen) || !(p >= 0 && p <= 1))
    return runLibraryKernelOnHost(op, stack);
  static SiteLaunchCounter site;
  const bool drawn =
      drawInto(self, generatorOf(gen), site, "aten::bernoulli_.float",
               [&](char* out, at::mt19937_data_pod& engine) {
                 const int64_t limit = limitFor(p);
                 if (self.scalar_type() == at::kFloat)
                   fillFromEngine(reinterpret_cast<float*>(out), self.numel(), 2, engine,
                                  [limit](const uint32_t* w, float* o, int64_t n) {
                                    bernoulliFloats(w, o, n, limit);
                                  });
                 else
                   fillFromEngine(reinterpret_cast<double*>(out), self.numel(), 2, engine,
                                  [limit](const uint32_t* w, double* o, int64_t n) {
                                    bernoulliDoubles(w, o, n, limit);
                                  });
               });
  if (!drawn) return runLibraryKernelOnHost(op, stack);
  // The in-place op returns self, which is already the stack's first argument.
  torch::jit::drop(*stack, kArguments - 1);
}

namespace {

// ATen's checks of uniform_'s bounds (uniform_impl_): both finite within the element type's range,
// from <= to, and the range itself representable. A call failing any of them takes ATen's path,
// which raises its error.
template <typename T> bool uniformBoundsAccepted(double from, double to) {
  const double lowest = static_cast<double>(std::numeric_limits<T>::lowest());
  const double max = static_cast<double>(std::numeric_limits<T>::max());
  return from >= lowest && from <= max && to >= lowest && to <= max && from <= to &&
         to - from <= max;
}

} // namespace

void runLibraryUniform(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 4; // self, from, to, generator
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, kArguments);
  const at::Tensor& self = args[0].toTensor();
  const double from = args[1].toDouble();
  const double to = args[2].toDouble();
  const c10::optional<at::Generator> gen = args[3].toOptional<at::Generator>();
  const bool is_float = self.scalar_type() == at::kFloat;
  if (!drawableTensor(self, gen) || !(is_float ? uniformBoundsAccepted<float>(from, to)
                                               : uniformBoundsAccepted<double>(from, to)))
    return runLibraryKernelOnHost(op, stack);
  const UniformRounding rounding =
      is_float ? atenUniformRounding<float>() : atenUniformRounding<double>();
  if (rounding == UniformRounding::kNeither) return runLibraryKernelOnHost(op, stack);
  const bool fused = rounding == UniformRounding::kFused;
  static SiteLaunchCounter site;
  const bool drawn = drawInto(
      self, generatorOf(gen), site, "aten::uniform_", [&](char* out, at::mt19937_data_pod& engine) {
        if (is_float) {
          // As ATen's kernel: the bounds cast to float first, the range taken in float.
          const float lo = static_cast<float>(from);
          const float range = static_cast<float>(to) - lo;
          fillFromEngine(reinterpret_cast<float*>(out), self.numel(), 1, engine,
                         [lo, range, fused](const uint32_t* w, float* o, int64_t n) {
                           uniformFloats(w, o, n, lo, range, fused);
                         });
        } else {
          const double range = to - from;
          fillFromEngine(reinterpret_cast<double*>(out), self.numel(), 2, engine,
                         [from, range, fused](const uint32_t* w, double* o, int64_t n) {
                           uniformDoubles(w, o, n, from, range, fused);
                         });
        }
      });
  if (!drawn) return runLibraryKernelOnHost(op, stack);
  torch::jit::drop(*stack, kArguments - 1);
}

} // namespace torchneuron

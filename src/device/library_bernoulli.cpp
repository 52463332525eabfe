// bernoulli_(p) with a scalar p (dropout's mask: `empty_like(x).bernoulli_(1 - p)`) on float32
// and float64 device tensors, drawn from PyTorch's CPU generator as ATen's CPU kernel draws it:
// per element two engine words (the 64-bit draw of CPUGeneratorImpl::random64, first word high),
// its low 53 bits as a double in [0, 1) compared with p, so the device's masks equal the CPU's
// bit for bit and leave the generator where the CPU's kernel leaves it. ATen's kernel calls the
// generator per element (about 3.4 ns an element here); this one draws the words in bulk
// (mt19937_stream.h) and compares them in vector loops. Other calls (other dtypes, tensors that
// are not contiguous, a p outside [0, 1], another device's generator) take the generic library
// path, where ATen raises its own errors.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <type_traits>

#include "device/host_view.h"
#include "device/library_ops.h"
#include "device/metrics.h"
#include "device/mt19937_stream.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

constexpr uint64_t kMantissaMask = (uint64_t{1} << 53) - 1;
constexpr double kTwoTo53 = 9007199254740992.0;

// out[i] = 1 where the draw of words 2i (high) and 2i+1 (low), as ATen's uniform double
// (its low 53 bits times 2^-53), is below p: the same test as the integer below `limit`
// (limitFor). One function per vector width (GCC multiversioning).
template <typename T>
inline void bernoulliFromWords(const uint32_t* __restrict words, T* __restrict out, int64_t count,
                               int64_t limit) {
  for (int64_t i = 0; i < count; ++i) {
    const auto draw =
        static_cast<int64_t>((uint64_t{words[2 * i]} << 32 | words[2 * i + 1]) & kMantissaMask);
    out[i] = draw < limit ? T(1) : T(0);
  }
}

// The integers d in [0, 2^53) with d * 2^-53 < p are those below ceil(p * 2^53): both scalings by
// 2^53 are exact, and for an integer d, d < t exactly when d < ceil(t). At most 2^53 (p = 1).
int64_t limitFor(double p) { return static_cast<int64_t>(std::ceil(p * kTwoTo53)); }

__attribute__((target_clones("avx512f", "avx2", "default"))) void
bernoulliFloats(const uint32_t* words, float* out, int64_t count, int64_t limit) {
  bernoulliFromWords(words, out, count, limit);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
bernoulliDoubles(const uint32_t* words, double* out, int64_t count, int64_t limit) {
  bernoulliFromWords(words, out, count, limit);
}

template <typename T>
void fillBernoulli(T* out, int64_t count, double p, at::mt19937_data_pod& engine) {
  constexpr int64_t kChunk = 2048; // elements per bulk draw: 16 KiB of words, in L1
  uint32_t words[2 * kChunk];
  const int64_t limit = limitFor(p);
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t n = std::min(kChunk, count - begin);
    drawMt19937Words(engine, words, 2 * n);
    if constexpr (std::is_same_v<T, float>)
      bernoulliFloats(words, out + begin, n, limit);
    else
      bernoulliDoubles(words, out + begin, n, limit);
  }
}

// The calls this kernel draws itself; the rest take the generic path.
bool drawsDirectly(const at::Tensor& self, double p, const c10::optional<at::Generator>& gen) {
  return isDenseDeviceTensor(self) &&
         (self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble) &&
         self.numel() > 0 && self.is_contiguous() && p >= 0 && p <= 1 &&
         (!gen || !gen->defined() || gen->device().type() == at::kCPU);
}

// Whether the generator's engine is in a state the bulk draw continues (it always is unless
// something wrote a state torch.set_rng_state would refuse).
bool drawable(at::CPUGeneratorImpl* generator) {
  std::lock_guard<std::mutex> lock(generator->mutex_);
  return drawableMt19937State(generator->engine().data());
}

} // namespace

void runLibraryBernoulliScalar(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 3; // self, p, generator
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, kArguments);
  const at::Tensor& self = args[0].toTensor();
  const double p = args[1].toDouble();
  const c10::optional<at::Generator> gen = args[2].toOptional<at::Generator>();
  if (!drawsDirectly(self, p, gen)) return runLibraryKernelOnHost(op, stack);
  auto* generator =
      at::get_generator_or_default<at::CPUGeneratorImpl>(gen, at::detail::getDefaultCPUGenerator());
  if (!drawable(generator)) return runLibraryKernelOnHost(op, stack);
  // In a window it runs at its place: the recorded launches touching self run first.
  tracer::EagerLibraryStep step;
  char* out = hostAddressOf(self);
  {
    // See ATen's Note [Acquire lock when using random generators].
    std::lock_guard<std::mutex> lock(generator->mutex_);
    at::mt19937 engine = generator->engine();
    at::mt19937_data_pod state = engine.data();
    if (self.scalar_type() == at::kFloat)
      fillBernoulli(reinterpret_cast<float*>(out), self.numel(), p, state);
    else
      fillBernoulli(reinterpret_cast<double*>(out), self.numel(), p, state);
    engine.set_data(state);
    generator->set_engine(engine);
  }
  static SiteLaunchCounter site;
  recordLaunch(site.get(LaunchKind::kLibrary, "aten::bernoulli_.float"));
  // The in-place op returns self, which is already the stack's first argument.
  torch::jit::drop(*stack, kArguments - 1);
}

} // namespace torchneuron

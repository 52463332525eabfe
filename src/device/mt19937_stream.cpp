#include "device/mt19937_stream.h"

#include <algorithm>

namespace torchneuron {
namespace {

constexpr int kN = at::MERSENNE_STATE_N;
constexpr int kM = at::MERSENNE_STATE_M;

// One function per vector width, chosen at load time from the CPU (GCC's function
// multiversioning): the library stays portable and uses AVX-512 where the CPU has it.
#define NEURON_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

inline uint32_t twist(uint32_t u, uint32_t v) {
  return (((u & at::UMASK) | (v & at::LMASK)) >> 1) ^ ((v & 1U) != 0 ? at::MATRIX_A : 0U);
}

// at::mt19937's next_state() as three loops over indices: the first reads only words it has not
// written yet, the second words written 227 iterations earlier, so both vectorize.
NEURON_VECTOR_CLONES void regenerate(uint32_t* s) {
  for (int j = 0; j < kN - kM; ++j)
    s[j] = s[j + kM] ^ twist(s[j], s[j + 1]);
  for (int j = kN - kM; j < kN - 1; ++j)
    s[j] = s[j + kM - kN] ^ twist(s[j], s[j + 1]);
  s[kN - 1] = s[kM - 1] ^ twist(s[kN - 1], s[0]);
}

// at::mt19937's tempering of each word of a run.
NEURON_VECTOR_CLONES void temper(const uint32_t* __restrict state, uint32_t* __restrict out,
                                 int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t y = state[i];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    out[i] = y;
  }
}

} // namespace

bool drawableMt19937State(const at::mt19937_data_pod& engine) {
  // The words left before a regeneration are state_[next_, next_ + left_ - 1); a freshly seeded
  // engine (left_ 1, next_ 0) has none and regenerates at its first draw.
  return engine.seeded_ && engine.left_ >= 1 && engine.left_ <= kN &&
         int64_t{engine.next_} + engine.left_ - 1 <= kN;
}

void drawMt19937Words(at::mt19937_data_pod& engine, uint32_t* out, int64_t count) {
  while (count > 0) {
    // at::mt19937 decrements left_ before each draw and regenerates when it reaches 0.
    int64_t available = engine.left_ - 1;
    if (available == 0) {
      regenerate(engine.state_.data());
      // As after ATen's regeneration (left_ = N, next_ = 0) before that draw's decrement.
      engine.left_ = kN + 1;
      engine.next_ = 0;
      available = kN;
    }
    const int64_t take = std::min(available, count);
    temper(engine.state_.data() + engine.next_, out, take);
    engine.next_ += static_cast<uint32_t>(take);
    engine.left_ -= static_cast<int>(take);
    out += take;
    count -= take;
  }
}

} // namespace torchneuron

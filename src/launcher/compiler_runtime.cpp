#include "launcher/compiler_runtime.h"

#include <cstdint>
#include <cstring>

namespace torchneuron {
namespace {

// __truncsfbf2: float to bfloat16, rounding to nearest even, NaN to the quiet NaN 0x7FC0, as
// c10::BFloat16 rounds. x86 code generation calls it for bf16 values that lack a native
// instruction (a bf16 `select`, for one), on CPUs without AVX512-BF16. The bf16 result travels
// in the low 16 bits of xmm0, as a float's does, so it is returned as a float with those bits.
float truncFloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  uint32_t rounded;
  if (value != value) {
    rounded = 0x7FC0;
  } else {
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
  }
  float result;
  std::memcpy(&result, &rounded, sizeof result);
  return result;
}

} // namespace

std::vector<std::pair<const char*, void*>> compilerRuntimeSymbols() {
  return {{"__truncsfbf2", reinterpret_cast<void*>(&truncFloatToBFloat16)}};
}

} // namespace torchneuron

#pragma once
// Bulk draws from ATen's Mersenne Twister (at::mt19937, the engine of PyTorch's CPU generator):
// the same 32-bit words, in the same order, that calling the engine once per word returns, and
// the engine left in the same state. ATen's random kernels call the engine per element through
// the generator (about 1.7 ns a word here); drawing a run of words is two loops the compiler
// vectorizes (the tempering of the run, and each regeneration of the 624-word state), so a
// device random op can draw what the CPU's draws, bit for bit, several times faster.

#include <ATen/core/MT19937RNGEngine.h>

#include <cstdint>

namespace torchneuron {

// Whether `engine` is in a state drawMt19937Words() continues exactly: seeded, with the words
// left before its next regeneration inside the state. Every state the engine reaches by drawing
// is; torch.set_rng_state also accepts a few that are not (left 624 with next 624), which
// callers leave to ATen's own engine.
bool drawableMt19937State(const at::mt19937_data_pod& engine);

// Draws `count` words into `out`, advancing `engine` exactly as `count` calls of at::mt19937's
// operator() would. Requires drawableMt19937State(engine).
void drawMt19937Words(at::mt19937_data_pod& engine, uint32_t* out, int64_t count);

} // namespace torchneuron

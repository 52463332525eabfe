#pragma once
// A step between LLVM's optimization and code generation (compiler.cpp).

namespace llvm {
class Module;
} // namespace llvm

namespace torchneuron::fusion {

// Keeps every vector select of a value loaded for it alone a plain load followed by a blend.
// Without this, the x86 code generator folds `select(mask, load(p), x)` into a masked load
// (`vmovups (p), zmm{k}`), which on this project's machines (AMD EPYC, Zen 4) streams memory more
// slowly than a plain load: measured with bench/activation_backward.py (out= on 4M and 16M
// elements, 1 thread, against stock's kernels in the same process), ReLU's backward
// (threshold_backward, `select(x <= 0, 0, grad)`) went from 1.13x-1.21x stock's time to 0.92x-0.98x
// and ReLU6's (hardtanh_backward) from 1.42x-1.63x to 1.08x-1.09x, add (no select) staying at 1.0x.
// A `freeze` between the load and the select stops the fold: it is a no-op for a value loaded from
// memory, and the code generator selects it as a register copy. Returns the selects changed.
int keepSelectedLoadsUnmasked(llvm::Module& module);

} // namespace torchneuron::fusion

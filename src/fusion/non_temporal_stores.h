#pragma once
// Non-temporal stores for elementwise kernels whose output is larger than the last-level cache
// (compiler.cpp runs both steps on every kernel it lowers).
//
// A store to a line not in cache first reads the line (a read for ownership), so a kernel that
// writes a large output moves each output byte twice; a non-temporal store writes whole lines
// around the caches without reading them. Measured on this project's machines (AMD EPYC Zen 4,
// 1 thread, 2026-12-07, C++ scratch): a 16M-float add 1.25x faster. It only pays where the output
// leaves the cache before anything reads it, so it is taken at run time for outputs of at least
// kNonTemporalOutputBytes; below that the kernel's loop is the one it always was.
//
// LLVM's loop vectorizer refuses non-temporal stores whose alignment it cannot prove (the x86
// instructions fault on an unaligned address), so the kernel gets the aligned loop written out:
// addNonTemporalStreamingLoops rewrites the MLIR, alignNonTemporalStores finishes in LLVM IR.

#include <cstdint>

namespace llvm {
class Module;
} // namespace llvm

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace torchneuron::fusion {

// 32 MiB: the last-level cache of the machines this was measured on.
constexpr int64_t kNonTemporalOutputBytes = int64_t{32} << 20;

// The bytes a non-temporal vector store writes: one 64-byte cache line, at a 64-byte boundary.
constexpr int64_t kNonTemporalStoreBytes = 64;

// Rewrites the `linalg.generic` of an elementwise kernel (`@kernel` marked kElementwiseKernel)
// that has one loop, one output, unit strides (inputs may also be 0-dim, read once), and whose body
// is arithmetic that maps to vector instructions (arith ops but remainders and integer divisions;
// math's fma, abs, copysign, sqrt and roundings: no library call), into a branch taken when the
// whole output (the memref the kernel's range is a view of) holds at least kNonTemporalOutputBytes
// and its elements are naturally aligned: the generic over the elements before the first 64-byte
// boundary of the output, then a loop of vector loads, the body on vectors and non-temporal
// 64-byte `vector.store`s, then the generic over the rest. The other branch is the original
// generic. Returns how many kernels were rewritten; a kernel that does not qualify is left
// unchanged. The vector loop reads each vector's inputs before storing it, with no check that
// an input overlaps the output elsewhere: an output may be an input itself (an in-place op), but
// never overlap one partially, which the device refuses before any launch as ATen does (and
// fused kernels' operands never alias by contract). A 0-dim input is read once, before the loop.
int addNonTemporalStreamingLoops(mlir::ModuleOp module);

// In the translated module: gives every non-temporal store its own size as alignment (the
// contract of addNonTemporalStreamingLoops: it only emits them at 64-byte boundaries, which the
// translation cannot know) and ends each function that has one with an `sfence` before every
// return (non-temporal stores are weakly ordered: the fence makes them visible before whatever
// tells another thread the kernel is done). On a target other than x86 the stores lose the
// hint. Returns the number of stores.
int alignNonTemporalStores(llvm::Module& module);

} // namespace torchneuron::fusion

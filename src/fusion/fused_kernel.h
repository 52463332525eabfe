#pragma once
// A fused elementwise kernel (DESIGN.md decision 5): a chain or tree of registry ops over one
// iteration space, computed element by element in one loop nest. Values flow from member to
// member in registers; only the outputs that escape are stored, so intermediates cost no memory
// traffic. Like an eager kernel it is shape-polymorphic: its key holds the members' signatures
// and the dataflow between them, never sizes, strides, scalar values or addresses.
//
// ABI (launcher/kernel_abi.h): the stored outputs' memrefs in member order, then the external
// inputs' memrefs (those not read through a stored output), then every member's run-time
// scalars in member order (f64 for float compute, i64 otherwise), then begin and end.

#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <string>
#include <vector>

#include "fusion/kernel_signature.h"
#include "support/hash.h"

namespace torchneuron::fusion {

// Where a member's input value comes from.
struct FusedSource {
  // kReductionOutput: an output of the reduction a prologue feeds, read by its epilogue
  // (FusedReductionConsumer::epilogue); kKeptMember: a member of the epilogue over the kept
  // dimensions, and kPrologueMember: a stored member of the prologue, both read by the epilogue
  // over the rows after them (row_epilogue).
  enum Kind : uint8_t {
    kExternal,
    kMember,
    kReductionOutput,
    kKeptMember,
    kPrologueMember
  } kind = kExternal;
  int index = 0; // into the externals, an earlier member, or the reduction's outputs
};

// One op of the fused kernel, as its eager signature: its rank is the fused kernel's, its inner
// stride classes are those of its own operands, and its aliased input (an in-place op's self)
// is one of `sources` like any other input.
struct FusedMember {
  ElementwiseSignature signature;
  c10::SmallVector<FusedSource, 4> sources; // one per signature input
  bool stored = false;                      // its output escapes: the kernel writes it
};

// A memref the kernel reads that no member of it wrote before (a window input, or an output
// of a step before the fused kernel).
struct FusedExternal {
  c10::ScalarType dtype = c10::kFloat;
  InnerStride inner = InnerStride::kContiguous;
  // The member whose stored output is this same memory with the same geometry (an in-place
  // update of a window input), or -1. The kernel reads it through that output, so it reads the
  // element before any member overwrites it and takes no memref of its own.
  int read_through_member = -1;
};

// A reduction or row-wise op the members feed (prologue fusion): the fused kernel is that op's
// kernel, computing each input a member produces from the member chain at the element it
// loads, instead of reading it from memory. The members' externals are then memrefs of the
// reduction's rank (its kept + reduced dimensions, fusion/common_dims.h), classed by their
// innermost stride there like the reduction's inputs, and the stored members' outputs memrefs of
// that rank too (classed by the member's `inner[0]`), written in the first pass over the row
// (or its write pass, for an op without passes).
//
// The epilogue: elementwise ops after the reduction that consume its outputs, computed where the
// kernel stores them, so an output the program only reads through them is read from a register.
// Either over every element (`epilogue_over_rows`: a row-wise op's element outputs, in its last
// pass) or over the kept dimensions (per-row results, where the row's outputs are stored). Its
// members' sources are reduction outputs of that space, earlier epilogue members or
// `epilogue_externals`; their memrefs and the externals' have that space's rank, classed by their
// innermost stride there (the members' by `inner[0]`). The reduction's outputs are stored too.
// A consumer may have no prologue members (a reduction that only takes an epilogue).
//
// A reduction's (not a row-wise op's) epilogue over the kept dimensions may be followed by one
// over every element (`row_epilogue`, in a write pass over each row after the row's results):
// ops that read those results broadcast over the row, `x * torch.rsqrt(ms + eps) * w` after a
// mean of squares. Its sources: reduction outputs and kept epilogue members (kKeptMember), both
// broadcast over the reduced dimensions, earlier row members, stored prologue members at the
// same element (kPrologueMember, read back from their memref: a softmax written by hand divides
// the exps its sum's prologue stored), and `row_externals` (memrefs of the full rank, classed
// like the epilogue's).
struct FusedReductionConsumer {
  ReductionSignature reduction; // not in column order
  // Per reduction input: the member whose value it is, or -1 (read from its own memref).
  c10::SmallVector<int, 6> input_members;
  std::vector<FusedMember> epilogue;
  std::vector<FusedExternal> epilogue_externals; // never read through a member
  bool epilogue_over_rows = false;
  std::vector<FusedMember> row_epilogue;
  std::vector<FusedExternal> row_externals;
  // Bit o set: the reduction's output o is dead (nothing outside the window holds it and no
  // later step reads it; only the epilogues do, from registers). It takes no memref and no
  // store. A softmax whose output is dead keeps the exps between its passes in the memory of
  // a stored epilogue result over the rows (of its compute type), else computes them again.
  uint32_t dead_outputs = 0;

  bool outputStored(size_t o) const { return (dead_outputs >> o & 1u) == 0; }
};

struct FusedElementwiseSignature {
  int rank = 1;
  std::vector<FusedMember> members;
  std::vector<FusedExternal> externals;
  // Set for a prologue fusion; then `rank` is unused (the reduction's ranks apply) and no
  // external is read through a member.
  std::shared_ptr<const FusedReductionConsumer> consumer;

  // Kernel-cache key: stable across processes; covers every field.
  Hash64 key() const;
  // "fused[mul,add,tanh,...] rank 1, 2 inputs, 1 output", for warnings and explain().
  std::string describe() const;
  // Argument slots before begin and end (each rank-r memref takes 3 + 2r).
  int argumentSlots() const;
};

// The kernel's MLIR module (one `func.func @kernel`, one linalg.generic; a prologue fusion's is
// its reduction's loop nests, fusion/reduction_kernel_builder.cpp, with the ABI of
// buildFusedReductionKernel below). Throws
// std::logic_error starting with "[fusion]" when the signature is malformed (a source that
// names a later member, a read-through external whose member is not stored, no stored output).
std::string buildFusedElementwiseKernel(const FusedElementwiseSignature& signature);

// A prologue fusion's kernel. ABI: the reduction's stored outputs, the members' stored outputs (in
// member order), the reduction's inputs read from memory, the members' externals, the
// epilogue's stored outputs (in member order), the epilogue's externals, the row epilogue's
// stored outputs and externals, the reduction's params, every member's params (in member order),
// every epilogue member's params, every row epilogue member's params, the reduced element count,
// then begin and end.
std::string buildFusedReductionKernel(const FusedElementwiseSignature& signature);

} // namespace torchneuron::fusion

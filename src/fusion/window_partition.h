#pragma once
// The partitioner (DESIGN.md decision 5): splits the recorded launches of an op window into
// fused elementwise kernels and the steps that stay as they are (reductions, library steps,
// lone elementwise launches), and finds the intermediates that need no store.
//
// It works on one batch of recorded launches, as the window is about to run them, from their
// argument slots: the memrefs a launch reads and writes are exact (addresses, sizes, strides),
// so dataflow between launches is decided from memory, not from names. Consecutive elementwise
// launches over the same iteration space join one group while every memory they share is used
// with the same geometry (a value then flows through a register at the same element); a
// launch that would read or write memory of the group with another geometry (a transposed
// view, a shifted slice) starts a new group. A member's output is stored only when it escapes:
// its storage is referenced outside the window (a Python tensor, autograd), or a launch after
// the group touches that storage, and no later member overwrites the same memory.
//
// A reduction or row-wise launch right after a group that computes one of its inputs takes the
// group as its prologue (fused_kernel.h, FusedReductionConsumer): the group's values are then
// computed where the reduction loads them, and its intermediates are never written. This needs
// both sides to enumerate one linear index (fusion/common_dims.h: the group's dimensions and the
// reduction's have a common refinement, over which every memref gets its strides, and the
// kernel is the reduction's over those dimensions), each input a member computes to be that
// member's output element for element, no member output to overlap a member's input or the
// reduction's other operands, and no reduction output the group's memory. Anything else runs
// as two kernels, as before.
//
// The elementwise launches right after a reduction that consume its outputs become its
// epilogue (FusedReductionConsumer::epilogue), computed where the kernel stores each output:
// over every element for a row-wise op's element outputs, over the kept dimensions for a
// reduction's per-row results. A reduction with no prologue takes one too. Each member must read
// an output of the reduction or an earlier member element for element over those dimensions
// (the kernel's dimensions are refined for a member iterating finer ones, a scale broadcast over
// a layer norm's tokens); it may not read what the prologue computes, nor write memory the
// kernel reads or writes, not even element for element (an in-place update): the kernel's
// memrefs are declared free of aliases. The members' outputs are stored like a group's, when
// they escape; so are the reduction's, once an epilogue member stores its own: an output only
// the epilogues read (a softmax's, scaled at once) is dead and never written. After a reduction's
// epilogue over the kept dimensions, launches over every element that read its per-row values
// broadcast over the row (each row's value at each of its elements: `x * torch.rsqrt(ms + eps)`)
// join a row epilogue, run in a pass over the row after them, under the same rules but one: a row
// member may read what a prologue member computes at the same element, which that member then
// stores in the row's first pass (a softmax written by hand divides the exps its sum stored). A run
// of elementwise launches that feeds the next reduction is left to be that reduction's prologue
// instead, which stores nothing where the epilogue would store the run's results (a residual
// stream's add between two layer norms).
//
// An elementwise launch between a reduction and the epilogue member after it, that joins no
// epilogue, touches no memory of the kernel and iterates at most a quarter of the epilogue's
// elements (adaLN's `1 + scale` over [batch, 1, dim] before `layer_norm(x) * (1 + scale)`), is a
// hole of the group: it runs as recorded before the kernel, which runs at the group's last
// launch, and the member reads its result from memory. At most two holes in a row; held holes
// that no member follows are partitioned again after the group.

#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <vector>

#include "fusion/fused_kernel.h"
#include "fusion/kernel_signature.h"

namespace torchneuron::fusion {

// What the partitioner needs of one recorded launch.
struct PartitionLaunch {
  // Fusible: an elementwise kernel launch with this signature and `slots` (kernel_abi.h: output
  // memref, the inputs but the aliased one, the op's params). Null for any other step.
  const ElementwiseSignature* elementwise = nullptr;
  const int64_t* slots = nullptr;
  // Identity of the storage the output lives in, and whether anything outside the window holds
  // that storage (fusible launches only).
  const void* output_storage = nullptr;
  bool output_escapes = true;
  // Every storage the step reads or writes (any step).
  c10::ArrayRef<const void*> storages;
  // A reduction or row-wise kernel launch, which the elementwise group just before it may feed
  // (prologue fusion), with `slots` (its outputs, inputs, params and reduced count).
  const ReductionSignature* reduction = nullptr;
  // A reduction launch's outputs, as output_storage and output_escapes are an elementwise
  // launch's: per output its storage (null: unknown), and bit o set when output o escapes.
  c10::SmallVector<const void*, 3> output_storages;
  uint32_t escaping_outputs = ~0u;
};

// `count` argument slots of launch `launch`, from its slot `begin`; or, with `group_words`,
// `count` of the group's own words from `begin` (FusedGroup::words).
struct SlotRange {
  uint32_t launch = 0;
  uint32_t begin = 0;
  uint32_t count = 0;
  bool group_words = false;
};

// Launches [first, first + count) computed by one fused kernel (count >= 2), or, when no member
// stores its output, by nothing at all (every result is dead). With a consumer (the signature's
// prologue fusion), its prologue's launches come first, then the reduction, then its epilogues'.
// The kernel runs in place of the group's last launch; `holes` are launches in the range that
// are no members: they run as recorded, before it.
struct FusedGroup {
  size_t first = 0;
  size_t count = 0;
  c10::SmallVector<size_t, 2> holes;
  size_t shape_launch = 0; // the launch whose LaunchShape (parallel range) the kernel takes
  int64_t range = 0;       // its outer range instead, when not 0 (a prologue fusion's)
  FusedElementwiseSignature signature; // empty members when nothing is stored
  // Where the fused kernel's arguments come from, in order: ranges of the members' own slots.
  // Positions, not values, so a partition can serve every batch of the same structure
  // (tracer/window_fusion.h remembers them).
  c10::SmallVector<SlotRange, 16> slot_ranges;
  // Words some slot ranges take (a prologue fusion's sizes and strides over its dimensions).
  c10::SmallVector<int64_t, 16> words;

  // The fused kernel's arguments for `launches` (the batch partitioned, or one like it).
  template <typename SlotsOf>
  void gatherSlots(const SlotsOf& slots_of, c10::SmallVectorImpl<int64_t>& out) const {
    for (const SlotRange& range : slot_ranges) {
      if (range.group_words) {
        out.append(words.begin() + range.begin, words.begin() + range.begin + range.count);
        continue;
      }
      const int64_t* slots = slots_of(range.launch);
      out.append(slots + range.begin, slots + range.begin + range.count);
    }
  }
};

// A lone elementwise launch whose output is dead: skipped.
struct PartitionResult {
  std::vector<FusedGroup> groups;    // in launch order
  std::vector<size_t> dead_launches; // lone launches whose result nobody reads
};

PartitionResult partitionWindow(c10::ArrayRef<PartitionLaunch> launches);

} // namespace torchneuron::fusion

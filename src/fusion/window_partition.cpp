#include "fusion/window_partition.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

#include <c10/util/accumulate.h>

#include "fusion/common_dims.h"
#include "fusion/kernel_text.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

// One memref argument of a launch: its descriptor in the launch's slots (allocated and aligned
// pointer, offset, sizes, strides) and the bytes it spans.
struct Memref {
  const int64_t* descriptor = nullptr;
  uint32_t launch = 0; // whose slots hold the descriptor
  int rank = 0;
  c10::ScalarType dtype = c10::kFloat;
  uintptr_t begin = 0, end = 0; // [begin, end); empty when a size is 0
  // The iteration sizes of its elementwise launch (its output's), which the memref's dimensions
  // follow but for an operand broadcast along the innermost one (no memref dimension there).
  c10::ArrayRef<int64_t> space;

  int64_t slots() const { return 3 + 2 * rank; }
  const int64_t* sizes() const { return descriptor + 3; }
  const int64_t* strides() const { return descriptor + 3 + rank; }
  bool overlaps(const Memref& other) const { return begin < other.end && other.begin < end; }
  // The same elements in the same order: a value written through one is read at the same
  // iteration through the other.
  bool identical(const Memref& other) const {
    return dtype == other.dtype && rank == other.rank && descriptor[1] == other.descriptor[1] &&
           descriptor[2] == other.descriptor[2] &&
           std::memcmp(sizes(), other.sizes(), 2 * rank * sizeof(int64_t)) == 0;
  }
  // Its strides over `dims`, a refinement of its launch's iteration (common_dims.h).
  DimList stridesOver(c10::ArrayRef<int64_t> dims) const {
    DimList strides(this->strides(), this->strides() + rank);
    if (rank < static_cast<int>(space.size())) strides.push_back(0); // broadcast innermost
    return fusion::stridesOver(space, strides, dims);
  }
  // identical() over `dims` (a refinement of both memrefs' launch iterations): the same
  // element at every index of them.
  bool identicalOver(const Memref& other, c10::ArrayRef<int64_t> dims) const {
    if (dtype != other.dtype || begin != other.begin || begin == end || other.begin == other.end)
      return false;
    return stridesOver(dims) == other.stridesOver(dims);
  }
};

Memref memrefAt(const int64_t* descriptor, uint32_t launch, int rank, c10::ScalarType dtype) {
  Memref m;
  m.descriptor = descriptor;
  m.launch = launch;
  m.rank = rank;
  m.dtype = dtype;
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t last = 0;
  for (int d = 0; d < rank; ++d) {
    if (m.sizes()[d] == 0) return m;
    last += (m.sizes()[d] - 1) * std::abs(m.strides()[d]);
  }
  m.begin = static_cast<uintptr_t>(descriptor[1]) + descriptor[2] * item;
  m.end = m.begin + (last + 1) * item;
  return m;
}

// A fusible launch, parsed: its output memref, one memref per signature input (the aliased
// input is the output's), and where its params start in its slots.
struct ParsedLaunch {
  Memref output;
  c10::SmallVector<Memref, 4> inputs;
  SlotRange params;
};

ParsedLaunch parse(const PartitionLaunch& launch, uint32_t index) {
  const ElementwiseSignature& s = *launch.elementwise;
  ParsedLaunch parsed;
  const int64_t* cursor = launch.slots;
  parsed.output = memrefAt(cursor, index, operandRank(s.rank, s.inner[0]), s.output);
  parsed.output.space = c10::ArrayRef<int64_t>(parsed.output.sizes(), parsed.output.rank);
  cursor += parsed.output.slots();
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    if (static_cast<int>(i) == s.aliased_input) {
      parsed.inputs.push_back(parsed.output);
      continue;
    }
    parsed.inputs.push_back(
        memrefAt(cursor, index, operandRank(s.rank, s.inner[i + 1]), s.inputs[i]));
    parsed.inputs.back().space = parsed.output.space;
    cursor += parsed.inputs.back().slots();
  }
  parsed.params = {index, static_cast<uint32_t>(cursor - launch.slots),
                   static_cast<uint32_t>(s.op->params.size())};
  return parsed;
}

// A reduction launch, parsed: its outputs' and inputs' memrefs, and where its params start.
struct ParsedReduction {
  c10::SmallVector<Memref, 3> outputs;
  c10::SmallVector<Memref, 6> inputs;
  uint32_t params_begin = 0;
};

ParsedReduction parseReduction(const PartitionLaunch& launch, uint32_t index) {
  const ReductionSignature& r = *launch.reduction;
  const int full = r.kept_rank + r.reduced_rank;
  ParsedReduction parsed;
  const int64_t* cursor = launch.slots;
  for (size_t o = 0; o < r.outputs.size(); ++o) {
    parsed.outputs.push_back(memrefAt(cursor, index, r.outputRank(o), r.outputs[o]));
    cursor += parsed.outputs.back().slots();
  }
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    parsed.inputs.push_back(memrefAt(cursor, index, full, r.inputs[i]));
    cursor += parsed.inputs.back().slots();
  }
  parsed.params_begin = static_cast<uint32_t>(cursor - launch.slots);
  return parsed;
}

// Whether `b` holds `a`'s elements at every index of `dims`, `a_strides` being a's strides
// there (a value written through one is read at the same iteration through the other).
bool sameElementsOver(const Memref& a, const DimList& a_strides, const Memref& b,
                      c10::ArrayRef<int64_t> dims) {
  return a.dtype == b.dtype && a.begin == b.begin && a.begin != a.end &&
         a_strides == b.stridesOver(dims);
}

// An epilogue's memrefs read from memory, with their strides over its dimensions: those its
// earlier members read and those the member being added would add.
struct EpilogueExternals {
  std::vector<Memref>& known;
  std::vector<DimList>& known_strides;
  std::vector<Memref> added;
  std::vector<DimList> added_strides;

  // `input`'s index among them over `dims`, added when new.
  int indexOf(const Memref& input, c10::ArrayRef<int64_t> dims) {
    for (size_t e = 0; e < known.size(); ++e)
      if (sameElementsOver(known[e], known_strides[e], input, dims)) return static_cast<int>(e);
    for (size_t e = 0; e < added.size(); ++e)
      if (sameElementsOver(added[e], added_strides[e], input, dims))
        return static_cast<int>(known.size() + e);
    added.push_back(input);
    added_strides.push_back(input.stridesOver(dims));
    return static_cast<int>(known.size() + added.size() - 1);
  }

  // Keeps the added ones, and their signature entries in `signature`.
  void commit(std::vector<FusedExternal>& signature) {
    for (size_t e = 0; e < added.size(); ++e) {
      FusedExternal external;
      external.dtype = added[e].dtype;
      external.inner = innerStrideClass(added_strides[e].back(), true);
      signature.push_back(external);
      known.push_back(added[e]);
      known_strides.push_back(added_strides[e]);
    }
  }
};

// The group being built.
class GroupBuilder {
public:
  explicit GroupBuilder(c10::ArrayRef<PartitionLaunch> batch) : batch_(batch) {}

  bool empty() const { return launches_.empty(); }
  bool hasConsumer() const { return consumer_ != nullptr; }
  bool hasEpilogue() const { return consumer_ != nullptr && !consumer_->epilogue.empty(); }

  // Whether `parsed` may be a hole of the consumer's group (window_partition.h): it touches no
  // memory the kernel reads or writes, so it may run before the kernel, and iterates at most a
  // quarter of the epilogue's elements, so that storing its result costs less than the
  // elementwise group it would otherwise join after the kernel saves.
  bool mayBeHole(const ParsedLaunch& parsed) const {
    const int64_t elements = c10::multiply_integers(parsed.output.space);
    if (elements * 4 > c10::multiply_integers(epilogueDims())) return false;
    if (overlapsKernelMemory(parsed.output, {})) return false;
    for (const Memref& input : parsed.inputs)
      if (overlapsKernelMemory(input, {})) return false;
    return true;
  }

  // Puts the held holes before the member about to be added; takeHoles() takes them out again.
  void addHoles(c10::ArrayRef<size_t> holes) {
    launches_.insert(launches_.end(), holes.begin(), holes.end());
    holes_.append(holes.begin(), holes.end());
  }
  void takeHoles(size_t count) {
    launches_.resize(launches_.size() - count);
    holes_.resize(holes_.size() - count);
  }

  // Adds launch `index`; false, changing nothing, when it cannot join the group. A launch over
  // other iteration dimensions with the same elements (a broadcast bias add, which coalesces to
  // two dimensions, beside a contiguous chain's one) joins over their common refinement: the
  // group is then mixed, and every memref is compared and passed over those dimensions.
  bool tryAdd(size_t index, const PartitionLaunch& launch, const ParsedLaunch& parsed) {
    if (members_.size() >= kMaxMembers) return false;
    const DimList space = space_;
    const bool mixed = mixed_;
    if (members_.empty()) {
      space_.assign(parsed.output.space.begin(), parsed.output.space.end());
    } else if (parsed.output.space != c10::ArrayRef<int64_t>(space_)) {
      const c10::optional<DimList> common = commonDims({space_, parsed.output.space});
      if (!common || c10::multiply_integers(space_) != c10::multiply_integers(parsed.output.space))
        return false;
      space_ = *common;
      mixed_ = true;
    }
    if (tryAddIn(index, launch, parsed)) return true;
    space_ = space;
    mixed_ = mixed;
    return false;
  }

  // tryAdd over the group's dimensions as they would be with the launch.
  bool tryAddIn(size_t index, const PartitionLaunch& launch, const ParsedLaunch& parsed) {
    const ElementwiseSignature& s = *launch.elementwise;
    FusedMember member;
    member.signature = s;
    std::vector<Memref> new_externals;
    std::vector<InnerStride> new_inner;
    for (size_t i = 0; i < parsed.inputs.size(); ++i) {
      const Memref& input = parsed.inputs[i];
      const int writer = latestWriter(input);
      if (writer == kConflict) return false;
      if (writer >= 0) {
        member.sources.push_back({FusedSource::kMember, writer});
        continue;
      }
      int found = -1;
      for (size_t e = 0; e < externals_.size() && found < 0; ++e)
        if (same(externals_[e], input)) found = static_cast<int>(e);
      for (size_t e = 0; e < new_externals.size() && found < 0; ++e)
        if (same(new_externals[e], input)) found = static_cast<int>(externals_.size() + e);
      if (found < 0) {
        found = static_cast<int>(externals_.size() + new_externals.size());
        new_externals.push_back(input);
        // The stride class this member's kernel was compiled with for it.
        new_inner.push_back(static_cast<int>(i) == s.aliased_input ? s.inner[0] : s.inner[i + 1]);
      }
      member.sources.push_back({FusedSource::kExternal, found});
    }
    // Its write: memory the group read or wrote with another geometry would be read or written
    // at another iteration than the loop reaches it.
    for (const Memref& external : externals_)
      if (external.overlaps(parsed.output) && !same(external, parsed.output)) return false;
    for (const Memref& external : new_externals)
      if (external.overlaps(parsed.output) && !same(external, parsed.output)) return false;
    if (latestWriter(parsed.output) == kConflict) return false;

    if (members_.empty()) rank_ = s.rank;
    externals_.insert(externals_.end(), new_externals.begin(), new_externals.end());
    external_inner_.insert(external_inner_.end(), new_inner.begin(), new_inner.end());
    members_.push_back(std::move(member));
    parsed_.push_back(parsed);
    launches_.push_back(index);
    return true;
  }

  // Makes reduction launch `index` (right after the group) the group's consumer; false,
  // changing nothing, when the group cannot be its prologue (window_partition.h). On an empty
  // builder the reduction starts a group of its own, which only an epilogue can join.
  bool tryAttachReduction(size_t index, const PartitionLaunch& launch) {
    const bool standalone = launches_.empty();
    if (consumer_ || (!standalone && members_.empty()) || !attach(index, launch, standalone, {}))
      return false;
    launches_.push_back(index);
    return true;
  }

  // Makes reduction launch `index` the consumer, over the common dimensions of the group (none
  // when `standalone`), the reduction and `extra` (spaces of the reduction's element count:
  // its epilogue's); false, changing nothing, when there are none or the group cannot feed it.
  bool attach(size_t index, const PartitionLaunch& launch, bool standalone,
              c10::ArrayRef<DimList> extra) {
    const ReductionSignature& r = *launch.reduction;
    if (r.column_order || r.inputs.empty()) return false;
    // An index through input 0's strides needs input 0 in memory (ReductionOp); a window's
    // elements are a view no member's iteration matches.
    if (r.op->index_is_input_offset || r.op->static_window) return false;
    ParsedReduction parsed = parseReduction(launch, static_cast<uint32_t>(index));
    // The two spaces: the group's iteration and the reduction's kept + reduced dimensions.
    const c10::ArrayRef<int64_t> reduction_sizes(parsed.inputs[0].sizes(), parsed.inputs[0].rank);
    const c10::ArrayRef<int64_t> group_sizes =
        standalone ? reduction_sizes : c10::ArrayRef<int64_t>(space_);
    const c10::ArrayRef<int64_t> kept_sizes = reduction_sizes.slice(0, r.kept_rank);
    const c10::ArrayRef<int64_t> reduced_sizes = reduction_sizes.slice(r.kept_rank);
    if (c10::multiply_integers(reduced_sizes) < 2) return false; // nothing to reduce
    std::vector<c10::ArrayRef<int64_t>> spaces = {group_sizes, reduction_sizes, reduced_sizes};
    for (const DimList& space : extra) {
      if (c10::multiply_integers(space) != c10::multiply_integers(reduction_sizes)) return false;
      spaces.emplace_back(space);
    }
    const c10::optional<DimList> dims = commonDims(spaces);
    if (!dims || c10::multiply_integers(group_sizes) != c10::multiply_integers(reduction_sizes))
      return false;
    ConsumerGeometry geometry;
    // A full reduction (`(a - b).pow(2).mean()`) keeps one row: its kernel still has a kept
    // dimension, of size 1, which common dimensions (none of size 1) lack.
    if (c10::multiply_integers(kept_sizes) == 1) geometry.dims.push_back(1);
    geometry.dims.append(dims->begin(), dims->end());
    // The reduced elements' boundary is one of the common ones: the dimensions inside it are
    // the reduced ones.
    int reduced_dims = 0;
    for (int64_t inner = 1; inner < c10::multiply_integers(reduced_sizes); ++reduced_dims)
      inner *= geometry.dims[geometry.dims.size() - 1 - reduced_dims];
    geometry.kept_rank = static_cast<int>(geometry.dims.size()) - reduced_dims;
    const c10::ArrayRef<int64_t> common(geometry.dims);
    const c10::ArrayRef<int64_t> common_kept = common.slice(0, geometry.kept_rank);

    // Every memref over the common dimensions: the group's from its launch's iteration, the
    // reduction's from its own (a per-row output over the kept dimensions only).
    auto groupStrides = [&](const Memref& memref) { return memref.stridesOver(common); };
    auto reductionStrides = [&](const Memref& memref) {
      const c10::ArrayRef<int64_t> strides(memref.strides(), memref.rank);
      if (memref.rank == r.kept_rank) return stridesOver(kept_sizes, strides, common_kept);
      return stridesOver(reduction_sizes, strides, common);
    };

    // Which member computes each input: the same element at every common index.
    auto consumer = std::make_shared<FusedReductionConsumer>();
    for (size_t i = 0; i < parsed.inputs.size(); ++i) {
      const Memref& input = parsed.inputs[i];
      int writer = -1;
      for (size_t m = parsed_.size(); m-- > 0 && writer < 0;)
        if (parsed_[m].output.overlaps(input)) writer = static_cast<int>(m);
      if (writer >= 0) {
        const Memref& output = parsed_[writer].output;
        if (output.dtype != input.dtype || output.begin != input.begin ||
            groupStrides(output) != reductionStrides(input))
          return false;
      }
      consumer->input_members.push_back(writer);
    }
    if (!standalone && std::all_of(consumer->input_members.begin(), consumer->input_members.end(),
                                   [](int member) { return member < 0; }))
      return false; // the group does not feed it
    // Written memory: no member output under a member input or another reduction operand, no
    // reduction output over anything the group reads or writes.
    for (const ParsedLaunch& member : parsed_) {
      for (const Memref& external : externals_)
        if (member.output.overlaps(external)) return false;
      for (size_t i = 0; i < parsed.inputs.size(); ++i)
        if (consumer->input_members[i] < 0 && member.output.overlaps(parsed.inputs[i]))
          return false;
      for (const Memref& output : parsed.outputs)
        if (output.overlaps(member.output)) return false;
    }
    for (const Memref& output : parsed.outputs)
      for (const Memref& external : externals_)
        if (output.overlaps(external)) return false;
    // Nor over its own inputs or other outputs: the fused kernel declares its memrefs free of
    // aliases (an eager reduction writing over what it reads keeps its own kernel).
    for (size_t o = 0; o < parsed.outputs.size(); ++o) {
      for (size_t i = 0; i < parsed.inputs.size(); ++i)
        if (consumer->input_members[i] < 0 && parsed.outputs[o].overlaps(parsed.inputs[i]))
          return false;
      for (size_t other = o + 1; other < parsed.outputs.size(); ++other)
        if (parsed.outputs[o].overlaps(parsed.outputs[other])) return false;
    }

    // The kernel's memrefs over the common dimensions, in its ABI order (fused_kernel.h).
    for (const Memref& output : parsed.outputs)
      geometry.memrefs.push_back({output, reductionStrides(output)});
    for (const ParsedLaunch& member : parsed_)
      geometry.members.push_back(groupStrides(member.output));
    for (size_t i = 0; i < parsed.inputs.size(); ++i)
      if (consumer->input_members[i] < 0)
        geometry.memrefs.push_back({parsed.inputs[i], reductionStrides(parsed.inputs[i])});
    for (const Memref& external : externals_)
      geometry.externals.push_back({external, groupStrides(external)});

    // The reduction over the common dimensions: its ranks and stride classes change, not what
    // it computes.
    ReductionSignature& refined = consumer->reduction;
    refined = r;
    refined.kept_rank = geometry.kept_rank;
    refined.reduced_rank = static_cast<int>(common.size()) - geometry.kept_rank;
    refined.inner.clear();
    for (size_t o = 0; o < parsed.outputs.size(); ++o)
      refined.inner.push_back(innerStrideClass(geometry.memrefs[o].strides.back(), false));
    for (size_t i = 0, direct = parsed.outputs.size(); i < parsed.inputs.size(); ++i) {
      const bool computed = consumer->input_members[i] >= 0;
      // A computed input has no memref: its class is never read, contiguous by convention.
      refined.inner.push_back(
          computed ? InnerStride::kContiguous
                   : innerStrideClass(geometry.memrefs[direct++].strides.back(), true));
    }
    for (size_t e = 0; e < externals_.size(); ++e)
      external_inner_[e] = innerStrideClass(geometry.externals[e].strides.back(), true);
    consumer_ = std::move(consumer);
    consumer_geometry_ = std::move(geometry);
    consumer_params_ = {static_cast<uint32_t>(index), parsed.params_begin,
                        static_cast<uint32_t>(r.op->num_params)};
    consumer_index_ = index;
    return true;
  }

  // Adds elementwise launch `index` (right after the consumer or an epilogue member) to the
  // consumer's epilogue; false, changing nothing, when it cannot join (window_partition.h).
  bool tryAddEpilogue(size_t index, const PartitionLaunch& launch, const ParsedLaunch& parsed) {
    const FusedReductionConsumer& consumer = *consumer_;
    if (consumer.epilogue.size() + consumer.row_epilogue.size() >= kMaxMembers) return false;
    // Its level: a row-wise op's epilogue is over every element; a reduction's over the kept
    // dimensions (per-row results), then over every element (the row epilogue, which reads
    // them broadcast over the row; no kept member after it).
    const bool over_rows = consumer.reduction.op->row_output;
    const int64_t count = c10::multiply_integers(parsed.output.space);
    const int64_t all = c10::multiply_integers(consumer_geometry_.dims);
    bool row_level = false;
    if (!over_rows && count == all && all != c10::multiply_integers(epilogueDims()))
      row_level = true;
    else if (count != c10::multiply_integers(epilogueDims()) || !row_parsed_.empty())
      return false;
    auto tryIn = [&] {
      return row_level ? tryAddRowEpilogueIn(index, launch, parsed)
                       : tryAddEpilogueIn(index, launch, parsed, over_rows);
    };
    // The member's iteration must be refined by the kernel's dimensions (they are its loops);
    // when it is not (a scale broadcast over a layer norm's tokens), the kernel's dimensions are
    // refined for it, every memref's strides recomputed.
    DimList without_ones;
    for (int64_t size :
         row_level ? c10::ArrayRef<int64_t>(consumer_geometry_.dims) : epilogueDims())
      if (size != 1) without_ones.push_back(size);
    const c10::optional<DimList> refined = commonDims({without_ones, parsed.output.space});
    if (refined && *refined == without_ones) return tryIn();
    const auto saved_consumer = consumer_;
    const ConsumerGeometry saved_geometry = consumer_geometry_;
    const std::vector<InnerStride> saved_inner = external_inner_;
    const DimList saved_dims = epilogue_dims_;
    const std::vector<DimList> saved_strides = epilogue_strides_,
                               saved_external_strides = epilogue_external_strides_,
                               saved_row_strides = row_strides_,
                               saved_row_external_strides = row_external_strides_;
    std::vector<DimList> extra;
    for (const ParsedLaunch& member : epilogue_parsed_)
      extra.push_back(fullSpace(member.output.space, over_rows));
    for (const ParsedLaunch& member : row_parsed_)
      extra.push_back(fullSpace(member.output.space, true));
    extra.push_back(fullSpace(parsed.output.space, over_rows || row_level));
    if (!attach(consumer_index_, batch_[consumer_index_], members_.empty(), extra)) return false;
    consumer_->epilogue = saved_consumer->epilogue;
    consumer_->epilogue_externals = saved_consumer->epilogue_externals;
    consumer_->epilogue_over_rows = saved_consumer->epilogue_over_rows;
    consumer_->row_epilogue = saved_consumer->row_epilogue;
    consumer_->row_externals = saved_consumer->row_externals;
    const c10::ArrayRef<int64_t> over(epilogueDims()), all_dims(consumer_geometry_.dims);
    epilogue_dims_.assign(over.begin(), over.end());
    restride(epilogue_parsed_, over, epilogue_strides_, consumer_->epilogue);
    restride(epilogue_externals_, over, epilogue_external_strides_, consumer_->epilogue_externals);
    restride(row_parsed_, all_dims, row_strides_, consumer_->row_epilogue);
    restride(row_externals_, all_dims, row_external_strides_, consumer_->row_externals);
    if (tryIn()) return true;
    consumer_ = saved_consumer;
    consumer_geometry_ = saved_geometry;
    external_inner_ = saved_inner;
    epilogue_dims_ = saved_dims;
    epilogue_strides_ = saved_strides;
    epilogue_external_strides_ = saved_external_strides;
    row_strides_ = saved_row_strides;
    row_external_strides_ = saved_row_external_strides;
    return false;
  }

  // Members' output strides over refined dimensions `dims`, and their stride classes.
  static void restride(const std::vector<ParsedLaunch>& parsed, c10::ArrayRef<int64_t> dims,
                       std::vector<DimList>& strides, std::vector<FusedMember>& members) {
    for (size_t m = 0; m < parsed.size(); ++m) {
      strides[m] = parsed[m].output.stridesOver(dims);
      members[m].signature.inner[0] = innerStrideClass(strides[m].back(), false);
    }
  }
  // Externals' strides over refined dimensions `dims`, and their stride classes.
  static void restride(const std::vector<Memref>& memrefs, c10::ArrayRef<int64_t> dims,
                       std::vector<DimList>& strides, std::vector<FusedExternal>& externals) {
    for (size_t e = 0; e < memrefs.size(); ++e) {
      strides[e] = memrefs[e].stridesOver(dims);
      externals[e].inner = innerStrideClass(strides[e].back(), true);
    }
  }

  // Adds a launch over every element to a reduction's row epilogue, over the consumer's
  // dimensions as they are; false, changing nothing, when it cannot join.
  bool tryAddRowEpilogueIn(size_t index, const PartitionLaunch& launch,
                           const ParsedLaunch& parsed) {
    FusedReductionConsumer& consumer = *consumer_;
    const ReductionSignature& r = consumer.reduction;
    const ConsumerGeometry& g = consumer_geometry_;
    const c10::ArrayRef<int64_t> all(g.dims);
    // A per-row value read at every element of its row: its kept strides, then zeros.
    auto broadcastOver = [&](const Memref& value, const DimList& kept_strides,
                             const Memref& input) {
      DimList expected(kept_strides.begin(), kept_strides.end());
      expected.resize(all.size(), 0);
      return value.dtype == input.dtype && value.begin == input.begin && value.begin != value.end &&
             input.stridesOver(all) == expected;
    };
    auto sameElements = [&](const Memref& a, const DimList& a_strides, const Memref& b) {
      return sameElementsOver(a, a_strides, b, all);
    };
    FusedMember member;
    member.signature = *launch.elementwise;
    bool consumes = false;
    EpilogueExternals externals{row_externals_, row_external_strides_, {}, {}};
    std::vector<int> read_prologue;
    for (const Memref& input : parsed.inputs) {
      int source = -1;
      FusedSource::Kind kind = FusedSource::kExternal;
      for (size_t m = row_parsed_.size(); m-- > 0 && source < 0;) {
        if (!row_parsed_[m].output.overlaps(input)) continue;
        if (!sameElements(row_parsed_[m].output, row_strides_[m], input)) return false;
        source = static_cast<int>(m);
        kind = FusedSource::kMember;
      }
      for (size_t m = epilogue_parsed_.size(); m-- > 0 && source < 0;) {
        if (!epilogue_parsed_[m].output.overlaps(input)) continue;
        if (!broadcastOver(epilogue_parsed_[m].output, epilogue_strides_[m], input)) return false;
        source = static_cast<int>(m);
        kind = FusedSource::kKeptMember;
      }
      for (size_t o = 0; o < r.outputs.size() && source < 0; ++o) {
        if (!g.memrefs[o].memref.overlaps(input)) continue;
        if (!broadcastOver(g.memrefs[o].memref, g.memrefs[o].strides, input)) return false;
        source = static_cast<int>(o);
        kind = FusedSource::kReductionOutput;
      }
      if (source >= 0) {
        member.sources.push_back({kind, source});
        consumes = true;
        continue;
      }
      // A prologue member's result: read back from its memref, which it then must write, at the
      // same element (the row's first pass wrote it); another writer of that memory: refused.
      for (size_t m = parsed_.size(); m-- > 0 && source < 0;) {
        if (!parsed_[m].output.overlaps(input)) continue;
        if (!sameElements(parsed_[m].output, g.members[m], input)) return false;
        source = static_cast<int>(m);
      }
      if (source >= 0) {
        member.sources.push_back({FusedSource::kPrologueMember, source});
        read_prologue.push_back(source);
        consumes = true;
        continue;
      }
      member.sources.push_back({FusedSource::kExternal, externals.indexOf(input, all)});
    }
    if (!consumes) return false;
    // Its write: over no memory the kernel reads or writes (its memrefs are declared free of
    // aliases).
    if (overlapsKernelMemory(parsed.output, externals.added)) return false;

    externals.commit(consumer.row_externals);
    read_by_rows_.resize(parsed_.size(), false);
    for (int m : read_prologue)
      read_by_rows_[m] = true;
    row_strides_.push_back(parsed.output.stridesOver(all));
    member.signature.inner[0] = innerStrideClass(row_strides_.back().back(), false);
    consumer.row_epilogue.push_back(std::move(member));
    row_parsed_.push_back(parsed);
    row_launches_.push_back(index);
    launches_.push_back(index);
    return true;
  }

  // Whether `out` overlaps memory the consumer's kernel reads or writes: the reduction's outputs
  // and inputs, the prologue's externals and outputs, the epilogues' outputs and externals, and
  // `new_externals` (those the member writing `out` would add).
  bool overlapsKernelMemory(const Memref& out, c10::ArrayRef<Memref> new_externals) const {
    for (const PlacedMemref& placed : consumer_geometry_.memrefs)
      if (placed.memref.overlaps(out)) return true;
    for (const PlacedMemref& placed : consumer_geometry_.externals)
      if (placed.memref.overlaps(out)) return true;
    for (const auto* launches : {&parsed_, &epilogue_parsed_, &row_parsed_})
      for (const ParsedLaunch& launch : *launches)
        if (launch.output.overlaps(out)) return true;
    for (const auto* memrefs : {&epilogue_externals_, &row_externals_})
      for (const Memref& memref : *memrefs)
        if (memref.overlaps(out)) return true;
    for (const Memref& memref : new_externals)
      if (memref.overlaps(out)) return true;
    return false;
  }

  // The dimensions an epilogue iterates over the consumer's: all, or the kept ones.
  c10::ArrayRef<int64_t> epilogueDims() const {
    const c10::ArrayRef<int64_t> common(consumer_geometry_.dims);
    return consumer_->reduction.op->row_output ? common
                                               : common.slice(0, consumer_geometry_.kept_rank);
  }

  // An epilogue member's iteration `space` as a space of the reduction's element count: over
  // the kept dimensions, followed by the reduction's reduced sizes.
  DimList fullSpace(c10::ArrayRef<int64_t> space, bool over_rows) const {
    DimList full(space.begin(), space.end());
    if (over_rows) return full;
    const PartitionLaunch& launch = batch_[consumer_index_];
    const ParsedReduction parsed = parseReduction(launch, static_cast<uint32_t>(consumer_index_));
    const c10::ArrayRef<int64_t> sizes(parsed.inputs[0].sizes(), parsed.inputs[0].rank);
    const c10::ArrayRef<int64_t> reduced = sizes.slice(launch.reduction->kept_rank);
    full.append(reduced.begin(), reduced.end());
    return full;
  }

  // tryAddEpilogue over the consumer's dimensions as they are.
  bool tryAddEpilogueIn(size_t index, const PartitionLaunch& launch, const ParsedLaunch& parsed,
                        bool over_rows) {
    FusedReductionConsumer& consumer = *consumer_;
    const ReductionSignature& r = consumer.reduction;
    const ConsumerGeometry& g = consumer_geometry_;
    const c10::ArrayRef<int64_t> over = epilogueDims();
    const DimList dims(over.begin(), over.end());
    // The reduction's outputs an epilogue over these dimensions reads: element outputs over the
    // rows, a reduction's (per-row) outputs over the kept dimensions.
    auto readable = [&](size_t o) {
      return over_rows ? r.op->elementOutput(o) : !r.op->row_output;
    };
    auto sameElements = [&](const Memref& a, const DimList& a_strides, const Memref& b) {
      return sameElementsOver(a, a_strides, b, over);
    };

    FusedMember member;
    member.signature = *launch.elementwise;
    bool consumes = false;
    EpilogueExternals externals{epilogue_externals_, epilogue_external_strides_, {}, {}};
    for (const Memref& input : parsed.inputs) {
      int writer = -1;
      for (size_t m = epilogue_parsed_.size(); m-- > 0;) {
        if (!epilogue_parsed_[m].output.overlaps(input)) continue;
        if (!sameElements(epilogue_parsed_[m].output, epilogue_strides_[m], input)) return false;
        writer = static_cast<int>(m);
        break;
      }
      if (writer >= 0) {
        member.sources.push_back({FusedSource::kMember, writer});
        consumes = true;
        continue;
      }
      int output = -1;
      for (size_t o = 0; o < r.outputs.size(); ++o) {
        if (!g.memrefs[o].memref.overlaps(input)) continue;
        if (!readable(o) || !sameElements(g.memrefs[o].memref, g.memrefs[o].strides, input))
          return false;
        output = static_cast<int>(o);
      }
      if (output >= 0) {
        member.sources.push_back({FusedSource::kReductionOutput, output});
        consumes = true;
        continue;
      }
      // What the prologue writes is not kept for the epilogue (an unstored member's output has
      // no memory).
      for (const ParsedLaunch& prologue : parsed_)
        if (prologue.output.overlaps(input)) return false;
      member.sources.push_back({FusedSource::kExternal, externals.indexOf(input, over)});
    }
    if (!consumes) return false; // not a consumer: it may be the next reduction's prologue

    // Its write: over no memory the kernel reads or writes. Not even element for element (an
    // in-place update of the reduction's output or of an input): the kernel declares its
    // memrefs free of aliases to LLVM, which may then reorder two stores to one address.
    const DimList out_strides = parsed.output.stridesOver(over);
    if (overlapsKernelMemory(parsed.output, externals.added)) return false;

    consumer.epilogue_over_rows = over_rows;
    epilogue_dims_ = dims;
    externals.commit(consumer.epilogue_externals);
    member.signature.inner[0] = innerStrideClass(out_strides.back(), false);
    consumer.epilogue.push_back(std::move(member));
    epilogue_parsed_.push_back(parsed);
    epilogue_strides_.push_back(out_strides);
    epilogue_launches_.push_back(index);
    launches_.push_back(index);
    return true;
  }

  // The group as it stands, then empties the builder. `last_touch[storage]` is the last launch
  // of the batch that touches the storage.
  FusedGroup finish(c10::ArrayRef<PartitionLaunch> launches,
                    const std::unordered_map<const void*, size_t>& last_touch) {
    FusedGroup group;
    group.first = launches_.front();
    group.count = launches_.size();
    group.holes = holes_;
    const size_t last = launches_.back();
    // Whether a launch after the group touches `storage`.
    auto read_later = [&](const void* storage) {
      auto touch = last_touch.find(storage);
      return touch != last_touch.end() && touch->second > last;
    };
    bool any_stored = false;
    for (size_t m = 0; m < members_.size(); ++m) {
      bool superseded = false;
      for (size_t later = m + 1; later < members_.size() && !superseded; ++later)
        superseded = same(parsed_[later].output, parsed_[m].output);
      const PartitionLaunch& launch = launches[launches_[m]];
      const bool read_by_rows = m < read_by_rows_.size() && read_by_rows_[m];
      members_[m].stored = !superseded && (launch.output_escapes ||
                                           read_later(launch.output_storage) || read_by_rows);
      any_stored |= members_[m].stored;
    }
    group.shape_launch = consumer_ ? consumer_index_ : launches_.front();
    if (consumer_) {
      // An epilogue member's output overlaps nothing else the kernel touches (tryAddEpilogueIn):
      // stored when it escapes or a later step reads it.
      std::vector<FusedMember>& epilogue = consumer_->epilogue;
      bool stores_epilogue = false;
      for (size_t m = 0; m < epilogue.size(); ++m) {
        const PartitionLaunch& launch = launches[epilogue_launches_[m]];
        epilogue[m].stored = launch.output_escapes || read_later(launch.output_storage);
        stores_epilogue |= epilogue[m].stored;
      }
      std::vector<FusedMember>& row_epilogue = consumer_->row_epilogue;
      for (size_t m = 0; m < row_epilogue.size(); ++m) {
        const PartitionLaunch& launch = launches[row_launches_[m]];
        row_epilogue[m].stored = launch.output_escapes || read_later(launch.output_storage);
        stores_epilogue |= row_epilogue[m].stored;
      }
      // The reduction's outputs that only the epilogues read are dead (fused_kernel.h), when
      // the kernel still stores an epilogue result.
      const PartitionLaunch& reduction = launches[consumer_index_];
      for (size_t o = 0; stores_epilogue && o < reduction.output_storages.size(); ++o)
        if ((reduction.escaping_outputs >> o & 1u) == 0 && reduction.output_storages[o] &&
            !read_later(reduction.output_storages[o]))
          consumer_->dead_outputs |= 1u << o;
      FusedElementwiseSignature& signature = group.signature;
      signature.members = members_;
      // A stored member's output over the common dimensions: its innermost stride there (an
      // out= slice with a step is not contiguous) decides its memref type.
      for (size_t m = 0; m < members_.size(); ++m)
        signature.members[m].signature.inner[0] =
            innerStrideClass(consumer_geometry_.members[m].back(), false);
      for (size_t e = 0; e < externals_.size(); ++e)
        signature.externals.push_back({externals_[e].dtype, external_inner_[e], -1});
      signature.consumer = std::move(consumer_);
      gatherConsumerSlotRanges(group);
    } else if (any_stored && mixed_) {
      buildMixedSignature(group.signature);
      gatherMixedSlotRanges(group);
    } else if (any_stored) {
      FusedElementwiseSignature& signature = group.signature;
      signature.rank = rank_;
      signature.members = members_;
      for (size_t e = 0; e < externals_.size(); ++e) {
        const Memref& external = externals_[e];
        FusedExternal fused;
        fused.dtype = external.dtype;
        fused.inner = external_inner_[e];
        for (size_t m = 0; m < members_.size(); ++m)
          if (members_[m].stored && same(parsed_[m].output, external))
            fused.read_through_member = static_cast<int>(m);
        signature.externals.push_back(fused);
      }
      gatherSlotRanges(launches, group);
    }
    members_.clear();
    parsed_.clear();
    launches_.clear();
    holes_.clear();
    externals_.clear();
    external_inner_.clear();
    consumer_.reset();
    consumer_geometry_ = ConsumerGeometry();
    epilogue_dims_.clear();
    epilogue_parsed_.clear();
    epilogue_strides_.clear();
    epilogue_externals_.clear();
    epilogue_external_strides_.clear();
    epilogue_launches_.clear();
    row_parsed_.clear();
    row_strides_.clear();
    row_launches_.clear();
    row_externals_.clear();
    row_external_strides_.clear();
    read_by_rows_.clear();
    space_.clear();
    mixed_ = false;
    return group;
  }

private:
  static constexpr int kConflict = -2;
  // A longer run of launches is cut into groups of this many: compile time grows with a kernel's
  // body, and a long window of one repeated op (a loop of tiny adds) then compiles one kernel
  // that serves every group, instead of one per window length.
  static constexpr size_t kMaxMembers = 64;

  // The same elements at every iteration of the group (identical memrefs, or in a mixed group
  // identical over its dimensions).
  bool same(const Memref& a, const Memref& b) const {
    return mixed_ ? a.identicalOver(b, space_) : a.identical(b);
  }

  // A mixed group's signature: every member's kernel signature and every external over the
  // group's dimensions (their rank, and the stride classes of their innermost strides there).
  void buildMixedSignature(FusedElementwiseSignature& signature) const {
    const int rank = static_cast<int>(space_.size());
    signature.rank = rank;
    signature.members = members_;
    for (size_t m = 0; m < members_.size(); ++m) {
      ElementwiseSignature& sig = signature.members[m].signature;
      const ParsedLaunch& parsed = parsed_[m];
      sig.rank = rank;
      sig.inner[0] = innerStrideClass(parsed.output.stridesOver(space_).back(), false);
      for (size_t i = 0; i < parsed.inputs.size(); ++i)
        sig.inner[i + 1] =
            static_cast<int>(i) == sig.aliased_input
                ? sig.inner[0]
                : innerStrideClass(parsed.inputs[i].stridesOver(space_).back(), true);
    }
    for (const Memref& external : externals_) {
      FusedExternal fused;
      fused.dtype = external.dtype;
      fused.inner = innerStrideClass(external.stridesOver(space_).back(), true);
      for (size_t m = 0; m < members_.size(); ++m)
        if (signature.members[m].stored && same(parsed_[m].output, external))
          fused.read_through_member = static_cast<int>(m);
      signature.externals.push_back(fused);
    }
  }

  // A mixed group's arguments: each memref's pointers and offset from its launch, its sizes and
  // strides over the group's dimensions as the group's words (without the innermost dimension
  // for an operand broadcast along it), as for a prologue fusion.
  void gatherMixedSlotRanges(FusedGroup& group) const {
    auto add = [&](const Memref& memref, bool broadcast) {
      group.slot_ranges.push_back(
          {memref.launch, static_cast<uint32_t>(memref.descriptor - slotsOf(memref.launch)), 3});
      const DimList strides = memref.stridesOver(space_);
      const size_t dims = space_.size() - (broadcast ? 1 : 0);
      const auto begin = static_cast<uint32_t>(group.words.size());
      group.words.append(space_.begin(), space_.begin() + dims);
      group.words.append(strides.begin(), strides.begin() + dims);
      group.slot_ranges.push_back({0, begin, static_cast<uint32_t>(2 * dims), true});
    };
    const FusedElementwiseSignature& signature = group.signature;
    for (size_t m = 0; m < members_.size(); ++m)
      if (signature.members[m].stored) add(parsed_[m].output, false);
    for (size_t e = 0; e < externals_.size(); ++e)
      if (signature.externals[e].read_through_member < 0)
        add(externals_[e], signature.externals[e].inner == InnerStride::kBroadcast);
    for (const ParsedLaunch& parsed : parsed_)
      if (parsed.params.count > 0) group.slot_ranges.push_back(parsed.params);
    group.range = space_.front();
  }

  // The last member whose output `memref` reads (it is identical), -1 when no member wrote that
  // memory, or kConflict when one wrote it with another geometry.
  int latestWriter(const Memref& memref) const {
    for (size_t m = members_.size(); m-- > 0;) {
      const Memref& written = parsed_[m].output;
      if (!written.overlaps(memref)) continue;
      return same(written, memref) ? static_cast<int>(m) : kConflict;
    }
    return -1;
  }

  void gatherSlotRanges(c10::ArrayRef<PartitionLaunch> launches, FusedGroup& group) const {
    auto add = [&](const Memref& memref) {
      const int64_t* base = launches[memref.launch].slots;
      group.slot_ranges.push_back({memref.launch, static_cast<uint32_t>(memref.descriptor - base),
                                   static_cast<uint32_t>(memref.slots())});
    };
    for (size_t m = 0; m < members_.size(); ++m)
      if (members_[m].stored) add(parsed_[m].output);
    for (size_t e = 0; e < externals_.size(); ++e)
      if (group.signature.externals[e].read_through_member < 0) add(externals_[e]);
    for (const ParsedLaunch& parsed : parsed_)
      if (parsed.params.count > 0) group.slot_ranges.push_back(parsed.params);
  }

  // A prologue fusion's arguments (fused_kernel.h's ABI): each memref's pointers and offset
  // from its launch, its sizes and strides over the common dimensions as words of the group
  // (valid for every batch it serves: the partition memo's fingerprint covers the sizes and
  // strides they derive from).
  void gatherConsumerSlotRanges(FusedGroup& group) const {
    const ConsumerGeometry& g = consumer_geometry_;
    auto add = [&](const Memref& memref, c10::ArrayRef<int64_t> sizes,
                   c10::ArrayRef<int64_t> strides) {
      group.slot_ranges.push_back(
          {memref.launch, static_cast<uint32_t>(memref.descriptor - slotsOf(memref.launch)), 3});
      const auto begin = static_cast<uint32_t>(group.words.size());
      group.words.append(sizes.begin(), sizes.end());
      group.words.append(strides.begin(), strides.end());
      group.slot_ranges.push_back(
          {0, begin, static_cast<uint32_t>(sizes.size() + strides.size()), true});
    };
    const c10::ArrayRef<int64_t> common(g.dims);
    const ReductionSignature& r = group.signature.consumer->reduction;
    size_t next = 0;
    for (size_t o = 0; o < r.outputs.size(); ++o, ++next)
      if (group.signature.consumer->outputStored(o))
        add(g.memrefs[next].memref, common.slice(0, r.outputRank(o)), g.memrefs[next].strides);
    for (size_t m = 0; m < members_.size(); ++m)
      if (members_[m].stored) add(parsed_[m].output, common, g.members[m]);
    for (; next < g.memrefs.size(); ++next)
      add(g.memrefs[next].memref, common, g.memrefs[next].strides);
    for (const auto& external : g.externals)
      add(external.memref, common, external.strides);
    const c10::ArrayRef<int64_t> epilogue_dims(epilogue_dims_);
    const FusedReductionConsumer& consumer = *group.signature.consumer;
    for (size_t m = 0; m < consumer.epilogue.size(); ++m)
      if (consumer.epilogue[m].stored)
        add(epilogue_parsed_[m].output, epilogue_dims, epilogue_strides_[m]);
    for (size_t e = 0; e < epilogue_externals_.size(); ++e)
      add(epilogue_externals_[e], epilogue_dims, epilogue_external_strides_[e]);
    for (size_t m = 0; m < consumer.row_epilogue.size(); ++m)
      if (consumer.row_epilogue[m].stored) add(row_parsed_[m].output, common, row_strides_[m]);
    for (size_t e = 0; e < row_externals_.size(); ++e)
      add(row_externals_[e], common, row_external_strides_[e]);
    if (consumer_params_.count > 0) group.slot_ranges.push_back(consumer_params_);
    for (const ParsedLaunch& parsed : parsed_)
      if (parsed.params.count > 0) group.slot_ranges.push_back(parsed.params);
    for (const ParsedLaunch& parsed : epilogue_parsed_)
      if (parsed.params.count > 0) group.slot_ranges.push_back(parsed.params);
    for (const ParsedLaunch& parsed : row_parsed_)
      if (parsed.params.count > 0) group.slot_ranges.push_back(parsed.params);
    group.slot_ranges.push_back(
        {consumer_params_.launch, consumer_params_.begin + consumer_params_.count, 1}); // count
    group.range = g.dims.front();
  }

  const int64_t* slotsOf(uint32_t launch) const { return batch_[launch].slots; }

  // Where a prologue fusion's memrefs lie over the common dimensions.
  struct PlacedMemref {
    Memref memref;
    DimList strides;
  };
  struct ConsumerGeometry {
    DimList dims;
    int kept_rank = 0;
    std::vector<PlacedMemref> memrefs;   // the reduction's outputs, then its direct inputs
    std::vector<DimList> members;        // per member: its output's strides
    std::vector<PlacedMemref> externals; // per external
  };

  c10::ArrayRef<PartitionLaunch> batch_;
  std::shared_ptr<FusedReductionConsumer> consumer_;
  ConsumerGeometry consumer_geometry_;
  SlotRange consumer_params_; // the reduction's params in its slots (its count follows)
  size_t consumer_index_ = 0; // the reduction's launch

  // The consumer's epilogue (its members and externals are in consumer_): the dimensions it
  // iterates, per member its launch as parsed, its output's strides there and its launch index,
  // and per external its memref and strides there.
  DimList epilogue_dims_;
  std::vector<ParsedLaunch> epilogue_parsed_;
  std::vector<DimList> epilogue_strides_;
  std::vector<size_t> epilogue_launches_;
  std::vector<Memref> epilogue_externals_;
  std::vector<DimList> epilogue_external_strides_;
  // The row epilogue's, likewise, over all of the consumer's dimensions.
  std::vector<ParsedLaunch> row_parsed_;
  std::vector<DimList> row_strides_;
  std::vector<size_t> row_launches_;
  std::vector<Memref> row_externals_;
  std::vector<DimList> row_external_strides_;
  std::vector<bool> read_by_rows_; // per prologue member: the row epilogue reads its result

  int rank_ = 0;
  DimList space_;      // the group's iteration dimensions (common to its members' in a mixed group)
  bool mixed_ = false; // members iterate different dimensions: memrefs go over space_
  std::vector<FusedMember> members_;
  std::vector<ParsedLaunch> parsed_;
  std::vector<size_t> launches_;
  c10::SmallVector<size_t, 2> holes_; // launches_ that are no members (FusedGroup::holes)
  std::vector<Memref> externals_;
  std::vector<InnerStride> external_inner_;
};

} // namespace

PartitionResult partitionWindow(c10::ArrayRef<PartitionLaunch> launches) {
  PartitionResult result;
  std::unordered_map<const void*, size_t> last_touch;
  for (size_t i = 0; i < launches.size(); ++i)
    for (const void* storage : launches[i].storages)
      last_touch[storage] = i;

  // Whether the elementwise launches from i on run up to a reduction that reads one of their
  // results: they may be its prologue, which stores nothing where an epilogue of the reduction
  // before them would store their results.
  std::vector<bool> feeds_next_reduction(launches.size() + 1, false);
  size_t run_end = launches.size(); // the launch after the run of elementwise ones
  for (size_t i = launches.size(); i-- > 0;) {
    if (launches[i].elementwise == nullptr) {
      run_end = i;
      continue;
    }
    bool feeds = false;
    if (run_end < launches.size() && launches[run_end].reduction != nullptr) {
      const c10::ArrayRef<const void*> read = launches[run_end].storages;
      feeds = std::find(read.begin(), read.end(), launches[i].output_storage) != read.end();
    }
    feeds_next_reduction[i] = feeds || (i + 1 < run_end && feeds_next_reduction[i + 1]);
  }

  GroupBuilder group(launches);
  auto close = [&] {
    if (group.empty()) return;
    FusedGroup finished = group.finish(launches, last_touch);
    if (finished.count >= 2) {
      result.groups.push_back(std::move(finished));
      return;
    }
    // A lone elementwise launch runs as recorded unless its result is dead; a lone reduction
    // (which found no epilogue) runs as recorded.
    if (finished.signature.members.empty() && !finished.signature.consumer)
      result.dead_launches.push_back(finished.first);
  };
  // Launches held as holes of the consumer's group: they join it before the next member, or,
  // when another launch comes, are partitioned again after the group. At most two in a row: a
  // longer run of small ops fuses better as a group of its own (each hole is a launch).
  c10::SmallVector<size_t, 2> holes;
  constexpr size_t kMaxHoles = 2;
  auto partitionHolesAgain = [&](size_t& i) {
    close();
    i = holes.front() - 1; // the loop's increment makes it the first hole
    holes.clear();
  };
  for (size_t i = 0; i < launches.size() || !holes.empty(); ++i) {
    if (i == launches.size() || (!holes.empty() && launches[i].elementwise == nullptr)) {
      partitionHolesAgain(i);
      continue;
    }
    const PartitionLaunch& launch = launches[i];
    if (launch.elementwise == nullptr) {
      if (launch.reduction != nullptr && !group.empty() && !group.hasConsumer() &&
          group.tryAttachReduction(i, launch))
        continue; // the group is its prologue; an epilogue may follow
      close();
      // A reduction without a prologue still takes an epilogue.
      if (launch.reduction != nullptr) group.tryAttachReduction(i, launch);
      continue;
    }
    const ParsedLaunch parsed = parse(launch, static_cast<uint32_t>(i));
    if (group.hasConsumer()) {
      if (group.hasEpilogue() || !feeds_next_reduction[i]) {
        group.addHoles(holes);
        if (group.tryAddEpilogue(i, launch, parsed)) {
          holes.clear();
          continue;
        }
        group.takeHoles(holes.size());
      }
      if (holes.size() < kMaxHoles && group.mayBeHole(parsed)) {
        holes.push_back(i);
        continue;
      }
      if (!holes.empty()) {
        partitionHolesAgain(i);
        continue;
      }
      close();
    }
    if (group.tryAdd(i, launch, parsed)) continue;
    close();
    group.tryAdd(i, launch, parsed);
  }
  close();
  return result;
}

} // namespace torchneuron::fusion

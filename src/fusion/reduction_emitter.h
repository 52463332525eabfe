#pragma once
// The MLIR emitter for reduction signatures, shared by the files that emit its parts:
// reduction_kernel_builder.cpp (the kernel's frame, row order, passes and outputs),
// reduction_column_order.cpp (column order: tiles of columns, float32 blocks of rows) and
// reduction_fused_members.cpp (the elementwise members fused before and after a reduction).
// Internal to src/fusion: the entry points are buildReductionKernel and
// buildFusedReductionKernel (compiler.h).

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fusion/fused_kernel.h"
#include "fusion/kernel_signature.h"
#include "fusion/op_registry.h"
#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion::reduction_detail {

// `parts` joined with ", ".
std::string join(const std::vector<std::string>& parts);

// The MLIR types of `values`, joined with ", ".
std::string typeList(const std::vector<Value>& values);

class ReductionEmitter {
public:
  // `prologue`: the elementwise members that compute some of the inputs (a prologue fusion,
  // fusion/fused_kernel.h), or null.
  explicit ReductionEmitter(const ReductionSignature& s,
                            const FusedElementwiseSignature* prologue = nullptr);

  std::string build();

private:
  static constexpr int kStackBuffer = 64;
  static constexpr int kColumnTile = kStackBuffer;
  // Column order summing in float32 blocks (emitColumnBlocks): 256 columns, whose float32 block
  // sums LLVM keeps in 16 vector registers. A row's run is then 1 KB, where tiles of 64 columns
  // (256 bytes per row, a row stride of some KB) walked every row's page four times as often:
  // `sum(0)` of 2048 x 768 took 180-194 us with them, 124-145 us with 256.
  static constexpr int kSummedColumnTile = 256;
  // Rows per block with blocked rows: a block's accumulators and row values in stack buffers.
  static constexpr int kRowBlock = kStackBuffer;
  // Elements per float32 block of a summing pass (sumsInBlocks).
  static constexpr int kSumBlock = 2048;
  // Elements per float32 block of a column in column order (emitColumnBlocks), added one after
  // another: a column of 65536 times 0.1 is off by 6e-7 of its sum (ATen's cascade 1.5e-7; 128
  // doubled it). Each block ends in a pass over the tile's f64 buffers: `sum(0)` of 2048 x 768
  // took 111 us with blocks of 16, 106 with 32, 98 with 64 (stock 93-98).
  static constexpr int kColumnSumBlock = 64;

  // The input dimension whose stride class the signature records: the innermost reduced one,
  // or in column order the innermost kept one.
  int classifiedDim() const { return s_.column_order ? k_ - 1 : k_ + m_ - 1; }

  // Bounds of kept dimension `d`: the launch's [begin, end) for the outermost, else its size.
  std::string lowerBound(int d) const { return d == 0 ? "%begin" : "%c0"; }
  std::string upperBound(int d) const { return d == 0 ? "%end" : "%K" + std::to_string(d); }

  // A column tile's accumulators and a row block's accumulators and row values: one value per
  // column or row, on the stack.
  std::string stackBufferType(const ElementType& type) const {
    return "memref<" + std::to_string(stack_buffer_) + "x" + type.mlir + ">";
  }

  // A reduction's outputs for the current kept index, from `finish`.
  void storeRowOutputs(ReduceContext& context);

  std::string module(const std::vector<std::string>& arguments) const;

  // Column order: the innermost kept dimension (contiguous in the inputs) is cut into tiles of
  // kColumnTile columns, each with its accumulators in a stack buffer; the reduced loops are
  // outside, the column loop inside, so consecutive iterations read consecutive elements and
  // update independent accumulators: LLVM vectorizes across columns with no reassociation.
  void emitColumnOrder(ReduceContext& context);

  // One tile of column order: its accumulators' initial values, the reduced loops over its
  // `width` columns, then its outputs. `width` names the tile's column count.
  void emitColumnTile(ReduceContext& context, int inner, const std::vector<std::string>& buffers,
                      const std::vector<Value>& init, const std::string& width);

  // A column tile's reduced loops for a summing op in float32 (sumsInBlocks): the innermost
  // reduced dimension in blocks of kColumnSumBlock elements, each summed per column in float32
  // buffers, which are then added to the columns' f64 buffers. Vectorized across columns, each
  // element is then a float32 load and add (16 lanes) where the f64 sum converted it and added
  // at 8 lanes; a column adds at most kColumnSumBlock elements in float32 before its f64 add.
  void emitColumnBlocks(
      ReduceContext& context, const std::vector<std::string>& buffers,
      const std::vector<Value>& init, const std::string& prefix, const std::string& width,
      const std::function<void(const std::string&, const std::function<void()>&)>& overColumns);

  // After a tile's blocks: a column whose f64 sum is not finite is summed again in f64 over all
  // its rows, as without blocks: its elements may be finite with a 64-row float32 block sum
  // over FLT_MAX (twenty 2e37 then twenty -2e37 gave inf for an exact 0; ATen's cascade gives
  // 0). An infinite or NaN element gives the same result in f64. The check is one vectorized
  // pass over the tile's columns; the second sum runs only for tiles that need it.
  void resumNonFiniteColumns(
      ReduceContext& context, const std::vector<std::string>& buffers,
      const std::vector<Value>& init, const std::string& prefix, const std::string& width,
      const std::function<void(const std::string&, const std::function<void()>&)>& overColumns);

  // Blocked rows (ReductionSignature::blocked_rows) for a kernel of its own: a fused kernel's
  // members and epilogues keep the row order, which computes the same values.
  bool blockedRows() const;

  // Blocked rows: the rows [%begin, %end) in blocks of kRowBlock. Per block, each pass
  // initializes its rows' accumulators in stack buffers, then walks the reduced dimensions but
  // the innermost, the block's rows inside them and each row's innermost run inside those (a
  // loop with the accumulators as iter_args, vectorized as in row order); then the rows'
  // results (finish_row) and the element writes in the same order. A batch norm over
  // [16, 96, 56, 56] then reads its input in memory order instead of in 16 runs of 12.5 KB per
  // channel (docs/compiled-eager.md, "Blocked rows").
  void emitBlockedRows(ReduceContext& context);

  // The types of finish_row's values: a run of it on placeholders of the accumulators' types,
  // in an emitter whose text is dropped.
  std::vector<Value> probeRowValues(const ReduceContext& context,
                                    const std::vector<std::vector<Value>>& like) const;

  // Opens `result:N = scf.for <induction> = 0 to <upper>` carrying `start` as iter_args named
  // <carried><a>; returns those (the loop body's accumulators). closeIterLoop ends it.
  std::vector<Value> openIterLoop(const std::string& result, const std::string& induction,
                                  const std::string& upper, const std::vector<Value>& start,
                                  const std::string& carried);

  // Ends an scf.for with iter_args whose body computed `updated`, its results named `result`
  // (result#0, ...): those results, of the same types.
  std::vector<Value> closeIterLoop(const std::vector<Value>& updated, const std::string& result);

  std::vector<Value> loadBuffers(const std::vector<std::string>& buffers,
                                 const std::vector<Value>& like, const std::string& u);

  void storeBuffers(const std::vector<Value>& values, const std::vector<std::string>& buffers,
                    const std::string& u) {
    for (size_t a = 0; a < buffers.size(); ++a)
      e_.line("memref.store " + values[a].name + ", " + buffers[a] + "[" + u +
              "] : " + stackBufferType(values[a].type));
  }

  // What pass `pass` hands later passes and `finish`: ReductionOp::pass_results of its
  // accumulators, or the accumulators themselves.
  std::vector<Value> passResults(ReduceContext& context, int pass,
                                 std::vector<Value> accumulated) const {
    if (!op_.pass_results) return accumulated;
    return op_.pass_results(context, pass, accumulated);
  }

  size_t paramCount() const { return static_cast<size_t>(op_.num_params); }

  std::vector<std::string> keptIndices() const;

  std::vector<std::string> allIndices(const std::string& prefix) const;

  // Loads every input at the current element, converted to the compute type. An input
  // broadcast along its classified dimension (stride 0) is read at index 0 there: the same
  // address, but visibly loop-invariant, so LLVM hoists the load and vectorizes the loop.
  // With a prologue, an input a member computes is that member's value at the element, and
  // with `store_members` the members whose outputs escape store them there.
  std::vector<Value> loadInputs(const std::string& prefix, bool store_members = false);

  Value linearIndex(const std::string& prefix);

  // ReductionOp::static_window: input 0's stride along the innermost kept dimension, the last
  // of the signature's constants (0: none).
  int64_t windowStep() const;

  // Input 0's strides, once, before the loops (%xs#d), for inputOffset.
  void emitInputStrides();

  // The current element's offset from input 0's first element, in elements (i64).
  Value inputOffset(const std::string& prefix);

  std::vector<Value> emitPass(ReduceContext& context, int pass);

  // Whether pass `pass` sums float32 elements in blocks (ReductionOp::sums_in_blocks): a float32
  // row in row order whose accumulators are f64 sums. Each block of kSumBlock elements along the
  // innermost reduced dimension is summed in float32 (16 lanes with AVX-512, four vectors of
  // them interleaved by LLVM), then added to the f64 accumulators: converting every element to
  // f64 halved the lanes and added a conversion per vector (`x.sum()` of 1M float32 ran at
  // 0.60x ATen's speed). A block's float32 lanes each add kSumBlock / 64 elements before the
  // lanes are added pairwise, so the error is that of ATen's cascade sum's inner levels; the
  // blocks' sums add in f64. That holds when LLVM vectorizes the block, which a strided load or
  // store prevents: a strided row summed one element after another in float32 was 100x less
  // accurate than ATen (`x[:, ::2].sum(-1)`, `[N, 3].sum(0)` of 0.1: off by 1.6e-5), so a
  // kernel with a strided input, prologue external or stored prologue member along the row sums
  // in f64 as before. A fused prologue sums in blocks as its eager reduction does, so the two
  // compute the same values (the adaptive tracer's training matches eager mode's bit for bit
  // on short rows); a member LLVM cannot vectorize would leave its blocks sequential too.
  bool sumsInBlocks(int pass) const;

  // Whether pass `pass` of this kernel may sum float32 in blocks (ReductionOp::sums_in_blocks,
  // float32 compute): row order also needs vectorized blocks (sumsInBlocks); column order's
  // blocks (emitColumnBlocks) sum each column's 64 rows one after another either way.
  bool summingOp(int pass) const {
    return op_.sums_in_blocks && !op_.needs_index && pass != op_.store_pass &&
           compute_.mlir == "f32" && wide_.mlir == "f64";
  }

  // Opens the blocks of the innermost reduced dimension with `outer` (f64 sums) as iter_args
  // named `result`, and inside each block the float32 loop over its elements, which defines the
  // reduced index prefix<m-1> as the row order's loop does; returns the block's float32
  // accumulators. closeSumBlock ends both loops.
  std::vector<Value> openSumBlock(ReduceContext& context, int pass, const std::vector<Value>& outer,
                                  const std::string& result, const std::string& prefix);

  // Ends a block: its float32 sums, widened, are added to the f64 sums. A block whose float32
  // sum is not finite is summed again in f64: its elements may be finite with a sum over
  // FLT_MAX (2048 times 2e35, then 2048 times -2e35, gave NaN for an exact 0, where ATen's
  // cascade gives 0); an infinite or NaN element gives the same result in f64.
  std::vector<Value> closeSumBlock(ReduceContext& context, int pass,
                                   const std::vector<Value>& updated, const std::string& prefix);

  static std::vector<std::string> namesOf(const std::vector<Value>& values);

  void emitRowWrite(ReduceContext& context);

  // The row values' scratch memory: output 0 when stored in the compute type; when output 0 is
  // dead, the output of a stored epilogue member over the rows in the compute type, which the
  // write pass overwrites with the member's value at the same element (no other memref of the
  // kernel aliases it: window_partition.cpp); else none.
  void chooseRowScratch();

  // Whether the reduction's output `o` has a memref (fused_kernel.h: dead outputs do not).
  bool outputStored(size_t o) const {
    return prologue_ == nullptr || prologue_->consumer->outputStored(o);
  }

  // Output `o`'s value as stored (its storage type); stored unless the output is dead.
  Value storeOutput(const Value& value, size_t o, const std::vector<std::string>& indices) {
    if (!outputStored(o)) return e_.convert(value, storageType(s_.outputs[o]));
    return store(value, "%o" + std::to_string(o), output_types_[o], s_.outputs[o], indices);
  }

  // Stores `value` as `dtype`; returns the value stored.
  Value store(const Value& value, const std::string& memref, const std::string& type,
              c10::ScalarType dtype, const std::vector<std::string>& indices) {
    const Value stored = e_.convert(value, storageType(dtype));
    e_.line("memref.store " + stored.name + ", " + memref + "[" + join(indices) + "] : " + type);
    return stored;
  }

  // Externals `externals` (memref arguments `prefix`<e> of types `types`) loaded at the element
  // `indices`: one broadcast along the innermost of them (a consumer's classified dimension) is
  // read at index 0 there, visibly loop-invariant.
  std::vector<Value> loadExternals(const std::vector<FusedExternal>& externals,
                                   const std::vector<std::string>& types, const std::string& prefix,
                                   const std::vector<std::string>& indices);

  // Epilogue ---------------------------------------------------------------------------------

  bool hasEpilogue() const {
    return prologue_ != nullptr && !prologue_->consumer->epilogue.empty();
  }

  // The epilogue at the element `indices` (the kept or every dimension), from the reduction's
  // stored values `outputs` (as a later op would read them back): each member computed as its
  // eager kernel would, the stored ones written.
  std::vector<Value> emitEpilogue(const std::vector<Value>& outputs,
                                  const std::vector<std::string>& indices);

  // The row epilogue: a pass over the row's elements after its results (`outputs`, as stored)
  // and the kept epilogue's values (`kept`), which its members read broadcast over the row.
  void emitRowEpilogue(const std::vector<Value>& outputs, const std::vector<Value>& kept);

  // Prologue fusion -------------------------------------------------------------------------

  bool fromMemory(size_t input) const {
    return prologue_ == nullptr || prologue_->consumer->input_members[input] < 0;
  }

  void preparePrologue();

  // An epilogue's argument types, of memrefs of `rank` dimensions: per member its stored output's
  // type or "" (`types`), per external its type, and its members' params (`param_prefix`<m>_<p>).
  void prepareEpilogue(const std::vector<FusedMember>& members,
                       const std::vector<FusedExternal>& externals, int rank,
                       const std::string& param_prefix, std::vector<std::string>& types,
                       std::vector<std::string>& external_types, std::vector<Value>& params);

  // A member's run-time scalars are passed as f64 for float compute, i64 otherwise.
  static ElementType paramType(const ElementwiseSignature& sig) {
    return computeType(sig.compute).isFloat() ? ElementType{NumberKind::kFloat, 64, "f64"}
                                              : ElementType{NumberKind::kSigned, 64, "i64"};
  }

  // A memref of the full rank whose sizes are the iteration's: an input read from memory, else
  // an external, else a stored member output (window_partition.cpp fuses only when one exists).
  std::pair<std::string, std::string> shapeMemref() const;

  // The members' params in their compute types, once, before the loops.
  void convertMemberParams();

  // `members`' params, from their arguments, in their compute types.
  void convertParams(const std::vector<FusedMember>& members, const std::vector<Value>& arguments,
                     std::vector<std::vector<Value>>& params);

  // Every member's value at the current element, as stored in memory (what the eager op would
  // have written and the next op read back), in member order.
  std::vector<Value> emitMembers(const std::string& prefix, bool store_members);

  const ReductionSignature& s_;
  const ReductionOp& op_;
  const FusedElementwiseSignature* prologue_;
  std::vector<std::string> member_types_;   // per member: its stored output's memref type, or ""
  std::vector<std::string> external_types_; // the members' externals' memref types
  std::vector<Value> member_param_arguments_;
  std::vector<std::vector<Value>> member_params_;
  std::vector<std::string> epilogue_types_; // per epilogue member: its stored output's type, or ""
  std::vector<std::string> epilogue_external_types_;
  std::vector<Value> epilogue_param_arguments_;
  std::vector<std::vector<Value>> epilogue_params_;
  std::vector<std::string> row_types_; // the row epilogue's, likewise
  std::vector<std::string> row_external_types_;
  std::vector<Value> row_param_arguments_;
  std::vector<std::vector<Value>> row_params_;
  ScalarEmitter e_;
  int k_, m_;
  ElementType compute_, wide_;
  // Where a row-wise op with a store pass (ReductionOp::store_pass) keeps each element's row
  // value from that pass to its write pass: a memref of the compute type over every element
  // (name and type), or none (the write pass computes the values again).
  std::string scratch_, scratch_type_;
  std::vector<std::string> output_types_, input_types_;

  // The open float32 block of a summing pass (openSumBlock): the f64 sums it adds to, the
  // blocks loop's result name and the block's name prefix (%sb<pass>).
  std::vector<Value> sum_block_outer_;
  std::string sum_block_outer_result_, sum_block_;
  // Column order's float32 block sums per column (emitColumnBlocks): stack buffers and their
  // initial values; empty when the kernel sums without blocks.
  std::vector<std::string> block_buffers_;
  std::vector<Value> block_init_;
  // Column order's f64 sums again, for a tile with a column whose sum is not finite
  // (resumNonFiniteColumns).
  std::vector<std::string> wide_buffers_;
  // Elements per stack buffer: kStackBuffer, or kSummedColumnTile for column order's tiles.
  int stack_buffer_ = kStackBuffer;
};

} // namespace torchneuron::fusion::reduction_detail

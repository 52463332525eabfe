// MLIR for reduction signatures: scf loops over the kept dimensions, one loop nest with
// iter_args per pass over the reduced dimensions, then the row's outputs (or, for row-wise ops,
// a last nest that writes every element).

#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>

#include "fusion/compiler.h"
#include "fusion/fused_kernel.h"
#include "fusion/fused_member_lowering.h"
#include "fusion/kernel_builder.h"
#include "fusion/memref_type.h"
#include "fusion/op_registry.h"
#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {
namespace {

std::string join(const std::vector<std::string>& parts) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i ? ", " : "") + parts[i];
  return text;
}

std::string typeList(const std::vector<Value>& values) {
  std::vector<std::string> types;
  for (const Value& v : values)
    types.push_back(v.type.mlir);
  return join(types);
}

class ReductionEmitter {
public:
  // `prologue`: the elementwise members that compute some of the inputs (a prologue fusion,
  // fusion/fused_kernel.h), or null.
  explicit ReductionEmitter(const ReductionSignature& s,
                            const FusedElementwiseSignature* prologue = nullptr)
      : s_(s), op_(*s.op), prologue_(prologue), e_("    ", "v"), k_(s.kept_rank),
        m_(s.reduced_rank) {
    compute_ = computeType(s.compute);
    wide_ = compute_.isFloat() ? ElementType{NumberKind::kFloat, 64, "f64"}
                               : ElementType{NumberKind::kSigned, 64, "i64"};
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      const int rank = s.outputRank(i);
      output_types_.push_back(stridedMemrefType(rank, storageType(s.outputs[i]).mlir, s.inner[i]));
    }
    for (size_t i = 0; i < s.inputs.size(); ++i)
      input_types_.push_back(stridedMemrefType(k_ + m_, storageType(s.inputs[i]).mlir,
                                               s.inner[s.outputs.size() + i], classifiedDim(),
                                               k_ - 1, windowStep()));
    if (prologue_ != nullptr) preparePrologue();
    if (op_.row_output && op_.store_pass >= 0 && op_.row_stats == 0 && !s.outputs.empty())
      chooseRowScratch();
  }

  std::string build() {
    TORCH_INTERNAL_ASSERT(k_ >= 1 && m_ >= 1, "[fusion] reduction ranks must be >= 1");
    std::vector<std::string> arguments;
    for (size_t i = 0; i < output_types_.size(); ++i)
      if (outputStored(i)) arguments.push_back("%o" + std::to_string(i) + ": " + output_types_[i]);
    for (size_t m = 0; m < member_types_.size(); ++m)
      if (!member_types_[m].empty())
        arguments.push_back("%m" + std::to_string(m) + ": " + member_types_[m]);
    for (size_t i = 0; i < input_types_.size(); ++i)
      if (fromMemory(i)) arguments.push_back("%x" + std::to_string(i) + ": " + input_types_[i]);
    for (size_t e = 0; e < external_types_.size(); ++e)
      arguments.push_back("%e" + std::to_string(e) + ": " + external_types_[e]);
    for (size_t m = 0; m < epilogue_types_.size(); ++m)
      if (!epilogue_types_[m].empty())
        arguments.push_back("%y" + std::to_string(m) + ": " + epilogue_types_[m]);
    for (size_t e = 0; e < epilogue_external_types_.size(); ++e)
      arguments.push_back("%z" + std::to_string(e) + ": " + epilogue_external_types_[e]);
    for (size_t m = 0; m < row_types_.size(); ++m)
      if (!row_types_[m].empty())
        arguments.push_back("%ro" + std::to_string(m) + ": " + row_types_[m]);
    for (size_t e = 0; e < row_external_types_.size(); ++e)
      arguments.push_back("%rx" + std::to_string(e) + ": " + row_external_types_[e]);
    const size_t params = paramCount();
    for (size_t i = 0; i < params; ++i)
      arguments.push_back("%p" + std::to_string(i) + ": " + wide_.mlir);
    for (const Value& param : member_param_arguments_)
      arguments.push_back(param.name + ": " + param.type.mlir);
    for (const Value& param : epilogue_param_arguments_)
      arguments.push_back(param.name + ": " + param.type.mlir);
    for (const Value& param : row_param_arguments_)
      arguments.push_back(param.name + ": " + param.type.mlir);
    arguments.push_back("%count: i64");
    arguments.push_back("%begin: index");
    arguments.push_back("%end: index");

    e_.line("%c0 = arith.constant 0 : index");
    e_.line("%c1 = arith.constant 1 : index");
    const auto [shape_memref, shape_type] = shapeMemref();
    for (int d = 1; d < k_ + m_; ++d) {
      const std::string name = d < k_ ? "%K" + std::to_string(d) : "%R" + std::to_string(d - k_);
      if (d >= k_ && op_.static_window) {
        const int64_t size = s_.constants[s_.constants.size() - m_ - 1 + (d - k_)];
        e_.line(name + " = arith.constant " + std::to_string(size) + " : index");
        continue;
      }
      e_.line("%dim" + std::to_string(d) + " = arith.constant " + std::to_string(d) + " : index");
      e_.line(name + " = memref.dim " + shape_memref + ", %dim" + std::to_string(d) + " : " +
              shape_type);
    }
    convertMemberParams();
    if (op_.index_is_input_offset) emitInputStrides();
    ReduceContext context{e_, compute_, wide_,
                          {}, {},       {s_.constants.begin(), s_.constants.end()},
                          {}, {},       s_.column_order};
    for (size_t i = 0; i < params; ++i)
      context.params.push_back(Value{"%p" + std::to_string(i), wide_});
    context.count = e_.convert(Value{"%count", {NumberKind::kSigned, 64, "i64"}}, wide_);

    if (s_.column_order) {
      TORCH_INTERNAL_ASSERT(columnOrderSupported(op_), "[fusion] ", op_.name,
                            " cannot run in column order");
      emitColumnOrder(context);
      return module(arguments);
    }
    if (blockedRows()) {
      emitBlockedRows(context);
      return module(arguments);
    }
    for (int d = 0; d < k_; ++d)
      e_.line("scf.for %i" + std::to_string(d) + " = " + lowerBound(d) + " to " + upperBound(d) +
              " step %c1 {");
    for (int pass = 0; pass < op_.passes; ++pass) {
      std::vector<Value> accumulated = emitPass(context, pass);
      context.results.push_back(passResults(context, pass, std::move(accumulated)));
    }
    if (op_.row_output) {
      emitRowWrite(context);
    } else {
      storeRowOutputs(context);
    }
    for (int d = 0; d < k_; ++d)
      e_.line("}");
    return module(arguments);
  }

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
  void storeRowOutputs(ReduceContext& context) {
    const std::vector<Value> outputs = op_.finish(context, {});
    TORCH_INTERNAL_ASSERT(outputs.size() == s_.outputs.size(), "[fusion] ", op_.name, " yields ",
                          outputs.size(), " outputs, the signature has ", s_.outputs.size());
    std::vector<Value> stored;
    for (size_t i = 0; i < outputs.size(); ++i)
      stored.push_back(storeOutput(outputs[i], i, keptIndices()));
    std::vector<Value> kept_members;
    if (hasEpilogue() && !prologue_->consumer->epilogue_over_rows)
      kept_members = emitEpilogue(stored, keptIndices());
    if (prologue_ != nullptr && !prologue_->consumer->row_epilogue.empty())
      emitRowEpilogue(stored, kept_members);
  }

  std::string module(const std::vector<std::string>& arguments) const {
    std::string text = "module {\n";
    for (const std::string& declaration : e_.declarations())
      text += "  " + declaration + "\n";
    // A prologue fusion's memrefs never alias a written one (window_partition.cpp refuses the
    // group otherwise): declared so, LLVM vectorizes its loops without overlap checks.
    const std::string attributes = prologue_ != nullptr ? " attributes {passthrough = [\"" +
                                                              std::string(kNoAliasMemrefs) + "\"]}"
                                                        : "";
    text += "  func.func @kernel(" + join(arguments) + ")" + attributes + " {\n" + e_.body() +
            "    return\n  }\n}\n";
    return text;
  }

  // Column order: the innermost kept dimension (contiguous in the inputs) is cut into tiles of
  // kColumnTile columns, each with its accumulators in a stack buffer; the reduced loops are
  // outside, the column loop inside, so consecutive iterations read consecutive elements and
  // update independent accumulators: LLVM vectorizes across columns with no reassociation.
  void emitColumnOrder(ReduceContext& context) {
    const int inner = k_ - 1; // the tiled kept dimension
    std::vector<Value> init = op_.init(context, 0);
    // 256 columns of one accumulator, 128 of two (16 vector registers either way).
    stack_buffer_ =
        summingOp(0) ? std::max<int>(kColumnTile, kSummedColumnTile / static_cast<int>(init.size()))
                     : kColumnTile;
    std::vector<std::string> buffers;
    for (size_t a = 0; a < init.size(); ++a) {
      buffers.push_back("%acc" + std::to_string(a));
      e_.line(buffers[a] + " = memref.alloca() : " + stackBufferType(init[a].type));
    }
    if (summingOp(0)) { // the float32 block sums of each column (emitColumnBlocks)
      context.wide = compute_;
      block_init_ = op_.init(context, 0);
      context.wide = wide_;
      for (size_t a = 0; a < block_init_.size(); ++a) {
        block_buffers_.push_back("%bacc" + std::to_string(a));
        e_.line(block_buffers_[a] + " = memref.alloca() : " + stackBufferType(block_init_[a].type));
        wide_buffers_.push_back("%wacc" + std::to_string(a));
        e_.line(wide_buffers_[a] + " = memref.alloca() : " + stackBufferType(init[a].type));
      }
      e_.line("%sb_size = arith.constant " + std::to_string(kColumnSumBlock) + " : index");
    }
    e_.line("%tile = arith.constant " + std::to_string(stack_buffer_) + " : index");
    for (int d = 0; d < inner; ++d)
      e_.line("scf.for %i" + std::to_string(d) + " = " + lowerBound(d) + " to " + upperBound(d) +
              " step %c1 {");
    e_.line("scf.for %t = " + lowerBound(inner) + " to " + upperBound(inner) + " step %tile {");
    e_.line("%left = arith.subi " + upperBound(inner) + ", %t : index");
    e_.line("%width = arith.minui %left, %tile : index");
    // A full tile (every tile but the last of a row) runs a copy of the tile's loops whose
    // column loops have the constant bound kColumnTile: LLVM then vectorizes them without
    // run-time trip-count checks and unrolls them, where the copy for the last tile's
    // remainder pays those checks at each reduced element (a bias gradient's sum over dim 0 of
    // [2048, 768] ran at 0.61x ATen's speed with only that copy).
    e_.line("%full = arith.cmpi eq, %width, %tile : index");
    e_.line("scf.if %full {");
    emitColumnTile(context, inner, buffers, init, "%tile");
    e_.line("} else {");
    emitColumnTile(context, inner, buffers, init, "%width");
    e_.line("}"); // scf.if
    e_.line("}"); // the tiles
    for (int d = 0; d < inner; ++d)
      e_.line("}");
  }

  // One tile of column order: its accumulators' initial values, the reduced loops over its
  // `width` columns, then its outputs. `width` names the tile's column count.
  void emitColumnTile(ReduceContext& context, int inner, const std::vector<std::string>& buffers,
                      const std::vector<Value>& init, const std::string& width) {
    const std::string column = "%i" + std::to_string(inner);
    auto overColumns = [&](const std::string& u, const std::function<void()>& body) {
      e_.line("scf.for " + u + " = %c0 to " + width + " step %c1 {");
      e_.line(column + " = arith.addi %t, " + u + " : index");
      body();
      e_.line("}");
    };
    overColumns("%u0", [&] { storeBuffers(op_.init(context, 0), buffers, "%u0"); });
    const std::string prefix = "%j0_";
    if (!block_buffers_.empty()) {
      emitColumnBlocks(context, buffers, init, prefix, width, overColumns);
    } else {
      for (int j = 0; j < m_; ++j)
        e_.line("scf.for " + prefix + std::to_string(j) + " = %c0 to %R" + std::to_string(j) +
                " step %c1 {");
      overColumns("%u1", [&] {
        std::vector<Value> accumulators = loadBuffers(buffers, init, "%u1");
        const std::vector<Value> x = loadInputs(prefix);
        storeBuffers(op_.combine(context, 0, accumulators, x, Value{}), buffers, "%u1");
      });
      for (int j = 0; j < m_; ++j)
        e_.line("}");
    }
    overColumns("%u2", [&] {
      std::vector<Value> accumulated = loadBuffers(buffers, init, "%u2");
      context.results = {passResults(context, 0, std::move(accumulated))};
      storeRowOutputs(context);
    });
  }

  // A column tile's reduced loops for a summing op in float32 (sumsInBlocks): the innermost
  // reduced dimension in blocks of kColumnSumBlock elements, each summed per column in float32
  // buffers, which are then added to the columns' f64 buffers. Vectorized across columns, each
  // element is then a float32 load and add (16 lanes) where the f64 sum converted it and added
  // at 8 lanes; a column adds at most kColumnSumBlock elements in float32 before its f64 add.
  void emitColumnBlocks(
      ReduceContext& context, const std::vector<std::string>& buffers,
      const std::vector<Value>& init, const std::string& prefix, const std::string& width,
      const std::function<void(const std::string&, const std::function<void()>&)>& overColumns) {
    const std::string j = std::to_string(m_ - 1), upper = "%R" + j;
    for (int outer = 0; outer + 1 < m_; ++outer)
      e_.line("scf.for " + prefix + std::to_string(outer) + " = %c0 to %R" + std::to_string(outer) +
              " step %c1 {");
    e_.line("scf.for %sb = %c0 to " + upper + " step %sb_size {");
    e_.line("%sb_left = arith.subi " + upper + ", %sb : index");
    e_.line("%sb_width = arith.minui %sb_left, %sb_size : index");
    context.wide = compute_;
    overColumns("%u3", [&] { storeBuffers(op_.init(context, 0), block_buffers_, "%u3"); });
    e_.line("scf.for %sb_u = %c0 to %sb_width step %c1 {");
    e_.line(prefix + j + " = arith.addi %sb, %sb_u : index");
    overColumns("%u1", [&] {
      std::vector<Value> accumulators = loadBuffers(block_buffers_, block_init_, "%u1");
      const std::vector<Value> x = loadInputs(prefix);
      storeBuffers(op_.combine(context, 0, accumulators, x, Value{}), block_buffers_, "%u1");
    });
    e_.line("}");
    context.wide = wide_;
    overColumns("%u4", [&] {
      const std::vector<Value> sums = loadBuffers(block_buffers_, block_init_, "%u4");
      const std::vector<Value> totals = loadBuffers(buffers, init, "%u4");
      std::vector<Value> updated;
      for (size_t a = 0; a < sums.size(); ++a)
        updated.push_back(e_.add(totals[a], e_.convert(sums[a], wide_)));
      storeBuffers(updated, buffers, "%u4");
    });
    e_.line("}"); // the blocks
    for (int outer = 0; outer + 1 < m_; ++outer)
      e_.line("}");
    resumNonFiniteColumns(context, buffers, init, prefix, width, overColumns);
  }

  // After a tile's blocks: a column whose f64 sum is not finite is summed again in f64 over all
  // its rows, as without blocks: its elements may be finite with a 64-row float32 block sum
  // over FLT_MAX (twenty 2e37 then twenty -2e37 gave inf for an exact 0; ATen's cascade gives
  // 0). An infinite or NaN element gives the same result in f64. The check is one vectorized
  // pass over the tile's columns; the second sum runs only for tiles that need it.
  void resumNonFiniteColumns(
      ReduceContext& context, const std::vector<std::string>& buffers,
      const std::vector<Value>& init, const std::string& prefix, const std::string& width,
      const std::function<void(const std::string&, const std::function<void()>&)>& overColumns) {
    const Value infinity = e_.floatConstant(std::numeric_limits<double>::infinity(), wide_);
    auto notFinite = [&](const std::vector<Value>& totals) {
      Value any = e_.compare("uge", e_.unary("math.absf", totals[0]), infinity);
      for (size_t a = 1; a < totals.size(); ++a)
        any = e_.binary("arith.ori", any,
                        e_.compare("uge", e_.unary("math.absf", totals[a]), infinity));
      return any;
    };
    const ElementType flag{NumberKind::kSigned, 32, "i32"};
    const Value none = e_.intConstant(0, flag);
    e_.line("%cbad:1 = scf.for %u5 = %c0 to " + width +
            " step %c1 iter_args(%cbad_acc = " + none.name + ") -> (i32) {");
    const Value bad = e_.convert(notFinite(loadBuffers(buffers, init, "%u5")), flag);
    const Value seen = e_.binary("arith.ori", Value{"%cbad_acc", flag}, bad);
    e_.line("scf.yield " + seen.name + " : i32");
    e_.line("}");
    const Value any = e_.compare("ne", Value{"%cbad#0", flag}, none);
    e_.line("scf.if " + any.name + " {");
    overColumns("%u6", [&] { storeBuffers(op_.init(context, 0), wide_buffers_, "%u6"); });
    for (int d = 0; d < m_; ++d)
      e_.line("scf.for " + prefix + std::to_string(d) + " = %c0 to %R" + std::to_string(d) +
              " step %c1 {");
    overColumns("%u7", [&] {
      const std::vector<Value> sums = loadBuffers(wide_buffers_, init, "%u7");
      storeBuffers(op_.combine(context, 0, sums, loadInputs(prefix), Value{}), wide_buffers_,
                   "%u7");
    });
    for (int d = 0; d < m_; ++d)
      e_.line("}");
    overColumns("%u8", [&] {
      const std::vector<Value> totals = loadBuffers(buffers, init, "%u8");
      const std::vector<Value> again = loadBuffers(wide_buffers_, init, "%u8");
      std::vector<Value> chosen;
      for (size_t a = 0; a < totals.size(); ++a)
        chosen.push_back(e_.select(notFinite({totals[a]}), again[a], totals[a]));
      storeBuffers(chosen, buffers, "%u8");
    });
    e_.line("}");
  }

  // Blocked rows (ReductionSignature::blocked_rows) for a kernel of its own: a fused kernel's
  // members and epilogues keep the row order, which computes the same values.
  bool blockedRows() const {
    if (!s_.blocked_rows || prologue_ != nullptr || !scratch_.empty()) return false;
    TORCH_INTERNAL_ASSERT(blockedRowsSupported(op_) && k_ == 1 && m_ >= 2, "[fusion] ", op_.name,
                          " cannot run with blocked rows (kept ", k_, ", reduced ", m_, ")");
    return true;
  }

  // Blocked rows: the rows [%begin, %end) in blocks of kRowBlock. Per block, each pass
  // initializes its rows' accumulators in stack buffers, then walks the reduced dimensions but
  // the innermost, the block's rows inside them and each row's innermost run inside those (a
  // loop with the accumulators as iter_args, vectorized as in row order); then the rows'
  // results (finish_row) and the element writes in the same order. A batch norm over
  // [16, 96, 56, 56] then reads its input in memory order instead of in 16 runs of 12.5 KB per
  // channel (docs/compiled-eager.md, "Blocked rows").
  void emitBlockedRows(ReduceContext& context) {
    // The buffers: each pass's accumulators, then the rows' finish_row values, typed by what
    // init and (in a throwaway emitter) finish_row return.
    std::vector<std::vector<std::string>> accumulators(static_cast<size_t>(op_.passes));
    std::vector<std::vector<Value>> like(static_cast<size_t>(op_.passes));
    for (int pass = 0; pass < op_.passes; ++pass) {
      like[pass] = op_.init(context, pass);
      for (size_t a = 0; a < like[pass].size(); ++a) {
        accumulators[pass].push_back("%bacc" + std::to_string(pass) + "_" + std::to_string(a));
        e_.line(accumulators[pass][a] +
                " = memref.alloca() : " + stackBufferType(like[pass][a].type));
      }
    }
    const std::vector<Value> row_like = probeRowValues(context, like);
    std::vector<std::string> row_buffers;
    for (size_t i = 0; i < row_like.size(); ++i) {
      row_buffers.push_back("%brow" + std::to_string(i));
      e_.line(row_buffers[i] + " = memref.alloca() : " + stackBufferType(row_like[i].type));
    }
    // Loads the results of passes [0, passes) and, with `row`, the row values, of block row `u`.
    auto loadRow = [&](const std::string& u, int passes, bool row) {
      context.results.clear();
      for (int pass = 0; pass < passes; ++pass)
        context.results.push_back(loadBuffers(accumulators[pass], like[pass], u));
      if (row) context.row = loadBuffers(row_buffers, row_like, u);
    };
    auto overRows = [&](const std::string& u, const std::function<void()>& body) {
      e_.line("scf.for " + u + " = %c0 to %width step %c1 {");
      e_.line("%i0 = arith.addi %b, " + u + " : index");
      body();
      e_.line("}");
    };
    // The reduced loops but the innermost, named prefix<j> as in row order.
    auto outerReduced = [&](const std::string& prefix, const std::function<void()>& body) {
      for (int j = 0; j + 1 < m_; ++j)
        e_.line("scf.for " + prefix + std::to_string(j) + " = %c0 to %R" + std::to_string(j) +
                " step %c1 {");
      body();
      for (int j = 0; j + 1 < m_; ++j)
        e_.line("}");
    };
    const std::string innermost = std::to_string(m_ - 1);
    e_.line("%rowblock = arith.constant " + std::to_string(kRowBlock) + " : index");
    e_.line("scf.for %b = %begin to %end step %rowblock {");
    e_.line("%rowsleft = arith.subi %end, %b : index");
    e_.line("%width = arith.minui %rowsleft, %rowblock : index");
    for (int pass = 0; pass < op_.passes; ++pass) {
      const std::string p = std::to_string(pass);
      overRows("%bu" + p + "i",
               [&] { storeBuffers(op_.init(context, pass), accumulators[pass], "%bu" + p + "i"); });
      const std::string prefix = "%j" + p + "_";
      outerReduced(prefix, [&] {
        const std::string u = "%bu" + p + "c";
        overRows(u, [&] {
          loadRow(u, pass, false);
          const std::vector<Value> start = loadBuffers(accumulators[pass], like[pass], u);
          const std::string result = "%bl" + p;
          const std::vector<Value> inner =
              openIterLoop(result, prefix + innermost, "%R" + innermost, start, "%bc" + p + "_");
          const std::vector<Value> updated =
              op_.combine(context, pass, inner, loadInputs(prefix), Value{});
          storeBuffers(closeIterLoop(updated, result), accumulators[pass], u);
        });
      });
    }
    overRows("%bur", [&] {
      loadRow("%bur", op_.passes, false);
      context.row = op_.finish_row(context);
      for (int i = 0; i < op_.row_stats; ++i)
        storeOutput(context.row[i], i, keptIndices());
      storeBuffers(context.row, row_buffers, "%bur");
    });
    outerReduced("%w", [&] {
      overRows("%buw", [&] {
        loadRow("%buw", op_.passes, true);
        e_.line("scf.for %w" + innermost + " = %c0 to %R" + innermost + " step %c1 {");
        const std::vector<Value> outputs = op_.finish(context, loadInputs("%w"));
        TORCH_INTERNAL_ASSERT(outputs.size() + op_.row_stats == s_.outputs.size(), "[fusion] ",
                              op_.name, " yields ", outputs.size(), " element outputs");
        for (size_t i = 0; i < outputs.size(); ++i)
          storeOutput(outputs[i], i + op_.row_stats, allIndices("%w"));
        e_.line("}");
      });
    });
    e_.line("}"); // the blocks
  }

  // The types of finish_row's values: a run of it on placeholders of the accumulators' types,
  // in an emitter whose text is dropped.
  std::vector<Value> probeRowValues(const ReduceContext& context,
                                    const std::vector<std::vector<Value>>& like) const {
    ScalarEmitter probe("", "probe");
    ReduceContext placeholders{probe,         context.compute,   context.wide, context.params,
                               context.count, context.constants, like,         {},
                               false};
    const std::vector<Value> row = op_.finish_row(placeholders);
    TORCH_INTERNAL_ASSERT(static_cast<int>(row.size()) == op_.row_stats, "[fusion] ", op_.name,
                          " yields ", row.size(), " row results");
    return row;
  }

  // Opens `result:N = scf.for <induction> = 0 to <upper>` carrying `start` as iter_args named
  // <carried><a>; returns those (the loop body's accumulators). closeIterLoop ends it.
  std::vector<Value> openIterLoop(const std::string& result, const std::string& induction,
                                  const std::string& upper, const std::vector<Value>& start,
                                  const std::string& carried) {
    std::vector<std::string> bindings;
    std::vector<Value> inner;
    for (size_t a = 0; a < start.size(); ++a) {
      const std::string name = carried + std::to_string(a);
      bindings.push_back(name + " = " + start[a].name);
      inner.push_back(Value{name, start[a].type});
    }
    e_.line(result + ":" + std::to_string(start.size()) + " = scf.for " + induction + " = %c0 to " +
            upper + " step %c1 iter_args(" + join(bindings) + ") -> (" + typeList(start) + ") {");
    return inner;
  }

  // Ends an scf.for with iter_args whose body computed `updated`, its results named `result`
  // (result#0, ...): those results, of the same types.
  std::vector<Value> closeIterLoop(const std::vector<Value>& updated, const std::string& result) {
    e_.line("scf.yield " + join(namesOf(updated)) + " : " + typeList(updated));
    e_.line("}");
    std::vector<Value> results;
    for (size_t a = 0; a < updated.size(); ++a)
      results.push_back(Value{result + "#" + std::to_string(a), updated[a].type});
    return results;
  }

  std::vector<Value> loadBuffers(const std::vector<std::string>& buffers,
                                 const std::vector<Value>& like, const std::string& u) {
    std::vector<Value> values;
    for (size_t a = 0; a < buffers.size(); ++a) {
      const std::string name = e_.freshName();
      e_.line(name + " = memref.load " + buffers[a] + "[" + u +
              "] : " + stackBufferType(like[a].type));
      values.push_back(Value{name, like[a].type});
    }
    return values;
  }

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

  std::vector<std::string> keptIndices() const {
    std::vector<std::string> indices;
    for (int d = 0; d < k_; ++d)
      indices.push_back("%i" + std::to_string(d));
    return indices;
  }

  std::vector<std::string> allIndices(const std::string& prefix) const {
    std::vector<std::string> indices = keptIndices();
    for (int j = 0; j < m_; ++j)
      indices.push_back(prefix + std::to_string(j));
    return indices;
  }

  // Loads every input at the current element, converted to the compute type. An input
  // broadcast along its classified dimension (stride 0) is read at index 0 there: the same
  // address, but visibly loop-invariant, so LLVM hoists the load and vectorizes the loop.
  // With a prologue, an input a member computes is that member's value at the element, and
  // with `store_members` the members whose outputs escape store them there.
  std::vector<Value> loadInputs(const std::string& prefix, bool store_members = false) {
    std::vector<Value> member_values;
    if (prologue_ != nullptr) member_values = emitMembers(prefix, store_members);
    std::vector<Value> values;
    for (size_t i = 0; i < s_.inputs.size(); ++i) {
      if (!fromMemory(i)) {
        const Value& value = member_values[prologue_->consumer->input_members[i]];
        values.push_back(e_.convert(value, compute_));
        continue;
      }
      std::vector<std::string> indices = allIndices(prefix);
      if (s_.inner[s_.outputs.size() + i] == InnerStride::kBroadcast)
        indices[classifiedDim()] = "%c0";
      const std::string name = e_.freshName();
      e_.line(name + " = memref.load %x" + std::to_string(i) + "[" + join(indices) +
              "] : " + input_types_[i]);
      values.push_back(e_.convert(Value{name, storageType(s_.inputs[i])}, compute_));
    }
    return values;
  }

  Value linearIndex(const std::string& prefix) {
    std::string index = prefix + "0";
    for (int j = 1; j < m_; ++j) {
      const std::string scaled = e_.freshName(), sum = e_.freshName();
      e_.line(scaled + " = arith.muli " + index + ", %R" + std::to_string(j) + " : index");
      e_.line(sum + " = arith.addi " + scaled + ", " + prefix + std::to_string(j) + " : index");
      index = sum;
    }
    const std::string cast = e_.freshName();
    e_.line(cast + " = arith.index_cast " + index + " : index to i64");
    return Value{cast, {NumberKind::kSigned, 64, "i64"}};
  }

  // ReductionOp::static_window: input 0's stride along the innermost kept dimension, the last
  // of the signature's constants (0: none).
  int64_t windowStep() const {
    if (!op_.static_window) return 0;
    TORCH_INTERNAL_ASSERT(s_.constants.size() >= static_cast<size_t>(m_) + 1, "[fusion] ", op_.name,
                          " has no window constants");
    return s_.constants.back();
  }

  // Input 0's strides, once, before the loops (%xs#d), for inputOffset.
  void emitInputStrides() {
    TORCH_INTERNAL_ASSERT(fromMemory(0), "[fusion] ", op_.name, " needs input 0 from memory");
    const int rank = k_ + m_;
    std::string results = "%xb, %xo",
                types = "memref<" + storageType(s_.inputs[0]).mlir + ">, index";
    results += ", %xz:" + std::to_string(rank) + ", %xs:" + std::to_string(rank);
    for (int d = 0; d < 2 * rank; ++d)
      types += ", index";
    e_.line(results + " = memref.extract_strided_metadata %x0 : " + input_types_[0] + " -> " +
            types);
  }

  // The current element's offset from input 0's first element, in elements (i64).
  Value inputOffset(const std::string& prefix) {
    const std::vector<std::string> indices = allIndices(prefix);
    std::string offset;
    for (size_t d = 0; d < indices.size(); ++d) {
      const std::string term = e_.freshName();
      e_.line(term + " = arith.muli " + indices[d] + ", %xs#" + std::to_string(d) + " : index");
      if (offset.empty()) {
        offset = term;
        continue;
      }
      const std::string sum = e_.freshName();
      e_.line(sum + " = arith.addi " + offset + ", " + term + " : index");
      offset = sum;
    }
    const std::string cast = e_.freshName();
    e_.line(cast + " = arith.index_cast " + offset + " : index to i64");
    return Value{cast, {NumberKind::kSigned, 64, "i64"}};
  }

  std::vector<Value> emitPass(ReduceContext& context, int pass) {
    std::vector<Value> accumulators = op_.init(context, pass);
    const std::string tag = "%P" + std::to_string(pass) + "_";
    const std::string prefix = "%j" + std::to_string(pass) + "_";
    std::vector<std::string> loop_results;
    const bool blocks = sumsInBlocks(pass);
    for (int j = 0; j < m_; ++j) {
      const std::string result = tag + std::to_string(j);
      if (blocks && j == m_ - 1) {
        accumulators = openSumBlock(context, pass, accumulators, result, prefix);
        continue;
      }
      accumulators = openIterLoop(result, prefix + std::to_string(j), "%R" + std::to_string(j),
                                  accumulators, tag + "a" + std::to_string(j) + "_");
      loop_results.push_back(result);
    }
    if (blocks) context.wide = compute_; // the block's combine sums in float32
    const std::vector<Value> x = loadInputs(prefix, pass == 0);
    std::vector<Value> updated;
    if (!scratch_.empty() && pass == op_.store_pass) {
      const Value value = e_.convert(op_.row_value(context, x), compute_);
      e_.line("memref.store " + value.name + ", " + scratch_ + "[" + join(allIndices(prefix)) +
              "] : " + scratch_type_);
      updated = op_.combine_stored(context, accumulators, value);
    } else {
      const Value index = !op_.needs_index            ? Value{}
                          : op_.index_is_input_offset ? inputOffset(prefix)
                                                      : linearIndex(prefix);
      updated = op_.combine(context, pass, accumulators, x, index);
    }
    if (blocks) {
      context.wide = wide_;
      updated = closeSumBlock(context, pass, updated, prefix);
    }
    for (int j = static_cast<int>(loop_results.size()) - 1; j >= 0; --j) {
      updated = closeIterLoop(updated, loop_results[j]);
    }
    return updated;
  }

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
  bool sumsInBlocks(int pass) const {
    if (!summingOp(pass)) return false;
    for (size_t i = 0; i < s_.inputs.size(); ++i)
      if (fromMemory(i) && s_.inner[s_.outputs.size() + i] == InnerStride::kStrided) return false;
    if (prologue_ == nullptr) return true;
    for (const FusedExternal& external : prologue_->externals)
      if (external.inner == InnerStride::kStrided) return false;
    for (const FusedMember& member : prologue_->members)
      if (member.stored && member.signature.inner.at(0) == InnerStride::kStrided) return false;
    return true;
  }

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
                                  const std::string& result, const std::string& prefix) {
    const std::string j = std::to_string(m_ - 1), id = std::to_string(pass);
    const std::string block = "%sb" + id, upper = "%R" + j;
    e_.line(block + "_size = arith.constant " + std::to_string(kSumBlock) + " : index");
    std::vector<std::string> bindings;
    std::vector<Value> carried;
    for (size_t a = 0; a < outer.size(); ++a) {
      carried.push_back(Value{block + "_outer" + std::to_string(a), outer[a].type});
      bindings.push_back(carried[a].name + " = " + outer[a].name);
    }
    e_.line(result + ":" + std::to_string(outer.size()) + " = scf.for " + block + " = %c0 to " +
            upper + " step " + block + "_size iter_args(" + join(bindings) + ") -> (" +
            typeList(outer) + ") {");
    e_.line(block + "_left = arith.subi " + upper + ", " + block + " : index");
    e_.line(block + "_width = arith.minui " + block + "_left, " + block + "_size : index");
    sum_block_outer_ = carried;
    sum_block_outer_result_ = result;
    sum_block_ = block;
    context.wide = compute_;
    const std::vector<Value> start = op_.init(context, pass);
    context.wide = wide_;
    std::vector<Value> inner =
        openIterLoop(block + "_sum", block + "_u", block + "_width", start, block + "_acc");
    e_.line(prefix + j + " = arith.addi " + block + ", " + block + "_u : index");
    return inner;
  }

  // Ends a block: its float32 sums, widened, are added to the f64 sums. A block whose float32
  // sum is not finite is summed again in f64: its elements may be finite with a sum over
  // FLT_MAX (2048 times 2e35, then 2048 times -2e35, gave NaN for an exact 0, where ATen's
  // cascade gives 0); an infinite or NaN element gives the same result in f64.
  std::vector<Value> closeSumBlock(ReduceContext& context, int pass,
                                   const std::vector<Value>& updated, const std::string& prefix) {
    const std::string& block = sum_block_;
    const std::vector<Value> sums = closeIterLoop(updated, block + "_sum");
    const Value infinity = e_.floatConstant(std::numeric_limits<double>::infinity(), compute_);
    Value finite = e_.compare("olt", e_.unary("math.absf", sums[0]), infinity);
    for (size_t a = 1; a < sums.size(); ++a)
      finite = e_.binary("arith.andi", finite,
                         e_.compare("olt", e_.unary("math.absf", sums[a]), infinity));
    std::vector<Value> widened;
    for (const Value& sum : sums)
      widened.push_back(e_.convert(sum, wide_));
    const std::string checked = block + "_checked";
    e_.line(checked + ":" + std::to_string(sums.size()) + " = scf.if " + finite.name + " -> (" +
            typeList(widened) + ") {");
    e_.line("scf.yield " + join(namesOf(widened)) + " : " + typeList(widened));
    e_.line("} else {");
    const std::string j = std::to_string(m_ - 1);
    const std::vector<Value> inner = openIterLoop(block + "_wide", block + "_v", block + "_width",
                                                  op_.init(context, pass), block + "_wacc");
    e_.line(prefix + j + " = arith.addi " + block + ", " + block + "_v : index");
    const std::vector<Value> again = closeIterLoop(
        op_.combine(context, pass, inner, loadInputs(prefix), Value{}), block + "_wide");
    e_.line("scf.yield " + join(namesOf(again)) + " : " + typeList(again));
    e_.line("}");
    std::vector<Value> outer;
    for (size_t a = 0; a < sums.size(); ++a)
      outer.push_back(e_.add(sum_block_outer_[a], Value{checked + "#" + std::to_string(a), wide_}));
    return closeIterLoop(outer, sum_block_outer_result_);
  }

  static std::vector<std::string> namesOf(const std::vector<Value>& values) {
    std::vector<std::string> names;
    for (const Value& v : values)
      names.push_back(v.name);
    return names;
  }

  void emitRowWrite(ReduceContext& context) {
    if (op_.row_stats > 0) {
      context.row = op_.finish_row(context);
      TORCH_INTERNAL_ASSERT(static_cast<int>(context.row.size()) == op_.row_stats, "[fusion] ",
                            op_.name, " yields ", context.row.size(), " row results");
      for (int i = 0; i < op_.row_stats; ++i)
        storeOutput(context.row[i], i, keptIndices());
    }
    const std::string prefix = "%w";
    for (int j = 0; j < m_; ++j)
      e_.line("scf.for " + prefix + std::to_string(j) + " = %c0 to " + "%R" + std::to_string(j) +
              " step %c1 {");
    std::vector<Value> outputs;
    if (!scratch_.empty()) {
      const std::string stored = e_.freshName();
      e_.line(stored + " = memref.load " + scratch_ + "[" + join(allIndices(prefix)) +
              "] : " + scratch_type_);
      outputs = op_.finish_stored(context, Value{stored, compute_});
    } else {
      outputs = op_.finish(context, loadInputs(prefix, op_.passes == 0));
    }
    TORCH_INTERNAL_ASSERT(outputs.size() + op_.row_stats == s_.outputs.size(), "[fusion] ",
                          op_.name, " yields ", outputs.size(), " element outputs");
    // Per output its stored value; a per-row result has none here (an epilogue over the rows
    // never reads one: window_partition.cpp).
    std::vector<Value> stored(op_.row_stats);
    for (size_t i = 0; i < outputs.size(); ++i) {
      stored.push_back(storeOutput(outputs[i], i + op_.row_stats, allIndices(prefix)));
    }
    if (hasEpilogue() && prologue_->consumer->epilogue_over_rows)
      emitEpilogue(stored, allIndices(prefix));
    for (int j = 0; j < m_; ++j)
      e_.line("}");
  }

  // The row values' scratch memory: output 0 when stored in the compute type; when output 0 is
  // dead, the output of a stored epilogue member over the rows in the compute type, which the
  // write pass overwrites with the member's value at the same element (no other memref of the
  // kernel aliases it: window_partition.cpp); else none.
  void chooseRowScratch() {
    if (outputStored(0)) {
      if (storageType(s_.outputs[0]).mlir != compute_.mlir) return;
      scratch_ = "%o0";
      scratch_type_ = output_types_[0];
      return;
    }
    const FusedReductionConsumer& consumer = *prologue_->consumer;
    if (!consumer.epilogue_over_rows) return;
    for (size_t m = 0; m < consumer.epilogue.size(); ++m) {
      const FusedMember& member = consumer.epilogue[m];
      if (!member.stored || storageType(member.signature.output).mlir != compute_.mlir) continue;
      scratch_ = "%y" + std::to_string(m);
      scratch_type_ = epilogue_types_[m];
      return;
    }
  }

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
                                   const std::vector<std::string>& indices) {
    std::vector<Value> values;
    for (size_t e = 0; e < externals.size(); ++e) {
      std::vector<std::string> at = indices;
      if (externals[e].inner == InnerStride::kBroadcast) at.back() = "%c0";
      const std::string name = e_.freshName();
      e_.line(name + " = memref.load " + prefix + std::to_string(e) + "[" + join(at) +
              "] : " + types[e]);
      values.push_back(Value{name, storageType(externals[e].dtype)});
    }
    return values;
  }

  // Epilogue ---------------------------------------------------------------------------------

  bool hasEpilogue() const {
    return prologue_ != nullptr && !prologue_->consumer->epilogue.empty();
  }

  // The epilogue at the element `indices` (the kept or every dimension), from the reduction's
  // stored values `outputs` (as a later op would read them back): each member computed as its
  // eager kernel would, the stored ones written.
  std::vector<Value> emitEpilogue(const std::vector<Value>& outputs,
                                  const std::vector<std::string>& indices) {
    const FusedReductionConsumer& consumer = *prologue_->consumer;
    // lowerFusedMember reads kMember sources from `values` and the rest from `inputs`: the
    // epilogue's externals, then the reduction's outputs.
    std::vector<Value> inputs =
        loadExternals(consumer.epilogue_externals, epilogue_external_types_, "%z", indices);
    const int first_output = static_cast<int>(inputs.size());
    inputs.insert(inputs.end(), outputs.begin(), outputs.end());
    std::vector<Value> values;
    for (size_t m = 0; m < consumer.epilogue.size(); ++m) {
      FusedMember member = consumer.epilogue[m];
      for (FusedSource& source : member.sources) {
        if (source.kind != FusedSource::kReductionOutput) continue;
        TORCH_INTERNAL_ASSERT(!outputs[source.index].name.empty(), "[fusion] epilogue member ", m,
                              " reads a per-row result over the rows");
        source = {FusedSource::kExternal, first_output + source.index};
      }
      values.push_back(lowerFusedMember(e_, member, epilogue_params_[m], values, inputs));
      if (member.stored)
        e_.line("memref.store " + values[m].name + ", %y" + std::to_string(m) + "[" +
                join(indices) + "] : " + epilogue_types_[m]);
    }
    return values;
  }

  // The row epilogue: a pass over the row's elements after its results (`outputs`, as stored)
  // and the kept epilogue's values (`kept`), which its members read broadcast over the row.
  void emitRowEpilogue(const std::vector<Value>& outputs, const std::vector<Value>& kept) {
    const FusedReductionConsumer& consumer = *prologue_->consumer;
    const std::string prefix = "%rw";
    for (int j = 0; j < m_; ++j)
      e_.line("scf.for " + prefix + std::to_string(j) + " = %c0 to %R" + std::to_string(j) +
              " step %c1 {");
    const std::vector<std::string> indices = allIndices(prefix);
    // lowerFusedMember reads kMember sources from `values` and the rest from `inputs`: the row
    // externals, then the reduction's outputs, then the kept epilogue's members.
    std::vector<Value> inputs =
        loadExternals(consumer.row_externals, row_external_types_, "%rx", indices);
    const int first_output = static_cast<int>(inputs.size());
    inputs.insert(inputs.end(), outputs.begin(), outputs.end());
    const int first_kept = static_cast<int>(inputs.size());
    inputs.insert(inputs.end(), kept.begin(), kept.end());
    // Stored prologue members' values at the element, read back from their own memrefs (which
    // the first pass over the row wrote), once each.
    std::vector<int> prologue_input(prologue_->members.size(), -1);
    for (const FusedMember& member : consumer.row_epilogue)
      for (const FusedSource& source : member.sources) {
        if (source.kind != FusedSource::kPrologueMember || prologue_input[source.index] >= 0)
          continue;
        const std::string name = e_.freshName();
        e_.line(name + " = memref.load %m" + std::to_string(source.index) + "[" + join(indices) +
                "] : " + member_types_[source.index]);
        prologue_input[source.index] = static_cast<int>(inputs.size());
        inputs.push_back(
            Value{name, storageType(prologue_->members[source.index].signature.output)});
      }
    std::vector<Value> values;
    for (size_t m = 0; m < consumer.row_epilogue.size(); ++m) {
      FusedMember member = consumer.row_epilogue[m];
      for (FusedSource& source : member.sources) {
        if (source.kind == FusedSource::kReductionOutput)
          source = {FusedSource::kExternal, first_output + source.index};
        else if (source.kind == FusedSource::kKeptMember)
          source = {FusedSource::kExternal, first_kept + source.index};
        else if (source.kind == FusedSource::kPrologueMember)
          source = {FusedSource::kExternal, prologue_input[source.index]};
      }
      values.push_back(lowerFusedMember(e_, member, row_params_[m], values, inputs));
      if (member.stored)
        e_.line("memref.store " + values[m].name + ", %ro" + std::to_string(m) + "[" +
                join(indices) + "] : " + row_types_[m]);
    }
    for (int j = 0; j < m_; ++j)
      e_.line("}");
  }

  // Prologue fusion -------------------------------------------------------------------------

  bool fromMemory(size_t input) const {
    return prologue_ == nullptr || prologue_->consumer->input_members[input] < 0;
  }

  void preparePrologue() {
    const std::vector<FusedMember>& members = prologue_->members;
    member_types_.resize(members.size());
    for (size_t m = 0; m < members.size(); ++m)
      if (members[m].stored)
        member_types_[m] = stridedMemrefType(k_ + m_, storageType(members[m].signature.output).mlir,
                                             members[m].signature.inner[0]);
    for (const FusedExternal& external : prologue_->externals)
      external_types_.push_back(stridedMemrefType(k_ + m_, storageType(external.dtype).mlir,
                                                  external.inner, classifiedDim()));
    for (size_t m = 0; m < members.size(); ++m) {
      const ElementwiseSignature& sig = members[m].signature;
      for (size_t p = 0; p < sig.op->params.size(); ++p)
        member_param_arguments_.push_back(
            Value{"%q" + std::to_string(m) + "_" + std::to_string(p), paramType(sig)});
    }
    const FusedReductionConsumer& consumer = *prologue_->consumer;
    const int epilogue_rank = consumer.epilogue_over_rows ? k_ + m_ : k_;
    prepareEpilogue(consumer.epilogue, consumer.epilogue_externals, epilogue_rank, "%r",
                    epilogue_types_, epilogue_external_types_, epilogue_param_arguments_);
    prepareEpilogue(consumer.row_epilogue, consumer.row_externals, k_ + m_, "%rp", row_types_,
                    row_external_types_, row_param_arguments_);
  }

  // An epilogue's argument types, of memrefs of `rank` dimensions: per member its stored output's
  // type or "" (`types`), per external its type, and its members' params (`param_prefix`<m>_<p>).
  void prepareEpilogue(const std::vector<FusedMember>& members,
                       const std::vector<FusedExternal>& externals, int rank,
                       const std::string& param_prefix, std::vector<std::string>& types,
                       std::vector<std::string>& external_types, std::vector<Value>& params) {
    for (size_t m = 0; m < members.size(); ++m) {
      const ElementwiseSignature& sig = members[m].signature;
      types.push_back(members[m].stored
                          ? stridedMemrefType(rank, storageType(sig.output).mlir, sig.inner[0])
                          : std::string());
      for (size_t p = 0; p < sig.op->params.size(); ++p)
        params.push_back(
            Value{param_prefix + std::to_string(m) + "_" + std::to_string(p), paramType(sig)});
    }
    for (const FusedExternal& external : externals)
      external_types.push_back(
          stridedMemrefType(rank, storageType(external.dtype).mlir, external.inner));
  }

  // A member's run-time scalars are passed as f64 for float compute, i64 otherwise.
  static ElementType paramType(const ElementwiseSignature& sig) {
    return computeType(sig.compute).isFloat() ? ElementType{NumberKind::kFloat, 64, "f64"}
                                              : ElementType{NumberKind::kSigned, 64, "i64"};
  }

  // A memref of the full rank whose sizes are the iteration's: an input read from memory, else
  // an external, else a stored member output (window_partition.cpp fuses only when one exists).
  std::pair<std::string, std::string> shapeMemref() const {
    for (size_t i = 0; i < input_types_.size(); ++i)
      if (fromMemory(i)) return {"%x" + std::to_string(i), input_types_[i]};
    if (!external_types_.empty()) return {"%e0", external_types_[0]};
    for (size_t m = 0; m < member_types_.size(); ++m)
      if (!member_types_[m].empty()) return {"%m" + std::to_string(m), member_types_[m]};
    TORCH_INTERNAL_ASSERT(false, "[fusion] a prologue fusion has no memref of the input's rank");
  }

  // The members' params in their compute types, once, before the loops.
  void convertMemberParams() {
    if (prologue_ == nullptr) return;
    size_t next = 0;
    member_params_.resize(prologue_->members.size());
    for (size_t m = 0; m < prologue_->members.size(); ++m) {
      const ElementwiseSignature& sig = prologue_->members[m].signature;
      for (size_t p = 0; p < sig.op->params.size(); ++p)
        member_params_[m].push_back(
            e_.convert(member_param_arguments_[next++], computeType(sig.compute)));
    }
    convertParams(prologue_->consumer->epilogue, epilogue_param_arguments_, epilogue_params_);
    convertParams(prologue_->consumer->row_epilogue, row_param_arguments_, row_params_);
  }

  // `members`' params, from their arguments, in their compute types.
  void convertParams(const std::vector<FusedMember>& members, const std::vector<Value>& arguments,
                     std::vector<std::vector<Value>>& params) {
    size_t next = 0;
    params.resize(members.size());
    for (size_t m = 0; m < members.size(); ++m) {
      const ElementwiseSignature& sig = members[m].signature;
      for (size_t p = 0; p < sig.op->params.size(); ++p)
        params[m].push_back(e_.convert(arguments[next++], computeType(sig.compute)));
    }
  }

  // Every member's value at the current element, as stored in memory (what the eager op would
  // have written and the next op read back), in member order.
  std::vector<Value> emitMembers(const std::string& prefix, bool store_members) {
    const std::vector<std::string> indices = allIndices(prefix);
    const std::vector<Value> externals =
        loadExternals(prologue_->externals, external_types_, "%e", indices);
    std::vector<Value> stored;
    for (size_t m = 0; m < prologue_->members.size(); ++m) {
      const FusedMember& member = prologue_->members[m];
      stored.push_back(lowerFusedMember(e_, member, member_params_[m], stored, externals));
      if (store_members && member.stored)
        e_.line("memref.store " + stored[m].name + ", %m" + std::to_string(m) + "[" +
                join(indices) + "] : " + member_types_[m]);
    }
    return stored;
  }

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

// Whether epilogue member `m` (of the row epilogue with `row`) may read `source` as `wanted`.
bool validEpilogueSource(const FusedElementwiseSignature& s, bool row, size_t m,
                         const FusedSource& source, c10::ScalarType wanted) {
  const FusedReductionConsumer& consumer = *s.consumer;
  const ReductionSignature& r = consumer.reduction;
  const std::vector<FusedMember>& members = row ? consumer.row_epilogue : consumer.epilogue;
  const std::vector<FusedExternal>& externals =
      row ? consumer.row_externals : consumer.epilogue_externals;
  const auto index = static_cast<size_t>(source.index);
  if (source.index < 0) return false;
  switch (source.kind) {
  case FusedSource::kMember:
    return index < m && members[index].signature.output == wanted;
  case FusedSource::kExternal:
    return index < externals.size() && externals[index].dtype == wanted;
  case FusedSource::kReductionOutput:
    // The row epilogue reads a reduction's per-row results; the epilogue over the rows a
    // row-wise op's element outputs, over the kept dimensions a reduction's outputs (a row-wise
    // op's per-row results are stored outside that path).
    return index < r.outputs.size() && r.outputs[index] == wanted &&
           (row || (consumer.epilogue_over_rows ? r.op->elementOutput(index) : !r.op->row_output));
  case FusedSource::kKeptMember:
    return row && index < consumer.epilogue.size() &&
           consumer.epilogue[index].signature.output == wanted;
  case FusedSource::kPrologueMember:
    return row && index < s.members.size() && s.members[index].stored &&
           s.members[index].signature.output == wanted;
  }
  return false;
}

// Throws naming the first epilogue member (of the row epilogue with `row`) with a bad source.
void checkEpilogue(const FusedElementwiseSignature& s, bool row) {
  const std::vector<FusedMember>& members = row ? s.consumer->row_epilogue : s.consumer->epilogue;
  for (size_t m = 0; m < members.size(); ++m) {
    const FusedMember& member = members[m];
    bool valid =
        member.signature.op != nullptr && member.sources.size() == member.signature.inputs.size();
    for (size_t i = 0; valid && i < member.sources.size(); ++i)
      valid = validEpilogueSource(s, row, m, member.sources[i], member.signature.inputs[i]);
    if (!valid)
      throw std::logic_error(std::string("[fusion] malformed fused reduction kernel: ") +
                             (row ? "row epilogue" : "epilogue") + " member " + std::to_string(m) +
                             " of " + s.describe());
  }
}

} // namespace

std::string buildReductionKernel(const ReductionSignature& signature) {
  return ReductionEmitter(signature).build();
}

std::string buildFusedReductionKernel(const FusedElementwiseSignature& signature) {
  if (!signature.consumer || signature.consumer->reduction.column_order ||
      signature.consumer->input_members.size() != signature.consumer->reduction.inputs.size())
    throw std::logic_error("[fusion] malformed fused reduction kernel: " + signature.describe());
  for (size_t i = 0; i < signature.consumer->input_members.size(); ++i) {
    const int member = signature.consumer->input_members[i];
    if (member >= static_cast<int>(signature.members.size()) ||
        (member >= 0 &&
         signature.members[member].signature.output != signature.consumer->reduction.inputs[i]))
      throw std::logic_error("[fusion] malformed fused reduction kernel: input " +
                             std::to_string(i) + " reads member " + std::to_string(member) +
                             " of " + signature.describe());
  }
  for (size_t m = 0; m < signature.members.size(); ++m) {
    const FusedMember& member = signature.members[m];
    bool valid =
        member.signature.op != nullptr && member.sources.size() == member.signature.inputs.size();
    for (size_t i = 0; valid && i < member.sources.size(); ++i) {
      const FusedSource& source = member.sources[i];
      valid =
          source.index >= 0 &&
          (source.kind == FusedSource::kMember
               ? static_cast<size_t>(source.index) < m &&
                     signature.members[source.index].signature.output == member.signature.inputs[i]
               : static_cast<size_t>(source.index) < signature.externals.size() &&
                     signature.externals[source.index].dtype == member.signature.inputs[i]);
    }
    if (!valid)
      throw std::logic_error("[fusion] malformed fused reduction kernel: member " +
                             std::to_string(m) + " of " + signature.describe());
  }
  const FusedReductionConsumer& consumer = *signature.consumer;
  const ReductionSignature& r = consumer.reduction;
  if (!consumer.row_epilogue.empty() && (r.op->row_output || consumer.epilogue_over_rows))
    throw std::logic_error("[fusion] malformed fused reduction kernel: a row epilogue after " +
                           signature.describe());
  checkEpilogue(signature, false);
  checkEpilogue(signature, true);
  // A dead output is one the epilogues replace: the kernel still stores one of their results.
  bool stores_epilogue = false;
  for (const auto* members : {&consumer.epilogue, &consumer.row_epilogue})
    for (const FusedMember& member : *members)
      stores_epilogue |= member.stored;
  if ((consumer.dead_outputs >> r.outputs.size()) != 0 ||
      (consumer.dead_outputs != 0 && !stores_epilogue))
    throw std::logic_error("[fusion] malformed fused reduction kernel: dead outputs " +
                           std::to_string(consumer.dead_outputs) + " of " + signature.describe());
  return ReductionEmitter(r, &signature).build();
}

} // namespace torchneuron::fusion

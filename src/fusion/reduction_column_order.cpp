// Column order for reductions over the outer dimensions (`sum(0)` of a row-major matrix): the
// innermost kept dimension is cut into tiles of columns with their accumulators on the stack,
// and rows are walked outside the column loop, so LLVM vectorizes across columns. Summing ops in
// float32 add each column's rows in float32 blocks, then the block sums in float64, re-summing a
// tile in float64 if any column's total is not finite. The emitter: reduction_emitter.h.

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "fusion/reduction_emitter.h"

namespace torchneuron::fusion::reduction_detail {

void ReductionEmitter::emitColumnOrder(ReduceContext& context) {
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

void ReductionEmitter::emitColumnTile(ReduceContext& context, int inner,
                                      const std::vector<std::string>& buffers,
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

void ReductionEmitter::emitColumnBlocks(
    ReduceContext& context, const std::vector<std::string>& buffers, const std::vector<Value>& init,
    const std::string& prefix, const std::string& width,
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

void ReductionEmitter::resumNonFiniteColumns(
    ReduceContext& context, const std::vector<std::string>& buffers, const std::vector<Value>& init,
    const std::string& prefix, const std::string& width,
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
    storeBuffers(op_.combine(context, 0, sums, loadInputs(prefix), Value{}), wide_buffers_, "%u7");
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

} // namespace torchneuron::fusion::reduction_detail

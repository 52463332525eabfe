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
#include "fusion/reduction_emitter.h"
#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {
namespace reduction_detail {

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

ReductionEmitter::ReductionEmitter(const ReductionSignature& s,
                                   const FusedElementwiseSignature* prologue)
    : s_(s), op_(*s.op), prologue_(prologue), e_("    ", "v"), k_(s.kept_rank), m_(s.reduced_rank) {
  compute_ = computeType(s.compute);
  wide_ = compute_.isFloat() ? ElementType{NumberKind::kFloat, 64, "f64"}
                             : ElementType{NumberKind::kSigned, 64, "i64"};
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    const int rank = s.outputRank(i);
    output_types_.push_back(stridedMemrefType(rank, storageType(s.outputs[i]).mlir, s.inner[i]));
  }
  for (size_t i = 0; i < s.inputs.size(); ++i)
    input_types_.push_back(stridedMemrefType(k_ + m_, storageType(s.inputs[i]).mlir,
                                             s.inner[s.outputs.size() + i], classifiedDim(), k_ - 1,
                                             windowStep()));
  if (prologue_ != nullptr) preparePrologue();
  if (op_.row_output && op_.store_pass >= 0 && op_.row_stats == 0 && !s.outputs.empty())
    chooseRowScratch();
}

std::string ReductionEmitter::build() {
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

void ReductionEmitter::storeRowOutputs(ReduceContext& context) {
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

std::string ReductionEmitter::module(const std::vector<std::string>& arguments) const {
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

bool ReductionEmitter::blockedRows() const {
  if (!s_.blocked_rows || prologue_ != nullptr || !scratch_.empty()) return false;
  TORCH_INTERNAL_ASSERT(blockedRowsSupported(op_) && k_ == 1 && m_ >= 2, "[fusion] ", op_.name,
                        " cannot run with blocked rows (kept ", k_, ", reduced ", m_, ")");
  return true;
}

void ReductionEmitter::emitBlockedRows(ReduceContext& context) {
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

std::vector<Value>
ReductionEmitter::probeRowValues(const ReduceContext& context,
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

std::vector<Value> ReductionEmitter::openIterLoop(const std::string& result,
                                                  const std::string& induction,
                                                  const std::string& upper,
                                                  const std::vector<Value>& start,
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

std::vector<Value> ReductionEmitter::closeIterLoop(const std::vector<Value>& updated,
                                                   const std::string& result) {
  e_.line("scf.yield " + join(namesOf(updated)) + " : " + typeList(updated));
  e_.line("}");
  std::vector<Value> results;
  for (size_t a = 0; a < updated.size(); ++a)
    results.push_back(Value{result + "#" + std::to_string(a), updated[a].type});
  return results;
}

std::vector<Value> ReductionEmitter::loadBuffers(const std::vector<std::string>& buffers,
                                                 const std::vector<Value>& like,
                                                 const std::string& u) {
  std::vector<Value> values;
  for (size_t a = 0; a < buffers.size(); ++a) {
    const std::string name = e_.freshName();
    e_.line(name + " = memref.load " + buffers[a] + "[" + u +
            "] : " + stackBufferType(like[a].type));
    values.push_back(Value{name, like[a].type});
  }
  return values;
}

std::vector<std::string> ReductionEmitter::keptIndices() const {
  std::vector<std::string> indices;
  for (int d = 0; d < k_; ++d)
    indices.push_back("%i" + std::to_string(d));
  return indices;
}

std::vector<std::string> ReductionEmitter::allIndices(const std::string& prefix) const {
  std::vector<std::string> indices = keptIndices();
  for (int j = 0; j < m_; ++j)
    indices.push_back(prefix + std::to_string(j));
  return indices;
}

std::vector<Value> ReductionEmitter::loadInputs(const std::string& prefix, bool store_members) {
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

Value ReductionEmitter::linearIndex(const std::string& prefix) {
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

int64_t ReductionEmitter::windowStep() const {
  if (!op_.static_window) return 0;
  TORCH_INTERNAL_ASSERT(s_.constants.size() >= static_cast<size_t>(m_) + 1, "[fusion] ", op_.name,
                        " has no window constants");
  return s_.constants.back();
}

void ReductionEmitter::emitInputStrides() {
  TORCH_INTERNAL_ASSERT(fromMemory(0), "[fusion] ", op_.name, " needs input 0 from memory");
  const int rank = k_ + m_;
  std::string results = "%xb, %xo", types = "memref<" + storageType(s_.inputs[0]).mlir + ">, index";
  results += ", %xz:" + std::to_string(rank) + ", %xs:" + std::to_string(rank);
  for (int d = 0; d < 2 * rank; ++d)
    types += ", index";
  e_.line(results + " = memref.extract_strided_metadata %x0 : " + input_types_[0] + " -> " + types);
}

Value ReductionEmitter::inputOffset(const std::string& prefix) {
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

std::vector<Value> ReductionEmitter::emitPass(ReduceContext& context, int pass) {
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

bool ReductionEmitter::sumsInBlocks(int pass) const {
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

std::vector<Value> ReductionEmitter::openSumBlock(ReduceContext& context, int pass,
                                                  const std::vector<Value>& outer,
                                                  const std::string& result,
                                                  const std::string& prefix) {
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

std::vector<Value> ReductionEmitter::closeSumBlock(ReduceContext& context, int pass,
                                                   const std::vector<Value>& updated,
                                                   const std::string& prefix) {
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

std::vector<std::string> ReductionEmitter::namesOf(const std::vector<Value>& values) {
  std::vector<std::string> names;
  for (const Value& v : values)
    names.push_back(v.name);
  return names;
}

void ReductionEmitter::emitRowWrite(ReduceContext& context) {
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
  TORCH_INTERNAL_ASSERT(outputs.size() + op_.row_stats == s_.outputs.size(), "[fusion] ", op_.name,
                        " yields ", outputs.size(), " element outputs");
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

void ReductionEmitter::chooseRowScratch() {
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

std::pair<std::string, std::string> ReductionEmitter::shapeMemref() const {
  for (size_t i = 0; i < input_types_.size(); ++i)
    if (fromMemory(i)) return {"%x" + std::to_string(i), input_types_[i]};
  if (!external_types_.empty()) return {"%e0", external_types_[0]};
  for (size_t m = 0; m < member_types_.size(); ++m)
    if (!member_types_[m].empty()) return {"%m" + std::to_string(m), member_types_[m]};
  TORCH_INTERNAL_ASSERT(false, "[fusion] a prologue fusion has no memref of the input's rank");
}

} // namespace reduction_detail

namespace {

using reduction_detail::ReductionEmitter;

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

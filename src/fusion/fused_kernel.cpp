#include "fusion/fused_kernel.h"
#include "fusion/streaming_vector_width.h"

#include <stdexcept>

#include "fusion/compiler.h"
#include "fusion/element_type.h"
#include "fusion/fused_member_lowering.h"
#include "fusion/kernel_text.h"
#include "fusion/op_registry.h"
#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {
namespace {

[[noreturn]] void malformed(const std::string& what) {
  throw std::logic_error("[fusion] malformed fused kernel: " + what);
}

ElementType paramType(c10::ScalarType compute) {
  return computeType(compute).isFloat() ? ElementType{NumberKind::kFloat, 64, "f64"}
                                        : ElementType{NumberKind::kSigned, 64, "i64"};
}

void check(const FusedElementwiseSignature& s) {
  bool any_stored = false;
  for (size_t m = 0; m < s.members.size(); ++m) {
    const FusedMember& member = s.members[m];
    const ElementwiseSignature& sig = member.signature;
    if (sig.op == nullptr) malformed("member " + std::to_string(m) + " has no op");
    if (sig.rank != s.rank)
      malformed("member " + std::to_string(m) + " has rank " + std::to_string(sig.rank) +
                ", the kernel " + std::to_string(s.rank));
    if (member.sources.size() != sig.inputs.size())
      malformed("member " + std::to_string(m) + " has " + std::to_string(member.sources.size()) +
                " sources for " + std::to_string(sig.inputs.size()) + " inputs");
    for (size_t i = 0; i < member.sources.size(); ++i) {
      const FusedSource& source = member.sources[i];
      if (source.kind == FusedSource::kMember) {
        if (source.index < 0 || static_cast<size_t>(source.index) >= m)
          malformed("member " + std::to_string(m) + " reads member " +
                    std::to_string(source.index) + ", not an earlier one");
        if (s.members[source.index].signature.output != sig.inputs[i])
          malformed("member " + std::to_string(m) + " reads member " +
                    std::to_string(source.index) + " as another dtype");
      } else if (source.index < 0 || static_cast<size_t>(source.index) >= s.externals.size()) {
        malformed("member " + std::to_string(m) + " reads external " +
                  std::to_string(source.index) + " of " + std::to_string(s.externals.size()));
      } else if (s.externals[source.index].dtype != sig.inputs[i]) {
        malformed("member " + std::to_string(m) + " reads external " +
                  std::to_string(source.index) + " as another dtype");
      }
    }
    if (member.stored && sig.inner[0] == InnerStride::kBroadcast)
      malformed("member " + std::to_string(m) + " stores a broadcast output");
    any_stored |= member.stored;
  }
  if (!any_stored) malformed("no member stores its output");
  for (size_t e = 0; e < s.externals.size(); ++e) {
    const int through = s.externals[e].read_through_member;
    if (through < 0) continue;
    if (static_cast<size_t>(through) >= s.members.size() || !s.members[through].stored ||
        s.members[through].signature.output != s.externals[e].dtype ||
        s.members[through].signature.inner[0] != s.externals[e].inner)
      malformed("external " + std::to_string(e) + " is read through member " +
                std::to_string(through) + ", which does not store that memory");
  }
}

} // namespace

Value lowerFusedMember(ScalarEmitter& emit, const FusedMember& member,
                       const std::vector<Value>& params, const std::vector<Value>& stored,
                       const std::vector<Value>& externals) {
  const ElementwiseSignature& sig = member.signature;
  const std::vector<const OperandSpec*> specs = presentOperands(sig);
  LoweringContext context{emit,
                          computeType(sig.compute),
                          storageType(sig.compute),
                          {},
                          params,
                          std::vector<int64_t>(sig.constants.begin(), sig.constants.end()),
                          std::vector<bool>(sig.present.begin(), sig.present.end())};
  for (size_t i = 0; i < member.sources.size(); ++i) {
    const FusedSource& source = member.sources[i];
    const Value& loaded =
        source.kind == FusedSource::kMember ? stored[source.index] : externals[source.index];
    const c10::ScalarType common = specs[i]->promotes ? sig.compute : sig.inputs[i];
    // As the eager kernel: cast to the common dtype first, then widen to the compute type.
    context.operands.push_back(
        emit.convert(emit.convert(loaded, storageType(common)), computeType(common)));
  }
  return storeElementwiseResult(emit, sig.op->lower(context), sig.compute, sig.output);
}

namespace {

void hashMembers(Hasher& h, const std::vector<FusedMember>& members) {
  h.u64(members.size());
  for (const FusedMember& member : members) {
    h.u64(member.signature.key()).u64(member.stored).u64(member.sources.size());
    for (const FusedSource& source : member.sources)
      h.u64(source.kind).i64(source.index);
  }
}

void hashExternals(Hasher& h, const std::vector<FusedExternal>& externals) {
  h.u64(externals.size());
  for (const FusedExternal& external : externals)
    h.i64(static_cast<int64_t>(external.dtype))
        .u64(static_cast<uint64_t>(external.inner))
        .i64(external.read_through_member);
}

} // namespace

Hash64 FusedElementwiseSignature::key() const {
  Hasher h;
  h.str("fused-elementwise").i64(rank);
  hashMembers(h, members);
  hashExternals(h, externals);
  if (consumer) {
    h.str("consumer").u64(consumer->reduction.key()).u64(consumer->input_members.size());
    for (int member : consumer->input_members)
      h.i64(member);
    h.str("epilogue").u64(consumer->epilogue_over_rows);
    hashMembers(h, consumer->epilogue);
    hashExternals(h, consumer->epilogue_externals);
    h.str("row-epilogue");
    hashMembers(h, consumer->row_epilogue);
    hashExternals(h, consumer->row_externals);
    h.str("dead-outputs").u64(consumer->dead_outputs);
  }
  return h.digest();
}

std::string FusedElementwiseSignature::describe() const {
  std::string text = "fused[";
  int stored = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    text += (m ? "," : "") + members[m].signature.op->name;
    stored += members[m].stored;
  }
  if (consumer) {
    text += " -> " + consumer->reduction.describe();
    for (size_t m = 0; m < consumer->epilogue.size(); ++m)
      text += (m ? "," : " -> ") + consumer->epilogue[m].signature.op->name;
    for (size_t m = 0; m < consumer->row_epilogue.size(); ++m)
      text += (m ? "," : " -> rows ") + consumer->row_epilogue[m].signature.op->name;
    return text + "], " +
           std::to_string(externals.size() + consumer->epilogue_externals.size() +
                          consumer->row_externals.size()) +
           " inputs, " + std::to_string(stored) + " stored intermediates" +
           (consumer->dead_outputs != 0 ? ", its dead results unstored" : "");
  }
  return text + "] rank " + std::to_string(rank) + ", " + std::to_string(externals.size()) +
         " inputs, " + std::to_string(stored) + " outputs";
}

int FusedElementwiseSignature::argumentSlots() const {
  int slots = 0;
  if (consumer) {
    const ReductionSignature& r = consumer->reduction;
    const int full = r.kept_rank + r.reduced_rank;
    for (size_t o = 0; o < r.outputs.size(); ++o)
      slots += consumer->outputStored(o) ? 3 + 2 * r.outputRank(o) : 0;
    for (int member : consumer->input_members)
      slots += member < 0 ? 3 + 2 * full : 0;
    for (const FusedMember& member : members)
      slots +=
          (member.stored ? 3 + 2 * full : 0) + static_cast<int>(member.signature.op->params.size());
    const int epilogue_rank = consumer->epilogue_over_rows ? full : r.kept_rank;
    for (const FusedMember& member : consumer->epilogue)
      slots += (member.stored ? 3 + 2 * epilogue_rank : 0) +
               static_cast<int>(member.signature.op->params.size());
    slots += static_cast<int>(consumer->epilogue_externals.size()) * (3 + 2 * epilogue_rank);
    for (const FusedMember& member : consumer->row_epilogue)
      slots +=
          (member.stored ? 3 + 2 * full : 0) + static_cast<int>(member.signature.op->params.size());
    slots += static_cast<int>(consumer->row_externals.size()) * (3 + 2 * full);
    return slots + static_cast<int>(externals.size()) * (3 + 2 * full) + r.op->num_params + 1;
  }
  for (const FusedMember& member : members) {
    if (member.stored) slots += 3 + 2 * rank;
    slots += static_cast<int>(member.signature.op->params.size());
  }
  for (const FusedExternal& external : externals)
    if (external.read_through_member < 0) slots += 3 + 2 * operandRank(rank, external.inner);
  return slots;
}

std::string buildFusedElementwiseKernel(const FusedElementwiseSignature& s) {
  if (s.consumer) return buildFusedReductionKernel(s);
  check(s);
  // Memref arguments: %a<k>, stored outputs first (so %a0 is an output, as rangePrologue
  // expects), then the externals with a memref of their own.
  std::vector<int> output_arg(s.members.size(), -1), external_arg(s.externals.size(), -1);
  std::vector<std::string> types;
  for (size_t m = 0; m < s.members.size(); ++m) {
    if (!s.members[m].stored) continue;
    const ElementwiseSignature& sig = s.members[m].signature;
    output_arg[m] = static_cast<int>(types.size());
    types.push_back(operandMemrefType(s.rank, storageType(sig.output).mlir, sig.inner[0]));
  }
  const size_t outputs = types.size();
  for (size_t e = 0; e < s.externals.size(); ++e) {
    if (s.externals[e].read_through_member >= 0) continue;
    external_arg[e] = static_cast<int>(types.size());
    types.push_back(
        operandMemrefType(s.rank, storageType(s.externals[e].dtype).mlir, s.externals[e].inner));
  }

  std::string arguments;
  for (size_t k = 0; k < types.size(); ++k)
    arguments += "%a" + std::to_string(k) + ": " + types[k] + ", ";
  ScalarEmitter scalars("    ", "q");
  std::vector<std::vector<Value>> params(s.members.size());
  for (size_t m = 0; m < s.members.size(); ++m) {
    const ElementwiseSignature& sig = s.members[m].signature;
    const ElementType type = paramType(sig.compute);
    for (size_t p = 0; p < sig.op->params.size(); ++p) {
      const std::string name = "%p" + std::to_string(m) + "_" + std::to_string(p);
      arguments += name + ": " + type.mlir + ", ";
      params[m].push_back(scalars.convert({name, type}, computeType(sig.compute)));
    }
  }
  arguments += "%begin: index, %end: index";

  std::string prologue = rangePrologue(s.rank, types[0]);
  for (size_t k = 0; k < types.size(); ++k) {
    const bool is_output = k < outputs;
    InnerStride inner = InnerStride::kContiguous;
    if (!is_output)
      for (size_t e = 0; e < s.externals.size(); ++e)
        if (external_arg[e] == static_cast<int>(k)) inner = s.externals[e].inner;
    prologue +=
        rangeView(std::to_string(k), types[k], is_output ? s.rank : operandRank(s.rank, inner));
  }

  // Block arguments: linalg lists ins (the externals with a memref) before outs.
  ScalarEmitter body("      ", "v");
  std::vector<Value> external_value(s.externals.size());
  std::string maps, ins, in_types, block_args, outs, out_types;
  for (size_t e = 0; e < s.externals.size(); ++e) {
    if (external_arg[e] < 0) continue;
    const std::string k = std::to_string(external_arg[e]);
    external_value[e] = {"%in" + k, storageType(s.externals[e].dtype)};
    maps += operandIndexingMap(s.rank, s.externals[e].inner) + ", ";
    ins += std::string(ins.empty() ? "" : ", ") + "%s" + k;
    in_types += std::string(in_types.empty() ? "" : ", ") + types[external_arg[e]];
    block_args += external_value[e].name + ": " + external_value[e].type.mlir + ", ";
  }
  for (size_t m = 0; m < s.members.size(); ++m) {
    if (output_arg[m] < 0) continue;
    const ElementwiseSignature& sig = s.members[m].signature;
    const std::string k = std::to_string(output_arg[m]);
    maps += std::string(outs.empty() ? "" : ", ") + operandIndexingMap(s.rank, sig.inner[0]);
    outs += std::string(outs.empty() ? "" : ", ") + "%s" + k;
    out_types += std::string(out_types.empty() ? "" : ", ") + types[output_arg[m]];
    block_args += "%out" + k + ": " + storageType(sig.output).mlir + ", ";
  }
  block_args.resize(block_args.size() - 2); // the last ", " (check(): an output exists)
  for (size_t e = 0; e < s.externals.size(); ++e)
    if (s.externals[e].read_through_member >= 0)
      external_value[e] = {"%out" + std::to_string(output_arg[s.externals[e].read_through_member]),
                           storageType(s.externals[e].dtype)};

  // Each member's value, as stored in memory.
  std::vector<Value> stored;
  for (size_t m = 0; m < s.members.size(); ++m)
    stored.push_back(lowerFusedMember(body, s.members[m], params[m], stored, external_value));
  std::string yields, yield_types;
  for (size_t m = 0; m < s.members.size(); ++m) {
    if (output_arg[m] < 0) continue;
    yields += std::string(yields.empty() ? "" : ", ") + stored[m].name;
    yield_types += std::string(yield_types.empty() ? "" : ", ") + stored[m].type.mlir;
  }

  std::string text = "module {\n";
  for (const std::string& declaration : scalars.declarations())
    text += "  " + declaration + "\n";
  for (const std::string& declaration : body.declarations())
    text += "  " + declaration + "\n";
  // No memref may alias a stored output (window_partition.h cuts a group where one would, and an
  // input that is an output's own memory is read through that output), so the kernel's memrefs
  // are declared free of aliasing (compiler.h, kNoAliasMemrefs): LLVM then vectorizes without a
  // runtime overlap check per pair of operands, which a long chain reading many numbers exceeds
  // (its vectorizer then keeps the scalar loop).
  text += "  func.func @kernel(" + arguments + ") attributes {passthrough = [\"" +
          std::string(kNoAliasMemrefs) + "\", \"" + std::string(kElementwiseKernel) + "\"]} {\n" +
          prologue + scalars.body();
  text += "    linalg.generic {indexing_maps = [" + maps + "], iterator_types = [" +
          parallelIterators(s.rank) + "]}\n";
  if (!ins.empty()) text += "        ins(" + ins + " : " + in_types + ")\n";
  text += "        outs(" + outs + " : " + out_types + ") {\n";
  text += "    ^bb0(" + block_args + "):\n" + body.body();
  text += "      linalg.yield " + yields + " : " + yield_types + "\n    }\n";
  text += "    return\n  }\n}\n";
  return text;
}

} // namespace torchneuron::fusion

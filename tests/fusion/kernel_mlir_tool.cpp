// Prints a registry op's kernel for FileCheck tests:
//   neuron_kernel_mlir <mlir|lowered|llvm> elementwise <op> <compute> <output> <rank> <inner...> --
//   <inputs...> [constants...] neuron_kernel_mlir <mlir|lowered|llvm> reduction <op> <compute>
//   <kept> <reduced> <output...> -- <inputs...> [constants <value>...] [column | blocked |
//   strided]
//     (column: column order, inputs contiguous in their innermost kept dimension; blocked:
//     blocked rows, the kept dimension between reduced ones; strided: row order, inputs strided
//     along the innermost reduced dimension)
//   neuron_kernel_mlir pipeline     (the lowering pipeline, for mlir-opt-19 --pass-pipeline)
//   neuron_kernel_mlir <mode> fused <rank> <member>...
//     a fused float32 kernel (fused_kernel.h); each member is op(src,...) with src x<k> (window
//     input k, contiguous), s<k> (a number, broadcast) or m<j> (member j's result); a trailing
//     ! stores the member's output. Example: mul(x0,s1) tanh(m0)!
//   neuron_kernel_mlir <mode> fused-reduction <op> <kept> <reduced> <input>... -- <member>...
//     a float32 reduction with its prologue (FusedReductionConsumer): each input is m<j> (member
//     j computes it), c (read from memory, contiguous) or b (broadcast); members as for fused.
//     Example: layer_norm 1 1 m0 c c -- add(x0,x1)
//     Members after a word `epilogue` are its epilogue (over every element for a row-wise op,
//     else over the kept dimensions), whose sources may also be o<k> (the reduction's output k).
//     Example: softmax 1 1 c -- epilogue mul(o0,s0) add(m0,x1)!
//     Members after a word `rows` are a reduction's row epilogue, over every element after the
//     kept one; their sources may also be k<j> (member j of the kept epilogue), broadcast.
//     Example: mean 1 1 m0 -- mul(x0,x0) epilogue add(o0,s1) rsqrt(m0) rows mul(x0,k1)!
//     A trailing `dead <k>` makes the reduction's output k dead (not passed, not stored).
// dtypes are c10 names (Float, BFloat16, Long, Bool, ...); inner classes c, b or s.

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusion/compiler.h"
#include "fusion/fused_kernel.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"

namespace {

using namespace torchneuron::fusion;

c10::ScalarType dtypeNamed(const std::string& name) {
  for (c10::ScalarType t : {c10::kBool, c10::kByte, c10::kChar, c10::kShort, c10::kInt, c10::kLong,
                            c10::kHalf, c10::kBFloat16, c10::kFloat, c10::kDouble})
    if (name == c10::toString(t)) return t;
  throw std::invalid_argument("unknown dtype " + name);
}

InnerStride innerNamed(const std::string& name) {
  if (name == "c") return InnerStride::kContiguous;
  if (name == "b") return InnerStride::kBroadcast;
  if (name == "s") return InnerStride::kStrided;
  throw std::invalid_argument("unknown stride class " + name + " (c, b or s)");
}

std::string emit(const std::string& mode, const std::string& mlir) {
  if (mode == "mlir") return mlir;
  if (mode == "lowered") return lowerToLLVMDialect(mlir);
  if (mode == "llvm") return optimizedLLVMIR(mlir, "neuron_kernel");
  throw std::invalid_argument("unknown mode " + mode + " (mlir, lowered or llvm)");
}

// The fused signature of `args[first]` (the rank) and the member specs after it.
FusedElementwiseSignature fusedSignature(const std::vector<std::string>& args, size_t first) {
  FusedElementwiseSignature fused;
  fused.rank = std::stoi(args.at(first));
  std::vector<std::string> external_names;
  for (size_t a = first + 1; a < args.size(); ++a) {
    std::string spec = args[a];
    FusedMember member;
    member.stored = !spec.empty() && spec.back() == '!';
    if (member.stored) spec.pop_back();
    const size_t open = spec.find('(');
    if (open == std::string::npos || spec.back() != ')')
      throw std::invalid_argument("member " + spec + " is not op(src,...)");
    ElementwiseSignature& s = member.signature;
    s.op = findElementwiseOp(spec.substr(0, open));
    if (!s.op) throw std::invalid_argument("no elementwise op " + spec.substr(0, open));
    s.rank = fused.rank;
    s.inner.push_back(InnerStride::kContiguous);
    std::string list = spec.substr(open + 1, spec.size() - open - 2) + ",";
    for (size_t start = 0, comma; (comma = list.find(',', start)) != std::string::npos;
         start = comma + 1) {
      const std::string source = list.substr(start, comma - start);
      s.inputs.push_back(c10::kFloat);
      if (source.at(0) == 'm' || source.at(0) == 'o' || source.at(0) == 'k') {
        const FusedSource::Kind kind = source.at(0) == 'm'   ? FusedSource::kMember
                                       : source.at(0) == 'o' ? FusedSource::kReductionOutput
                                                             : FusedSource::kKeptMember;
        member.sources.push_back({kind, std::stoi(source.substr(1))});
        s.inner.push_back(InnerStride::kContiguous);
        continue;
      }
      const InnerStride inner =
          source.at(0) == 's' ? InnerStride::kBroadcast : InnerStride::kContiguous;
      s.inner.push_back(inner);
      int index = -1;
      for (size_t e = 0; e < external_names.size(); ++e)
        if (external_names[e] == source) index = static_cast<int>(e);
      if (index < 0) {
        index = static_cast<int>(external_names.size());
        external_names.push_back(source);
        fused.externals.push_back({c10::kFloat, inner, -1});
      }
      member.sources.push_back({FusedSource::kExternal, index});
    }
    s.constants.assign(s.op->constants.size(), -1);
    s.present.assign(s.op->optional_operands.size(), true);
    fused.members.push_back(std::move(member));
  }
  return fused;
}

} // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 1 && args[0] == "pipeline") {
      std::cout << "builtin.module(" << kLoweringPipeline << ")";
      return 0;
    }
    if (args.size() < 4)
      throw std::invalid_argument("usage: see the comment in kernel_mlir_tool.cpp");
    const std::string mode = args[0], form = args[1], op = args[2];
    size_t i = 3;
    if (form == "elementwise") {
      ElementwiseSignature s;
      s.op = findElementwiseOp(op);
      if (!s.op) throw std::invalid_argument("no elementwise op " + op);
      s.compute = dtypeNamed(args.at(i++));
      s.output = dtypeNamed(args.at(i++));
      s.rank = std::stoi(args.at(i++));
      while (args.at(i) != "--")
        s.inner.push_back(innerNamed(args.at(i++)));
      ++i;
      for (size_t n = 0; n + 1 < s.inner.size(); ++n)
        s.inputs.push_back(dtypeNamed(args.at(i++)));
      while (i < args.size())
        s.constants.push_back(std::stoll(args.at(i++)));
      s.constants.resize(s.op->constants.size(), -1);
      s.present.assign(s.op->optional_operands.size(), true);
      std::cout << emit(mode, buildElementwiseKernel(s));
    } else if (form == "reduction") {
      ReductionSignature s;
      s.op = findReductionOp(op);
      if (!s.op) throw std::invalid_argument("no reduction " + op);
      s.compute = dtypeNamed(args.at(i++));
      s.kept_rank = std::stoi(args.at(i++));
      s.reduced_rank = std::stoi(args.at(i++));
      while (args.at(i) != "--")
        s.outputs.push_back(dtypeNamed(args.at(i++)));
      ++i;
      auto order = [&](size_t at) {
        return args.at(at) == "column" || args.at(at) == "blocked" || args.at(at) == "strided";
      };
      while (i < args.size() && !order(i) && args.at(i) != "constants")
        s.inputs.push_back(dtypeNamed(args.at(i++)));
      if (i < args.size() && args.at(i) == "constants")
        for (++i; i < args.size() && !order(i); ++i)
          s.constants.push_back(std::stoll(args.at(i)));
      s.inner.assign(s.outputs.size() + s.inputs.size(), InnerStride::kContiguous);
      // column: inputs contiguous along their innermost kept dim; blocked: that dim between
      // reduced ones.
      s.column_order = i < args.size() && args.at(i) == "column";
      s.blocked_rows = i < args.size() && args.at(i) == "blocked";
      if (i < args.size() && args.at(i) == "strided") // inputs strided along the innermost dim
        std::fill(s.inner.begin() + static_cast<std::ptrdiff_t>(s.outputs.size()), s.inner.end(),
                  InnerStride::kStrided);
      std::cout << emit(mode, buildReductionKernel(s));
    } else if (form == "fused") {
      std::cout << emit(mode, buildFusedElementwiseKernel(fusedSignature(args, i - 1)));
    } else if (form == "fused-reduction") {
      auto consumer = std::make_shared<FusedReductionConsumer>();
      ReductionSignature& r = consumer->reduction;
      r.op = findReductionOp(op);
      if (!r.op) throw std::invalid_argument("no reduction " + op);
      r.kept_rank = std::stoi(args.at(i++));
      r.reduced_rank = std::stoi(args.at(i++));
      r.outputs.assign(r.op->num_outputs, c10::kFloat);
      r.inner.assign(r.outputs.size(), InnerStride::kContiguous);
      for (; args.at(i) != "--"; ++i) {
        const std::string& input = args[i];
        r.inputs.push_back(c10::kFloat);
        consumer->input_members.push_back(input.at(0) == 'm' ? std::stoi(input.substr(1)) : -1);
        r.inner.push_back(input == "b" ? InnerStride::kBroadcast : InnerStride::kContiguous);
      }
      const auto dead =
          std::find(args.begin() + static_cast<std::ptrdiff_t>(i), args.end(), std::string("dead"));
      if (dead != args.end()) {
        consumer->dead_outputs = 1u << std::stoi(dead[1]);
        args.erase(dead, dead + 2);
      }
      const auto first = args.begin() + static_cast<std::ptrdiff_t>(i) + 1;
      const auto split = std::find(first, args.end(), std::string("epilogue"));
      const auto rows_split = std::find(split, args.end(), std::string("rows"));
      std::vector<std::string> members = {"1"}, epilogue = {"1"}, rows = {"1"};
      members.insert(members.end(), first, split);
      if (split != args.end()) epilogue.insert(epilogue.end(), split + 1, rows_split);
      if (rows_split != args.end()) rows.insert(rows.end(), rows_split + 1, args.end());
      FusedElementwiseSignature fused = fusedSignature(members, 0);
      const FusedElementwiseSignature after = fusedSignature(epilogue, 0);
      const FusedElementwiseSignature row_after = fusedSignature(rows, 0);
      consumer->epilogue = after.members;
      consumer->epilogue_externals = after.externals;
      consumer->row_epilogue = row_after.members;
      consumer->row_externals = row_after.externals;
      consumer->epilogue_over_rows = r.op->row_output;
      fused.consumer = consumer;
      std::cout << emit(mode, buildFusedElementwiseKernel(fused));
    } else {
      throw std::invalid_argument("unknown form " + form);
    }
  } catch (const std::exception& error) {
    std::cerr << "neuron_kernel_mlir: " << error.what() << "\n";
    return 2;
  }
  return 0;
}

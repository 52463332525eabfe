#include "fusion/kernel_builder.h"
#include "fusion/streaming_vector_width.h"

#include <c10/util/Exception.h>

#include "fusion/kernel_text.h"
#include "fusion/op_registry.h"
#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {

int kernelArgumentSlots(const ElementwiseSignature& s) {
  int slots = static_cast<int>(s.op->params.size());
  for (size_t i = 0; i < s.inner.size(); ++i)
    if (i == 0 || static_cast<int>(i) - 1 != s.aliased_input)
      slots += 3 + 2 * operandRank(s.rank, s.inner[i]);
  return slots;
}

std::string buildElementwiseKernel(const ElementwiseSignature& s) {
  const ElementwiseOp& op = *s.op;
  TORCH_INTERNAL_ASSERT(s.inner.size() == s.inputs.size() + 1, "[fusion] stride classes for ",
                        s.inner.size(), " operands, expected ", s.inputs.size() + 1);
  TORCH_INTERNAL_ASSERT(s.inner[0] != InnerStride::kBroadcast, "[fusion] a broadcast output");
  const std::vector<const OperandSpec*> specs = presentOperands(s);
  const ElementType compute = computeType(s.compute);
  const ElementType param_type = compute.isFloat() ? ElementType{NumberKind::kFloat, 64, "f64"}
                                                   : ElementType{NumberKind::kSigned, 64, "i64"};

  TORCH_INTERNAL_ASSERT(s.aliased_input < 0 || s.inputs[s.aliased_input] == s.output,
                        "[fusion] an aliased input must have the output's dtype");
  // Operands with a memref of their own: the output (0) and each input i (i + 1) but the
  // aliased one, which is read through the output.
  std::vector<size_t> memrefs{0};
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (static_cast<int>(i) != s.aliased_input) memrefs.push_back(i + 1);
  std::vector<std::string> types{operandMemrefType(s.rank, storageType(s.output).mlir, s.inner[0])};
  for (size_t i = 0; i < s.inputs.size(); ++i)
    types.push_back(operandMemrefType(s.rank, storageType(s.inputs[i]).mlir, s.inner[i + 1]));

  std::string arguments;
  for (size_t i : memrefs)
    arguments += "%a" + std::to_string(i) + ": " + types[i] + ", ";
  for (size_t i = 0; i < op.params.size(); ++i)
    arguments += "%p" + std::to_string(i) + ": " + param_type.mlir + ", ";
  arguments += "%begin: index, %end: index";

  std::string prologue = rangePrologue(s.rank, types[0]);
  for (size_t i : memrefs)
    prologue += rangeView(std::to_string(i), types[i], operandRank(s.rank, s.inner[i]));
  // A 0-dim input of a loop (a Python number, a 0-dim tensor) is loaded once, before it, and the
  // body reads the value (%in<i>, as a block argument would be named): read inside the loop, it
  // is a load LLVM cannot hoist past the output's stores without proving that they never write
  // it, and the JIT left such loops scalar or 4 lanes wide, at the float64 a number converts
  // from (`x / 1.5`, `buf.mul_(momentum)`: 1.2x-1.9x ATen's time on 64K-1M elements,
  // bench/scalar_operands.py). No store of the loop can change the value: a 0-dim input inside
  // the output's memory is a partial overlap, which the routing point rejects as ATen does, and
  // a size-1 view of the output expanded over it (ATen's TOO_HARD) goes to the CPU
  // (device/elementwise_plan.cpp).
  auto hoisted = [&](size_t i) { return s.rank >= 1 && operandRank(s.rank, s.inner[i]) == 0; };
  for (size_t i : memrefs)
    if (i > 0 && hoisted(i))
      prologue += "    %in" + std::to_string(i - 1) + " = memref.load %s" + std::to_string(i) +
                  "[] : " + types[i] + "\n";

  // Scalars convert to the compute type once, outside the loop.
  ScalarEmitter scalars("    ", "q");
  std::vector<Value> params;
  for (size_t i = 0; i < op.params.size(); ++i)
    params.push_back(scalars.convert({"%p" + std::to_string(i), param_type}, compute));

  ScalarEmitter body("      ", "v");
  LoweringContext context{body,
                          compute,
                          storageType(s.compute),
                          {},
                          params,
                          std::vector<int64_t>(s.constants.begin(), s.constants.end()),
                          std::vector<bool>(s.present.begin(), s.present.end())};
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const std::string name =
        static_cast<int>(i) == s.aliased_input ? "%out" : "%in" + std::to_string(i);
    const Value loaded{name, storageType(s.inputs[i])};
    const c10::ScalarType common = specs[i]->promotes ? s.compute : s.inputs[i];
    // As ATen's TensorIterator: an input is cast to the common dtype first (a 0-dim float32
    // operand of a bfloat16 op rounds to bfloat16), then widened to the compute type.
    context.operands.push_back(
        body.convert(body.convert(loaded, storageType(common)), computeType(common)));
  }
  const Value stored = storeElementwiseResult(body, op.lower(context), s.compute, s.output);

  std::string maps, iterators, ins, in_types, block_args;
  for (size_t k = 1; k < memrefs.size(); ++k) {
    const size_t i = memrefs[k];
    if (hoisted(i)) continue;
    maps += operandIndexingMap(s.rank, s.inner[i]) + ", ";
    ins += std::string(ins.empty() ? "" : ", ") + "%s" + std::to_string(i);
    in_types += std::string(in_types.empty() ? "" : ", ") + types[i];
    block_args += "%in" + std::to_string(i - 1) + ": " + storageType(s.inputs[i - 1]).mlir + ", ";
  }
  maps += operandIndexingMap(s.rank, s.inner[0]); // linalg lists ins before outs
  iterators = parallelIterators(s.rank);
  block_args += "%out: " + storageType(s.output).mlir;

  std::string text = "module {\n";
  for (const std::string& declaration : scalars.declarations())
    text += "  " + declaration + "\n";
  for (const std::string& declaration : body.declarations())
    text += "  " + declaration + "\n";
  text += "  func.func @kernel(" + arguments + ") attributes {passthrough = [\"" +
          std::string(kElementwiseKernel) + "\"]} {\n" + prologue + scalars.body();
  text +=
      "    linalg.generic {indexing_maps = [" + maps + "], iterator_types = [" + iterators + "]}\n";
  if (!ins.empty()) text += "        ins(" + ins + " : " + in_types + ")\n";
  text += "        outs(%s0 : " + types[0] + ") {\n";
  text += "    ^bb0(" + block_args + "):\n" + body.body();
  text += "      linalg.yield " + stored.name + " : " + stored.type.mlir + "\n    }\n";
  text += "    return\n  }\n}\n";
  return text;
}

} // namespace torchneuron::fusion

#include "fusion/kernel_text.h"

#include <c10/util/Exception.h>

#include "fusion/memref_type.h"
#include "fusion/op_registry.h"

namespace torchneuron::fusion {
namespace {

std::string dimList(int count) {
  std::string dims;
  for (int d = 0; d < count; ++d)
    dims += (d ? ", d" : "d") + std::to_string(d);
  return dims;
}

} // namespace

std::string operandMemrefType(int rank, const std::string& element, InnerStride inner) {
  return stridedMemrefType(operandRank(rank, inner), element, inner);
}

std::string operandIndexingMap(int rank, InnerStride inner) {
  return "affine_map<(" + dimList(rank) + ") -> (" + dimList(operandRank(rank, inner)) + ")>";
}

std::string rangeView(const std::string& name, const std::string& type, int dims) {
  if (dims == 0)
    return "    %s" + name + " = memref.cast %a" + name + " : " + type + " to " + type + "\n";
  std::string offsets = "%begin", sizes = "%n", strides = "1";
  for (int d = 1; d < dims; ++d) {
    offsets += ", 0";
    sizes += ", %d" + std::to_string(d);
    strides += ", 1";
  }
  return "    %s" + name + " = memref.subview %a" + name + "[" + offsets + "] [" + sizes + "] [" +
         strides + "] : " + type + " to " + type + "\n";
}

std::string rangePrologue(int rank, const std::string& output_type) {
  std::string prologue = "    %n = arith.subi %end, %begin : index\n";
  for (int d = 1; d < rank; ++d) {
    const std::string index = std::to_string(d);
    prologue += "    %c" + index + " = arith.constant " + index + " : index\n";
    prologue += "    %d" + index + " = memref.dim %a0, %c" + index + " : " + output_type + "\n";
  }
  return prologue;
}

std::string parallelIterators(int rank) {
  std::string iterators;
  for (int d = 0; d < rank; ++d)
    iterators += std::string(d ? ", " : "") + "\"parallel\"";
  return iterators;
}

std::vector<const OperandSpec*> presentOperands(const ElementwiseSignature& s) {
  const ElementwiseOp& op = *s.op;
  std::vector<const OperandSpec*> specs;
  size_t optional = 0;
  for (const OperandSpec& spec : op.operands) {
    bool is_optional = false;
    for (const std::string& name : op.optional_operands)
      is_optional |= name == spec.arg;
    if (is_optional && !s.present[optional++]) continue;
    specs.push_back(&spec);
  }
  TORCH_INTERNAL_ASSERT(specs.size() == s.inputs.size(), "[fusion] ", op.name, ": ",
                        s.inputs.size(), " inputs for ", specs.size(), " operands");
  return specs;
}

} // namespace torchneuron::fusion

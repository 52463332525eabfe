#pragma once
// Binds an ATen overload's schema to a registry op: which argument is an operand, a run-time
// scalar, a codegen constant or the output. An overload binds only if every argument has a
// role, so an overload the registry does not describe stays with the CPU fallback.

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Scalar.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include <string>
#include <vector>

#include "device/metrics.h"
#include "fusion/op_registry.h"

namespace torchneuron {

enum class ArgumentRole : uint8_t { kOperand, kParam, kConstant, kOutput, kOperandAndOutput };

struct BoundArgument {
  ArgumentRole role;
  int index; // into the op's operands, params or constants
};

struct NativeOpBinding {
  const fusion::ElementwiseOp* op = nullptr;
  std::string name;                     // "aten::add.Tensor", for metrics and messages
  std::vector<BoundArgument> arguments; // one per schema argument
  bool writes_output = false;           // in-place or out=: the output is an argument
  bool in_place = false;                // the output is `self`: operands broadcast to its shape
  bool casts_freely = false;            // copy_: any dtype converts to the output's
  // The output must have the result's dtype exactly ("Found dtype ... but expected ..."), from
  // the op's fusion::OutputDtypeRule and this overload's argument types.
  bool output_dtype_exact = false;
  LaunchCounter* launches = nullptr; // compiled launches of this overload
};

c10::optional<NativeOpBinding> bindSchema(const c10::FunctionSchema& schema,
                                          const fusion::ElementwiseOp& op);

// The call's arguments sorted into the registry op's roles.
struct BoundCall {
  c10::SmallVector<at::Tensor, 4> operands; // present operands, in the op's order
  c10::SmallVector<const fusion::OperandSpec*, 4> specs;
  c10::SmallVector<c10::optional<c10::Scalar>, 4> scalars; // per operand: the Scalar given
  std::vector<bool> present;                               // per optional operand
  c10::SmallVector<c10::Scalar, 4> params;
  std::vector<int64_t> constants;
  at::Tensor output; // the written argument, if any
};

// Sorts an ATen call's arguments (`args`, one per schema argument) into `call`; false when an
// argument is outside what kernels handle (a complex or NaN number, a string constant the
// lowering does not know, clamp() without bounds: the CPU decides and raises).
bool bindCall(const NativeOpBinding& binding, c10::ArrayRef<c10::IValue> args, BoundCall& call);

// The registry op an ATen operator name belongs to ("aten::add_" -> add), or nullptr.
const fusion::ElementwiseOp* registryOpFor(const std::string& aten_name);

} // namespace torchneuron

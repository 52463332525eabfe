#pragma once
// The op registry (DESIGN.md decision 1): the only list of ops the device runs natively. Each
// entry is an ATen op's shape/dtype rule (which arguments are operands, how their dtypes
// promote, which dtypes it supports) and its lowering (MLIR for one element). Eager dispatch,
// and later the tracer and the fusion partitioner, consult this registry and nothing else.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {

// How the dtype an op computes in, and its result dtype, follow from its operands' dtypes
// (PyTorch's ELEMENTWISE_TYPE_PROMOTION_KIND).
enum class TypePromotion {
  kDefault,     // result_type of the promoting operands
  kIntToFloat,  // same, but integer and bool promote to the default float dtype
  kAlwaysBool,  // computes in the promoted dtype, the result is bool
};

// Which compute dtypes an op supports; others fall back to the CPU.
enum ComputeClass : uint8_t { kFloats = 1, kIntegers = 2, kBools = 4, kAllClasses = 7 };

// A tensor (or Scalar, treated as a 0-dim tensor) argument of the ATen op, by schema name.
struct OperandSpec {
  std::string arg;
  bool promotes = true;  // false: does not take part in type promotion (a mask, a condition)
  bool bool_only = false;  // the op requires a bool tensor here (else ATen's error on the CPU)
  bool zero_dim_only = false;  // the op requires a 0-dim tensor here (a fill value)
};

// A Scalar argument passed to the kernel at run time (never part of the kernel key), converted
// to the compute dtype; `fallback` is used when an optional argument is None.
struct ParamSpec {
  std::string arg;
  double fallback = 0;
};

// An argument the code depends on (a rounding mode, a flag): part of the kernel key. String
// arguments map to their index in `choices` (None is -1); bool and int arguments to their value.
struct ConstantSpec {
  std::string arg;
  std::vector<std::string> choices;
};

// What a lowering sees: operand and param values converted to the compute type (operands that
// do not promote keep their own compute type), and the constants' values.
struct LoweringContext {
  ScalarEmitter& emit;
  ElementType compute;
  std::vector<Value> operands;
  std::vector<Value> params;
  std::vector<int64_t> constants;
  // Presence of each optional operand, in `optional_operands` order (absent ones are not in
  // `operands`).
  std::vector<bool> present;
};

using ElementwiseLowering = std::function<Value(LoweringContext&)>;

struct ElementwiseOp {
  std::string name;  // ATen base name: "add" covers add.Tensor, add.Scalar, add_.Tensor, add.out
  std::vector<OperandSpec> operands;
  std::vector<ParamSpec> params;
  std::vector<ConstantSpec> constants;
  TypePromotion promotion = TypePromotion::kDefault;
  uint8_t compute_classes = kAllClasses;
  ElementwiseLowering lower;
  // Optional operand args (Tensor? or Scalar?) by name; absent ones change the kernel key.
  std::vector<std::string> optional_operands = {};
};

// The op with this ATen base name (no "aten::", no trailing "_"), or nullptr.
const ElementwiseOp* findElementwiseOp(const std::string& name);

// Every elementwise op, in registration order.
const std::vector<ElementwiseOp>& elementwiseOps();

// Registration hooks, one per family file (unary_ops.cpp, binary_ops.cpp, activation_ops.cpp).
void addUnaryOps(std::vector<ElementwiseOp>& ops);
void addBinaryOps(std::vector<ElementwiseOp>& ops);
void addActivationOps(std::vector<ElementwiseOp>& ops);

}  // namespace torchneuron::fusion

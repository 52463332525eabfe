#pragma once
// The op registry (DESIGN.md decision 1): the only list of ops the device runs natively. Each
// entry is an ATen op's shape/dtype rule (which arguments are operands, how their dtypes
// promote, which dtypes it supports) and its lowering (MLIR for one element). Eager dispatch,
// and later the tracer and the fusion partitioner, consult this registry and nothing else.

#include <c10/core/Scalar.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {

// How the dtype an op computes in, and its result dtype, follow from its operands' dtypes
// (PyTorch's ELEMENTWISE_TYPE_PROMOTION_KIND).
enum class TypePromotion {
  kDefault,    // result_type of the promoting operands
  kIntToFloat, // same, but integer and bool promote to the default float dtype
  kAlwaysBool, // computes in the promoted dtype, the result is bool
};

// Which compute dtypes an op supports; others fall back to the CPU.
enum ComputeClass : uint8_t { kFloats = 1, kIntegers = 2, kBools = 4, kAllClasses = 7 };

// A tensor (or Scalar, treated as a 0-dim tensor) argument of the ATen op, by schema name.
struct OperandSpec {
  std::string arg;
  bool promotes = true;       // false: does not take part in type promotion (a mask, a condition)
  bool bool_only = false;     // the op requires a bool tensor here (else ATen's error on the CPU)
  bool zero_dim_only = false; // the op requires a 0-dim tensor here (a fill value)
  // A Python number given here is converted by ATen with Scalar::to<T>(), which raises when it
  // overflows the dtype (fill values, clamp bounds), not cast like a wrapped number.
  bool checked_scalar = false;
  // ...except where the compute dtype is float32 or float64: ATen's kernel takes the number with
  // Scalar::to<double>() there (pow's exponent: float32 `x.pow(1e39)` is x ** inf, not an error).
  bool unchecked_for_float32_and_float64 = false;
  // ...checked against the compute dtype's opmath type (float for half and bfloat16), as
  // Scalar::to<opmath_t>() does (lerp's weight: 1e6 is a bfloat16 weight, 1e39 an error).
  bool checked_in_opmath = false;
};

// A Scalar argument passed to the kernel at run time (never part of the kernel key), converted
// to the compute dtype; `fallback` is used when an optional argument is None.
struct ParamSpec {
  std::string arg;
  double fallback = 0;
  // ATen's kernel takes the number as the compute dtype's opmath type (float for half and
  // bfloat16) with Scalar::to<opmath_t>(), so it must fit that, not the dtype: bfloat16
  // leaky_relu(x, 3.395e38) computes on the CPU. Otherwise as the compute dtype.
  bool checked_in_opmath = false;
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
  // The compute dtype as stored (ATen's scalar_t): bf16 bits or f16 where `compute` is f32.
  ElementType stored;
  std::vector<Value> operands;
  std::vector<Value> params;
  std::vector<int64_t> constants;
  // Presence of each optional operand, in `optional_operands` order (absent ones are not in
  // `operands`).
  std::vector<bool> present;

  // `value` (of type `compute`) rounded to the stored dtype and widened again: a step ATen takes
  // in the 16-bit dtype itself (c10::Half or Vectorized<BFloat16> arithmetic rounds each
  // operation). `value` itself where the stored and compute types are one.
  Value roundedToStored(const Value& value) {
    return stored.mlir == compute.mlir ? value : emit.roundThrough(value, stored);
  }
};

using ElementwiseLowering = std::function<Value(LoweringContext&)>;

// Whether ATen casts the result into an out= tensor of another dtype or refuses it ("Found dtype
// Double but expected Float"). It refuses for the overloads it builds with TensorIterator's
// check_all_same_dtype: its unary-op build (neg, floor, sign, the activations, clamp with
// numbers, pow with a number exponent) and lerp with a weight tensor.
enum class OutputDtypeRule : uint8_t {
  kCasts,
  kExact,
  kExactWithNumber, // exact in the overloads where `exact_dtype_operand` is a Scalar
  kExactWithTensor, // exact in the overloads where `exact_dtype_operand` is a Tensor
};

struct ElementwiseOp {
  std::string name; // ATen base name: "add" covers add.Tensor, add.Scalar, add_.Tensor, add.out
  std::vector<OperandSpec> operands;
  std::vector<ParamSpec> params;
  std::vector<ConstantSpec> constants;
  TypePromotion promotion = TypePromotion::kDefault;
  // kIntToFloat ops whose integer operands keep their dtype when this constant (an index into
  // `constants`) is given: div with a rounding_mode. -1: none.
  int integral_with_constant = -1;
  uint8_t compute_classes = kAllClasses;
  ElementwiseLowering lower;
  // Optional operand args (Tensor? or Scalar?) by name; absent ones change the kernel key.
  std::vector<std::string> optional_operands = {};
  // Values of one scalar operand (a Python number or 0-dim CPU tensor) for which the lowering
  // has exact faster code, as ATen's kernels do (pow's exponent 2 is x * x): the value's index
  // in `special_values` is appended to the constants (-1 for other values and for tensors), so
  // only these values compile kernels of their own. Float and integer compute.
  std::string specialized_operand = {};
  std::vector<double> special_values = {};
  // Whether the kernel gives ATen's CPU result for this compute dtype and these constants; a
  // call it does not runs on the CPU fallback (the registry does not claim that dtype). Null:
  // every dtype of `compute_classes`.
  std::function<bool(c10::ScalarType, const std::vector<int64_t>& constants)> matches_cpu = {};
  // ATen refuses a bool operand before any other check (sub and rsub: "Subtraction, the `-`
  // operator, with a bool tensor is not supported"), even where the result type is not bool.
  bool refuses_bool_operands = false;
  // ATen computes this op as add with -alpha (sub, rsub: TORCH_IMPL_FUNC(sub_out)): the number
  // it range-checks and converts is -alpha, negated as an int64 where alpha is one.
  bool negates_alpha = false;
  OutputDtypeRule output_dtype = OutputDtypeRule::kCasts;
  std::string exact_dtype_operand = {}; // for kExactWithNumber and kExactWithTensor
  // Operands that ATen requires to have self's dtype when they are tensors, checked in this order
  // before anything else ("expected dtype double for `end` but got dtype float": lerp).
  std::vector<std::string> same_dtype_as_self = {};
  // ATen's own checks of the call's dtypes and numbers that nothing above makes (TORCH_CHECKs in
  // its kernel or meta function), raising ATen's error before anything is planned: the present
  // operands' dtypes (in `operands` order), `params` and `constants` as bound. Replays of a
  // captured call skip planning, but their dtypes and numbers equal the checked call's (the
  // fingerprint holds them). Null: none.
  std::function<void(c10::ArrayRef<c10::ScalarType> dtypes, c10::ArrayRef<c10::Scalar> params,
                     const std::vector<int64_t>& constants)>
      aten_checks = {};
  // ATen writes this op's output without its internal-overlap check (fill_, zero_, masked_fill_
  // into an expanded tensor): such an output goes to the CPU, which writes it as ATen does,
  // instead of raising the check's error.
  bool writes_overlapping_outputs = false;
  // ATen builds this op's iterator without any memory-overlap check (threshold and its backward:
  // "threshold is idempotent"): an output that overlaps itself or an input partially goes to the
  // CPU, which writes it as ATen does, instead of raising either check's error.
  bool skips_overlap_checks = false;
};

// `op` as ATen builds it when it builds it as a unary op (OutputDtypeRule::kExact): an out= must
// have the input's dtype.
inline ElementwiseOp sameDtype(ElementwiseOp op) {
  op.output_dtype = OutputDtypeRule::kExact;
  return op;
}

// What a reduction lowering sees for one output row: converted params, the number of reduced
// elements, and the values each finished pass produced.
struct ReduceContext {
  ScalarEmitter& emit;
  ElementType compute;       // inputs are converted to this type
  ElementType wide;          // f64 for floats, i64 for integers and bool: sums and products
  std::vector<Value> params; // run-time scalars, f64 (float compute) or i64
  Value count;               // reduced elements, as `wide`
  std::vector<int64_t> constants;
  std::vector<std::vector<Value>> results; // accumulators after each finished pass
  std::vector<Value> row;                  // a row-wise op's finish_row values, for its finish
  // The kernel walks columns innermost (ReductionSignature::column_order): accumulators live in
  // per-column buffers, where LLVM vectorizes across columns with no horizontal step.
  bool column_order = false;
};

// How a reduction's result dtype follows from its call (ATen's rule for the op). `dtype` is the
// call's dtype= argument, `out` the dtype of its first out= tensor.
enum class ReductionResult : uint8_t {
  kAccumulated,      // dtype, else out, else int64 for integer and bool inputs, else the input's;
                     // computes in it; a bool result runs on the CPU (sum, prod)
  kRequestedOrOut,   // dtype, else out, else the input's; computes in it (mean)
  kRequested,        // dtype, else the input's; computes in it (vector norms)
  kFloating,         // the input's when floating, else the default float dtype (logsumexp)
  kInput,            // the input's (amax, var, softmax)
  kIndices,          // int64 indices, computing in the input's dtype (argmax)
  kValuesAndIndices, // the input's and int64 indices (max.dim)
  kTruth,            // bool, or uint8 for a uint8 input (all, any)
};

// A run-time scalar of a reduction read from the call's arguments by name.
struct ReductionParamSpec {
  std::vector<std::string> args; // the first one given is used (a bool gives 1 or 0)
  double fallback = 0;           // when none is given
  // Values the lowering has code of its own for (a norm's order): the value's index here, or
  // size() for any other value, is the reduction's constant (part of the kernel key).
  std::vector<double> special_values = {};
  // When not empty: the only values for which reducing no elements is computed here (the 2-, 1-
  // and 0-norms of nothing are 0). Any other value leaves an empty reduction to ATen, whose
  // answers differ by op: linalg.vector_norm raises for the inf, -inf and negative orders, norm
  // returns 0 for negative p.
  std::vector<double> reduces_nothing_for = {};
  // ATen's CPU kernel takes the value as a float, whatever the dtype (a vector norm's order:
  // 2.1 is 2.0999999 for float64 too, and an order beyond float's range is infinite).
  bool rounded_to_float = false;
};

// The shape/dtype rule of a reduction: which ATen overloads run it and which of their calls the
// kernels cover (others run on the CPU fallback, which raises ATen's errors). The device reads
// this and nothing else about an op's name.
struct ReductionRule {
  std::vector<std::string> overloads = {};    // ATen overloads ("sum.dim_IntList"); none: internal
  std::vector<std::string> inputs = {"self"}; // schema names of the inputs, in kernel order; all
                                              // of one shape and dtype
  ReductionResult result = ReductionResult::kInput;
  bool floats_only = false; // a non-floating input or result runs on the CPU
  bool bool_input = true;   // false: a bool input runs on the CPU (ATen has no kernel; it raises)
  // Half and bfloat16 give ATen's result exactly (extremes, all/any). ATen rounds partial results
  // of the others to the narrow dtype where the kernels accumulate wide and round once, so those
  // dtypes (as input or compute dtype) run on the CPU.
  bool exact_in_half = false;
  bool needs_elements = false; // reducing no elements is ATen's error (the max of nothing)
  std::vector<ReductionParamSpec> params = {}; // ReductionOp::num_params of them
  std::string false_only = {};                 // a bool argument the kernels support only as false
  std::string input_dtype = {}; // a dtype argument that must be the input's (else the CPU)
};

// A reduction over some dimensions of its inputs (all of the same shape), in passes over each
// output row: each pass folds every element into accumulators; then `finish` yields the outputs
// of the row (a reduction), or, for a row-wise op like softmax, one output element per input
// element.
struct ReductionOp {
  std::string name; // registry name: "sum", "amax", "softmax", ...
  int passes = 1;
  int num_outputs = 1;
  bool row_output = false;  // outputs have the input's shape (softmax), not the reduced shape
  bool needs_index = false; // combine gets the element's linear index within the row (i64)
  // With needs_index: the index is instead the element's offset in elements from input 0's
  // first element, through input 0's strides (a pooling window's element, whose place in the
  // input the op derives from it). Input 0 must be read from memory: no prologue fusion.
  bool index_is_input_offset = false;
  // The kernel has its window's shape as constants, which the plan appends to the signature's
  // constants after the op's own: the reduced dimensions' sizes, then input 0's stride along the
  // innermost kept dimension (the step from one window to the next; every input must have it). A
  // pooling window of fixed size and step unrolls into straight-line code, and LLVM vectorizes
  // across windows (strided loads of a known step), at one kernel per window shape.
  bool static_window = false;
  int num_params = 0; // run-time scalars (a correction, an order p, an epsilon)
  // Long rows split across threads (device/reduction_split.h): a reduction with one kept row of
  // many elements runs this op over equal chunks of the row into partial results, then the
  // registry op `partials(constants)` names, with its constants, over those, so that every thread
  // takes chunks. Null, or an empty name for these constants: never split (the result is not a
  // function of the chunks' results: variance, indices). `widen_partials`: floating partials are
  // kept in float64 (sums, products and norms, which accumulate in float64 within a chunk too).
  // A combining op with run-time params must be the op itself: it gets the same params.
  struct Partials {
    std::string op; // "": not split
    std::vector<int64_t> constants;
  };
  std::function<Partials(const std::vector<int64_t>& constants)> partials;
  bool widen_partials = false;
  // Every pass's accumulators are sums in `wide` from 0, and `combine` adds to each a value of
  // the element alone (no params, count or index; computed in ReduceContext::wide): a float32
  // row may then be summed in float32 blocks whose sums add in f64 (sum, mean, layer norm's
  // backward; reduction_kernel_builder.cpp, sumsInBlocks and emitColumnBlocks).
  bool sums_in_blocks = false;
  ReductionRule rule;
  std::function<std::vector<Value>(ReduceContext&, int pass)> init;
  std::function<std::vector<Value>(ReduceContext&, int pass, const std::vector<Value>& accumulators,
                                   const std::vector<Value>& inputs, const Value& index)>
      combine;
  // The results of pass `pass` that later passes and `finish` read (ReduceContext::results),
  // made from its accumulators once the pass has run. Null: the accumulators themselves.
  std::function<std::vector<Value>(ReduceContext&, int pass,
                                   const std::vector<Value>& accumulators)>
      pass_results;
  // Reductions: `inputs` is empty and the result is the row's outputs. Row-wise ops: `inputs`
  // are one element's inputs and the result is its output element.
  std::function<std::vector<Value>(ReduceContext&, const std::vector<Value>& inputs)> finish;

  // Row-wise ops with per-row results too (layer norm's mean and rstd): the first `row_stats`
  // outputs have the reduced shape; `finish_row` computes them once per row, after the passes
  // and before the element writes, and `finish` finds them in ReduceContext::row.
  int row_stats = 0;
  std::function<std::vector<Value>(ReduceContext&)> finish_row;

  // Whether output `o` has an element per input element (a row-wise op's, but its row_stats).
  bool elementOutput(size_t o) const { return row_output && static_cast<int>(o) >= row_stats; }

  // Row-wise ops whose write pass would recompute a pass's per-element value (softmax's
  // exp(x - max)): during pass `store_pass` that value (`row_value`) is stored into output 0 and
  // `combine_stored` gets it in place of the inputs; the write pass then reads output 0 back and
  // `finish_stored` rescales it. One exp per element instead of two, as ATen does. Used only
  // when output 0 is stored in the compute type: a narrower store would round the value the
  // write pass reads, so half and bfloat16 outputs keep the two-exp form.
  int store_pass = -1;
  std::function<Value(ReduceContext&, const std::vector<Value>& inputs)> row_value;
  std::function<std::vector<Value>(ReduceContext&, const std::vector<Value>& accumulators,
                                   const Value& stored)>
      combine_stored;
  std::function<std::vector<Value>(ReduceContext&, const Value& stored)> finish_stored;
};

const ReductionOp* findReductionOp(const std::string& name);
// Every reduction and row-wise op, in registration order.
const std::vector<ReductionOp>& reductionOps();
void addReductionOps(std::vector<ReductionOp>& ops);
// The rule of a registry reduction that no ATen overload binds (its device code launches it by
// name: layer and batch norm, the losses), float and double only.
ReductionRule internalFloatRule();
// The pointwise losses' reductions and row-wise ops (loss_ops.cpp; device/compiled_losses.cpp).
void addLossOps(std::vector<ReductionOp>& ops);

// The op with this ATen base name (no "aten::", no trailing "_"), or nullptr.
const ElementwiseOp* findElementwiseOp(const std::string& name);

// Every elementwise op, in registration order.
const std::vector<ElementwiseOp>& elementwiseOps();

// ElementwiseOp::matches_cpu for ops whose bfloat16 kernels in ATen round every step
// (Vectorized<BFloat16> arithmetic, c10's bfloat16 math): their bfloat16 calls run ATen's kernel.
bool notBFloat16(c10::ScalarType dtype, const std::vector<int64_t>& constants);

// Registration hooks, one per family file (unary_ops.cpp, binary_ops.cpp, activation_ops.cpp).
void addUnaryOps(std::vector<ElementwiseOp>& ops);
void addBinaryOps(std::vector<ElementwiseOp>& ops);
void addActivationOps(std::vector<ElementwiseOp>& ops);

} // namespace torchneuron::fusion

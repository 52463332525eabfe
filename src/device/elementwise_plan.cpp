#include "device/elementwise_plan.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TypeProperties.h>

#include <algorithm>
#include <limits>

#include "device/device.h"
#include "device/kernel_operand.h"
#include "device/plan_replay.h"
#include "launcher/kernel_abi.h"

namespace torchneuron {
namespace {

using fusion::ElementwiseOp;

// The value of a CPU 0-dim tensor (a Python number arrives as a wrapped one).
c10::optional<double> cpuScalarValue(const at::Tensor& t) {
  if (!t.device().is_cpu() || t.dim() != 0) return c10::nullopt;
  switch (t.scalar_type()) {
  case at::kDouble:
    return *t.data_ptr<double>();
  case at::kLong:
    return static_cast<double>(*t.data_ptr<int64_t>());
  default:
    return t.item<double>();
  }
}

// The constant of an op with special values (ElementwiseOp::special_values): the index of the
// specialized operand's value among them, or -1. Only a number specializes (pow.Tensor_Scalar,
// whose kernel ATen specializes so): a 0-dim tensor exponent is pow.Tensor_Tensor, which ATen
// computes with pow itself (bfloat16 `x ** torch.tensor(3.)` rounds once; the cube's rounded
// square was an ulp off).
int64_t specialValueIndex(const ElementwiseOp& op, const BoundCall& call, at::ScalarType common) {
  if (!at::isFloatingType(common) && !at::isIntegralType(common, /*includeBool=*/false)) return -1;
  for (size_t i = 0; i < call.operands.size(); ++i) {
    if (call.specs[i]->arg != op.specialized_operand) continue;
    if (!call.scalars[i]) return -1;
    const c10::optional<double> value = cpuScalarValue(call.operands[i]);
    if (!value) return -1;
    const auto found = std::find(op.special_values.begin(), op.special_values.end(), *value);
    return found == op.special_values.end() ? -1 : found - op.special_values.begin();
  }
  return -1;
}

// Raises ATen's error ("value cannot be converted to type int8_t without overflow") when the
// number does not fit `dtype`, as Scalar::to<T>() does in ATen's kernels.
void checkScalarFits(const c10::Scalar& value, at::ScalarType dtype) {
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dtype, "scalar range",
                             [&] { (void)value.to<scalar_t>(); });
}

// -alpha as ATen's sub computes it (c10::Scalar's negation): an int64 wraps, so -INT64_MIN is
// INT64_MIN.
c10::Scalar negatedLikeAten(const c10::Scalar& alpha) {
  if (alpha.isIntegral(/*includeBool=*/false))
    return c10::Scalar(static_cast<int64_t>(0 - static_cast<uint64_t>(alpha.toLong())));
  return -alpha;
}

bool isNegatedAlpha(const ElementwiseOp& op, size_t i) {
  return op.negates_alpha && i < op.params.size() && op.params[i].arg == "alpha";
}

// The number ATen range-checks and converts for param `i` of the call (ElementwiseOp::
// negates_alpha: -alpha), and the one the kernel takes, which computes a - alpha * b for those
// ops: alpha itself, but where the negation wrapped (alpha INT64_MIN in a floating call is -2^63
// in ATen's sum, and the kernel's a - alpha * b needs +2^63 for it).
c10::Scalar checkedParam(const ElementwiseOp& op, const BoundCall& call, size_t i) {
  return isNegatedAlpha(op, i) ? negatedLikeAten(call.params[i]) : call.params[i];
}

c10::Scalar kernelParam(const ElementwiseOp& op, const BoundCall& call, size_t i) {
  const c10::Scalar& param = call.params[i];
  if (!isNegatedAlpha(op, i) || !param.isIntegral(/*includeBool=*/false) ||
      param.toLong() != std::numeric_limits<int64_t>::min())
    return param;
  return c10::Scalar(-static_cast<double>(std::numeric_limits<int64_t>::min()));
}

// Whether some value of dtype `from` may not fit `to` under Scalar::to<T>()'s check (false only
// where every value does: the same dtype, a wider one, bool on either side).
bool mayNotFit(at::ScalarType from, at::ScalarType to) {
  if (from == to || from == at::kBool || to == at::kBool) return false;
  const size_t from_size = c10::elementSize(from), to_size = c10::elementSize(to);
  if (at::isFloatingType(to)) {
    if (!at::isFloatingType(from)) return to == at::kHalf && from_size > 1; // 65504 at most
    return !(to_size > from_size || (from == at::kHalf && to == at::kBFloat16));
  }
  if (at::isFloatingType(from)) return true;
  if (from == at::kByte) return to_size == 1; // uint8 fits every wider integer
  return to == at::kByte || to_size <= from_size;
}

uint8_t computeClassOf(at::ScalarType dtype) {
  if (at::isFloatingType(dtype)) return fusion::kFloats;
  if (dtype == at::kBool) return fusion::kBools;
  return fusion::kIntegers;
}

// The compute dtype of the call (ATen's promotion, then the op's rule), or nullopt when the
// kernels do not cover its operands or dtypes. `device` is the written operand's, if any.
c10::optional<at::ScalarType> computeDtype(const ElementwiseOp& op, const BoundCall& call,
                                           const WrittenOperand* target,
                                           c10::optional<c10::Device>& device) {
  for (const std::string& name : op.same_dtype_as_self)
    for (size_t i = 1; i < call.operands.size(); ++i)
      if (call.specs[i]->arg == name && !call.scalars[i])
        TORCH_CHECK(call.operands[i].scalar_type() == call.operands[0].scalar_type(),
                    "expected dtype ", call.operands[0].dtype(), " for `", name, "` but got dtype ",
                    call.operands[i].dtype());
  at::native::ResultTypeState promotion;
  bool any_promoting = false;
  for (size_t i = 0; i < call.operands.size(); ++i) {
    const at::Tensor& t = call.operands[i];
    const fusion::OperandSpec& spec = *call.specs[i];
    if (!isKernelOperand(t)) return c10::nullopt;
    if (t.device().type() == kNeuronDeviceType) {
      if (device && *device != t.device()) return c10::nullopt;
      device = t.device();
    } else if (!(t.device().is_cpu() && t.dim() == 0)) {
      return c10::nullopt; // the fallback raises PyTorch's same-device error
    }
    if (spec.bool_only && t.scalar_type() != at::kBool) return c10::nullopt;
    if (spec.zero_dim_only && t.dim() != 0) return c10::nullopt;
    if (spec.promotes) {
      promotion = at::native::update_result_type_state(t, promotion);
      any_promoting = true;
    }
  }
  if (!device) return c10::nullopt;
  at::ScalarType common = any_promoting ? at::native::result_type(promotion)
                          : target      ? target->dtype
                                        : at::ScalarType::Undefined;
  if (common == at::ScalarType::Undefined) return c10::nullopt;
  const bool stays_integral =
      op.integral_with_constant >= 0 && call.constants[op.integral_with_constant] >= 0;
  if (op.promotion == fusion::TypePromotion::kIntToFloat && at::isIntegralType(common, true) &&
      !stays_integral)
    common = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (!fusion::isKernelDtype(common) || !(op.compute_classes & computeClassOf(common)))
    return c10::nullopt;
  if (op.matches_cpu) {
    // It sees the constants the signature will hold, the special value's index included.
    std::vector<int64_t> constants(call.constants.begin(), call.constants.end());
    if (!op.special_values.empty()) constants.push_back(specialValueIndex(op, call, common));
    if (!op.matches_cpu(common, constants)) return c10::nullopt;
  }
  // ATen's checks of an alpha (add, sub, rsub), with its errors: a bool alpha needs a bool
  // result, an integer result an integral alpha.
  for (size_t i = 0; i < call.params.size() && i < op.params.size(); ++i)
    if (op.params[i].arg == "alpha") at::native::alpha_check(common, call.params[i]);
  for (const c10::Scalar& param : call.params) {
    if (param.isComplex()) return c10::nullopt;
    if (!at::isFloatingType(common) && param.isFloatingPoint()) return c10::nullopt;
  }
  return common;
}

c10::optional<LaunchPlan> planCall(const NativeOpBinding& binding, const BoundCall& call,
                                   const WrittenOperand* target) {
  const ElementwiseOp& op = *binding.op;
  // ATen's sub_check, first, as its meta function runs it (a Python bool is a wrapped operand).
  if (op.refuses_bool_operands && call.operands.size() == 2)
    at::native::sub_check(call.operands[0], call.operands[1]);
  if (op.aten_checks) {
    c10::SmallVector<c10::ScalarType, 4> dtypes;
    for (const at::Tensor& t : call.operands)
      dtypes.push_back(t.scalar_type());
    op.aten_checks(dtypes, call.params, call.constants);
  }
  c10::optional<c10::Device> device;
  if (target) device = target->device;
  const c10::optional<at::ScalarType> computed = computeDtype(op, call, target, device);
  if (!computed) return c10::nullopt;
  const at::ScalarType common = *computed;
  const at::ScalarType result_dtype =
      op.promotion == fusion::TypePromotion::kAlwaysBool ? at::kBool : common;

  at::DimVector shape;
  for (size_t i = 0; i < call.operands.size(); ++i)
    shape = i == 0 ? at::DimVector(call.operands[0].sizes())
                   : at::infer_size_dimvector(shape, call.operands[i].sizes());
  c10::SmallVector<ViewGeometry, 5> views; // output first, then the operands
  for (const at::Tensor& t : call.operands)
    views.push_back(ViewGeometry::of(t));

  LaunchPlan plan;
  PlannedOutput& output = plan.outputs.emplace_back();
  output.device = *device;
  ViewGeometry written;
  if (target) {
    // TensorIterator's checks, with its messages, on the output as given: ATen makes them before
    // it computes the shape and resizes the output. An input that may share memory with the
    // output in a way they cannot judge (non-dense views) goes to the CPU, whose element order
    // then decides the result, as it does on the CPU; one proven to share no element (a GRU
    // cell's gates, column blocks of one matrix) is an ordinary input.
    if ((op.writes_overlapping_outputs || op.skips_overlap_checks) &&
        internalOverlap(target->view) == at::MemOverlap::Yes)
      return c10::nullopt;
    checkNoInternalOverlap(target->view);
    for (size_t i = 0; i < call.operands.size(); ++i) {
      if (call.operands[i].device() != target->device) continue;
      // An op ATen builds without overlap checks writes a partial overlap too: on the CPU.
      if (op.skips_overlap_checks &&
          overlapStatus(target->view, views[i]) == at::MemOverlapStatus::Partial)
        return c10::nullopt;
      checkNoPartialOverlap(target->view, views[i]);
      if (target->view.storage != nullptr && views[i].storage == target->view.storage &&
          overlapStatus(target->view, views[i]) == at::MemOverlapStatus::TooHard &&
          !provablyDisjoint(target->view, views[i]))
        return c10::nullopt;
    }
    output.given = 0;
    output.dtype = target->dtype;
    written = target->view;
    if (binding.in_place) {
      // The target first, as ATen's TensorIterator takes a copy_'s operands: a mismatch names
      // the target's size as tensor a's (an add_'s target is its first operand already).
      shape = call.operands.empty() ? at::DimVector(target->view.sizes)
                                    : at::infer_size_dimvector(target->view.sizes, shape);
      TORCH_CHECK(at::IntArrayRef(shape) == target->view.sizes, "output with shape ",
                  target->view.sizes, " doesn't match the broadcast shape ",
                  at::IntArrayRef(shape));
    } else if (at::IntArrayRef(shape) != target->view.sizes) {
      // An out= tensor that is also an input is read and written: TensorIterator resizes only
      // outputs that are not inputs (is_read_write), and this one must have the shape already.
      for (const ViewGeometry& view : views)
        TORCH_CHECK(view.tensor == nullptr || view.tensor != target->view.tensor,
                    "output with shape ", target->view.sizes, " doesn't match the broadcast shape ",
                    at::IntArrayRef(shape));
    }
    // After the shape checks, as TensorIterator computes shapes before types.
    if (binding.output_dtype_exact && target->dtype != result_dtype) {
      TORCH_CHECK(op.promotion != fusion::TypePromotion::kAlwaysBool, op.name,
                  " does not support non-boolean outputs."); // signbit's own check
      TORCH_CHECK(false, "Found dtype ", target->dtype, " but expected ", result_dtype);
    }
    TORCH_CHECK(binding.casts_freely || at::canCast(result_dtype, target->dtype), "result type ",
                result_dtype, " can't be cast to the desired output type ", target->dtype);
    if (!binding.in_place && at::IntArrayRef(shape) != target->view.sizes) {
      // Resized in place (same tensor, storage and offset) with the strides a new result would
      // have: TensorIterator lays a resized output out in the inputs' order, as a new one.
      output.resize = true;
      output.sizes.assign(shape.begin(), shape.end());
      output.strides = stridesLike(shape, views);
      written = ViewGeometry::planned(output.sizes, output.strides, target->view.storage_offset,
                                      target->view.itemsize);
      written.storage = target->view.storage;
      written.tensor = target->view.tensor;
      // The resized output may now share memory with an input other than in full (a view grown
      // into its neighbour): ATen checks nothing after resizing, so the CPU runs it and its
      // element order decides the result.
      for (size_t i = 0; i < call.operands.size(); ++i) {
        if (written.storage == nullptr || views[i].storage != written.storage) continue;
        const at::MemOverlapStatus status = overlapStatus(written, views[i]);
        if (status != at::MemOverlapStatus::No && status != at::MemOverlapStatus::Full)
          return c10::nullopt;
      }
    }
    if (!output.resize) {
      output.sizes.assign(written.sizes.begin(), written.sizes.end());
      output.strides.assign(written.strides.begin(), written.strides.end());
    }
  } else {
    output.dtype = result_dtype;
    output.sizes.assign(shape.begin(), shape.end());
    output.strides = stridesLike(shape, views);
    output.contiguous = output.strides == contiguousStrides(shape);
    written = ViewGeometry::planned(output.sizes, output.strides, 0,
                                    static_cast<int64_t>(c10::elementSize(result_dtype)));
  }
  // Numbers ATen converts with Scalar::to<T>() (alpha, fill values, clamp bounds) must fit.
  const bool reduced_precision = common == at::kHalf || common == at::kBFloat16;
  for (size_t i = 0; i < call.params.size(); ++i)
    checkScalarFits(checkedParam(op, call, i),
                    reduced_precision && i < op.params.size() && op.params[i].checked_in_opmath
                        ? at::kFloat
                        : common);
  for (size_t i = 0; i < call.operands.size(); ++i) {
    const fusion::OperandSpec& spec = *call.specs[i];
    at::ScalarType converted_to = spec.promotes ? common : output.dtype;
    if (spec.checked_in_opmath && (converted_to == at::kHalf || converted_to == at::kBFloat16))
      converted_to = at::kFloat;
    const bool taken_as_double = spec.unchecked_for_float32_and_float64 &&
                                 (converted_to == at::kFloat || converted_to == at::kDouble);
    if (call.scalars[i] && spec.checked_scalar && !taken_as_double) {
      checkScalarFits(*call.scalars[i], converted_to);
    } else if (!call.scalars[i] && spec.zero_dim_only && spec.checked_scalar &&
               mayNotFit(call.operands[i].scalar_type(), converted_to)) {
      // fill_'s value as a 0-dim tensor: ATen takes value.item() with Scalar::to<T>() too. A
      // device value may be pending in a window: the fallback reads it (a sync point) as ATen
      // does. A CPU one is read here, and every such call is planned: its data decided, which
      // the fingerprint of a capture does not hold.
      const at::Tensor& value = call.operands[i];
      if (!value.is_cpu()) return c10::nullopt;
      checkScalarFits(value.item(), converted_to);
      invalidateCallCapture();
    }
  }
  if (written.numel == 0) return plan;

  views.insert(views.begin(), written);
  const IterationPlan iteration = planIteration(shape, views);

  PlannedLaunch& launch = plan.launches.emplace_back();
  launch.kind = KernelKind::kElementwise;
  fusion::ElementwiseSignature& signature = launch.elementwise;
  signature.op = &op;
  signature.constants.assign(call.constants.begin(), call.constants.end());
  if (!op.special_values.empty())
    signature.constants.push_back(specialValueIndex(op, call, common));
  signature.present.assign(call.present.begin(), call.present.end());
  signature.compute = common;
  signature.output = output.dtype;
  for (const at::Tensor& t : call.operands)
    signature.inputs.push_back(t.scalar_type());
  signature.rank = iteration.rank();
  signature.inner.assign(iteration.inner.begin(), iteration.inner.end());
  // An input that is the output element for element (in-place self: the same storage, offset,
  // dtype and walk) is read through it.
  for (size_t i = 0; i < call.operands.size() && signature.aliased_input < 0; ++i) {
    const ViewGeometry& input = views[i + 1];
    if (written.storage != nullptr && input.storage == written.storage &&
        input.storage_offset == written.storage_offset &&
        call.operands[i].scalar_type() == output.dtype &&
        iteration.strides[i + 1] == iteration.strides[0])
      signature.aliased_input = static_cast<int>(i);
  }
  launch.key = signature.key();

  for (size_t i = 0; i < views.size(); ++i) {
    if (i > 0 && static_cast<int>(i) - 1 == signature.aliased_input) continue;
    PlannedOperand& operand = launch.operands.emplace_back();
    operand.role = i == 0 ? OperandRole::kOutput : OperandRole::kInput;
    operand.index = i == 0 ? 0 : static_cast<int>(i) - 1;
    operand.offset = i == 0 && target ? target->offset : 0;
    // An operand broadcast along the innermost dimension has no such dimension in the kernel.
    const size_t dims =
        iteration.sizes.size() - (iteration.inner[i] == fusion::InnerStride::kBroadcast);
    operand.sizes.assign(iteration.sizes.begin(), iteration.sizes.begin() + dims);
    operand.strides.assign(iteration.strides[i].begin(), iteration.strides[i].begin() + dims);
  }
  for (size_t i = 0; i < call.params.size(); ++i) {
    const c10::Scalar param = kernelParam(op, call, i);
    launch.words.push_back(at::isFloatingType(common) ? floatSlot(param.toDouble())
                                                      : param.toLong());
  }
  launch.range = iteration.sizes[0];
  launch.work_per_index = iteration.numel() / iteration.sizes[0];
  return plan;
}

} // namespace

WrittenOperand WrittenOperand::of(const at::Tensor& t) {
  WrittenOperand operand;
  operand.view = ViewGeometry::of(t);
  operand.dtype = t.scalar_type();
  operand.device = t.device();
  return operand;
}

c10::optional<LaunchPlan> planElementwise(const NativeOpBinding& binding, const BoundCall& call) {
  if (!call.output.defined()) return planCall(binding, call, nullptr);
  if (!isKernelOperand(call.output) || call.output.device().type() != kNeuronDeviceType)
    return c10::nullopt;
  const WrittenOperand target = WrittenOperand::of(call.output);
  return planCall(binding, call, &target);
}

c10::optional<LaunchPlan> planElementwiseInto(const NativeOpBinding& binding, const BoundCall& call,
                                              const WrittenOperand& target) {
  return planCall(binding, call, &target);
}

} // namespace torchneuron

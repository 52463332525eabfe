// Elementwise ops as compiled kernels: ATen's arguments are bound to a registry op, the
// iteration is planned, and the kernel for the call's signature (from the kernel cache,
// compiled on first use) runs through the launcher. What the kernels cannot run (complex
// dtypes, integer division, ...) goes to the CPU fallback, which also raises ATen's own errors.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "cache/kernel_cache.h"
#include "device/compile_warnings.h"
#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/iteration_plan.h"
#include "device/kernel_operand.h"
#include "device/metrics.h"
#include "device/native_op_binding.h"
#include "fusion/kernel_builder.h"
#include "launcher/parallel_launch.h"

namespace torchneuron {
namespace {

using fusion::ElementwiseOp;
using fusion::ElementwiseSignature;

// Bindings by schema address; filled while the library loads, read-only afterwards.
std::unordered_map<const c10::FunctionSchema*, NativeOpBinding>& bindings() {
  static auto* table = new std::unordered_map<const c10::FunctionSchema*, NativeOpBinding>();
  return *table;
}

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

int64_t constantValue(const c10::IValue& value, const fusion::ConstantSpec& spec) {
  if (value.isNone()) return -1;
  if (value.isBool()) return value.toBool() ? 1 : 0;
  if (value.isInt()) return value.toInt();
  const std::string text = value.toStringRef();
  for (size_t i = 0; i < spec.choices.size(); ++i)
    if (spec.choices[i] == text) return static_cast<int64_t>(i);
  return -2; // a value the lowering does not know: the CPU decides (and raises)
}

at::Tensor wrappedScalar(const c10::Scalar& scalar) {
  at::Tensor tensor = at::scalar_to_tensor(scalar);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

// Returns false when an argument is outside what kernels handle.
bool bindCall(const NativeOpBinding& binding, c10::ArrayRef<c10::IValue> args, BoundCall& call) {
  const ElementwiseOp& op = *binding.op;
  c10::SmallVector<at::Tensor, 4> by_operand(op.operands.size());
  c10::SmallVector<c10::optional<c10::Scalar>, 4> scalar_of(op.operands.size());
  c10::SmallVector<bool, 4> given(op.operands.size(), false);
  call.params.assign(op.params.size(), c10::Scalar());
  c10::SmallVector<bool, 4> param_given(op.params.size(), false);
  call.constants.assign(op.constants.size(), -1);
  for (size_t i = 0; i < args.size(); ++i) {
    const BoundArgument& role = binding.arguments[i];
    const c10::IValue& value = args[i];
    switch (role.role) {
    case ArgumentRole::kOutput:
      call.output = value.toTensor();
      break;
    case ArgumentRole::kOperandAndOutput:
      call.output = value.toTensor();
      by_operand[role.index] = call.output;
      given[role.index] = true;
      break;
    case ArgumentRole::kOperand:
      if (value.isNone()) break;
      if (value.isScalar()) {
        const c10::Scalar scalar = value.toScalar();
        if (scalar.isComplex()) return false;
        // ATen's scalar kernels each treat a NaN number their own way (clamp(min=nan)
        // ignores it, clamp_min(x, nan) and fill_(nan) do not): the CPU decides.
        if (scalar.isFloatingPoint() && std::isnan(scalar.toDouble())) return false;
        by_operand[role.index] = wrappedScalar(scalar);
        scalar_of[role.index] = scalar;
      } else {
        by_operand[role.index] = value.toTensor();
      }
      given[role.index] = true;
      break;
    case ArgumentRole::kParam:
      if (value.isNone()) break;
      call.params[role.index] = value.toScalar();
      param_given[role.index] = true;
      break;
    case ArgumentRole::kConstant:
      call.constants[role.index] = constantValue(value, op.constants[role.index]);
      if (call.constants[role.index] == -2) return false;
      break;
    }
  }
  for (size_t i = 0; i < op.params.size(); ++i)
    if (!param_given[i]) call.params[i] = c10::Scalar(op.params[i].fallback);
  bool any_optional_given = op.optional_operands.empty();
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const bool optional = std::find(op.optional_operands.begin(), op.optional_operands.end(),
                                    op.operands[i].arg) != op.optional_operands.end();
    if (optional) {
      call.present.push_back(given[i]);
      any_optional_given |= given[i];
    }
    if (!given[i]) continue;
    call.operands.push_back(by_operand[i]);
    call.specs.push_back(&op.operands[i]);
    call.scalars.push_back(scalar_of[i]);
  }
  return any_optional_given; // clamp() with neither bound is ATen's error to raise
}

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
// specialized operand's value among them, or -1.
int64_t specialValueIndex(const ElementwiseOp& op, const BoundCall& call, at::ScalarType common) {
  if (!at::isFloatingType(common)) return -1;
  for (size_t i = 0; i < call.operands.size(); ++i) {
    if (call.specs[i]->arg != op.specialized_operand) continue;
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

uint8_t computeClassOf(at::ScalarType dtype) {
  if (at::isFloatingType(dtype)) return fusion::kFloats;
  if (dtype == at::kBool) return fusion::kBools;
  return fusion::kIntegers;
}

// Runs the call as a compiled kernel and returns its result, or nullopt when the kernels
// cannot run it (the caller falls back to the CPU). Raises ATen's errors for bad shapes and
// output dtypes.
c10::optional<at::Tensor> runCompiled(const NativeOpBinding& binding, BoundCall& call) {
  const ElementwiseOp& op = *binding.op;
  c10::optional<c10::Device> device;
  if (call.output.defined()) {
    if (!isKernelOperand(call.output) || call.output.device().type() != kNeuronDeviceType)
      return c10::nullopt;
    device = call.output.device();
  }
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

  at::ScalarType common = any_promoting           ? at::native::result_type(promotion)
                          : call.output.defined() ? call.output.scalar_type()
                                                  : at::ScalarType::Undefined;
  if (common == at::ScalarType::Undefined) return c10::nullopt;
  const bool stays_integral =
      op.integral_with_constant >= 0 && call.constants[op.integral_with_constant] >= 0;
  if (op.promotion == fusion::TypePromotion::kIntToFloat && at::isIntegralType(common, true) &&
      !stays_integral)
    common = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (!fusion::isKernelDtype(common) || !(op.compute_classes & computeClassOf(common)))
    return c10::nullopt;
  if (op.matches_cpu && !op.matches_cpu(common, call.constants)) return c10::nullopt;
  for (const c10::Scalar& param : call.params) {
    if (param.isComplex()) return c10::nullopt;
    if (!at::isFloatingType(common) && param.isFloatingPoint()) return c10::nullopt;
  }
  const at::ScalarType result_dtype =
      op.promotion == fusion::TypePromotion::kAlwaysBool ? at::kBool : common;

  at::DimVector shape;
  for (size_t i = 0; i < call.operands.size(); ++i)
    shape = i == 0 ? at::DimVector(call.operands[0].sizes())
                   : at::infer_size_dimvector(shape, call.operands[i].sizes());
  at::Tensor output = call.output;
  if (output.defined()) {
    TORCH_CHECK(binding.casts_freely || at::canCast(result_dtype, output.scalar_type()),
                "result type ", result_dtype, " can't be cast to the desired output type ",
                output.scalar_type());
    if (binding.in_place) {
      shape = call.operands.empty() ? at::DimVector(output.sizes())
                                    : at::infer_size_dimvector(shape, output.sizes());
      TORCH_CHECK(at::IntArrayRef(shape) == output.sizes(), "output with shape ", output.sizes(),
                  " doesn't match the broadcast shape ", at::IntArrayRef(shape));
    } else {
      at::native::resize_output(output, shape);
    }
    // TensorIterator's checks, with its messages. An input that shares memory with the output
    // in a way they cannot judge (non-dense views) goes to the CPU, whose element order then
    // decides the result, as it does on the CPU.
    at::assert_no_internal_overlap(output);
    for (const at::Tensor& t : call.operands) {
      if (t.device() != output.device()) continue;
      at::assert_no_partial_overlap(output, t);
      if (t.is_alias_of(output) &&
          at::get_overlap_status(output, t) == at::MemOverlapStatus::TooHard)
        return c10::nullopt;
    }
  } else {
    output = allocateLike(shape, result_dtype, call.operands, *device);
  }
  // Numbers ATen converts with Scalar::to<T>() (alpha, fill values, clamp bounds) must fit.
  for (const c10::Scalar& param : call.params)
    checkScalarFits(param, common);
  for (size_t i = 0; i < call.operands.size(); ++i)
    if (call.scalars[i] && call.specs[i]->checked_scalar)
      checkScalarFits(*call.scalars[i], call.specs[i]->promotes ? common : output.scalar_type());
  if (output.numel() == 0) return output;

  c10::SmallVector<at::Tensor, 5> operands{output};
  operands.append(call.operands.begin(), call.operands.end());
  const IterationPlan plan = planIteration(shape, operands);

  ElementwiseSignature signature;
  signature.op = &op;
  signature.constants.assign(call.constants.begin(), call.constants.end());
  if (!op.special_values.empty())
    signature.constants.push_back(specialValueIndex(op, call, common));
  signature.present.assign(call.present.begin(), call.present.end());
  signature.compute = common;
  signature.output = output.scalar_type();
  for (const at::Tensor& t : call.operands)
    signature.inputs.push_back(t.scalar_type());
  signature.rank = plan.rank();
  signature.inner.assign(plan.inner.begin(), plan.inner.end());
  // An input that is the output element for element (in-place self) is read through it.
  for (size_t i = 0; i < call.operands.size() && signature.aliased_input < 0; ++i) {
    const at::Tensor& t = call.operands[i];
    if (t.data_ptr() == output.data_ptr() && t.scalar_type() == output.scalar_type() &&
        plan.strides[i + 1] == plan.strides[0])
      signature.aliased_input = static_cast<int>(i);
  }
  const Hash64 key = signature.key();
  const KernelHandle kernel =
      kernelFor(key, [&] { return fusion::buildElementwiseKernel(signature); });
  if (kernel->function == nullptr) {
    warnCompileFailureOnce(key, signature.describe(), kernel->failure);
    return c10::nullopt;
  }

  c10::SmallVector<int64_t, 64> slots;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (static_cast<int>(i) - 1 == signature.aliased_input && i > 0) continue;
    // An operand broadcast along the innermost dimension has no such dimension in the kernel.
    const size_t dims = plan.sizes.size() - (plan.inner[i] == fusion::InnerStride::kBroadcast);
    const auto address = reinterpret_cast<int64_t>(operands[i].data_ptr());
    slots.append({address, address, 0});
    slots.append(plan.sizes.begin(), plan.sizes.begin() + dims);
    slots.append(plan.strides[i].begin(), plan.strides[i].begin() + dims);
  }
  for (const c10::Scalar& param : call.params) {
    if (at::isFloatingType(common)) {
      const double value = param.toDouble();
      int64_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      slots.push_back(bits);
    } else {
      slots.push_back(param.toLong());
    }
  }
  const int64_t numel = plan.numel();
  launchKernel(kernel->function, slots.data(),
               LaunchShape{plan.sizes[0], numel / plan.sizes[0], at::get_num_threads()});
  recordLaunch(binding.launches);
  return output;
}

} // namespace

bool runCompiledElementwise(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const NativeOpBinding& binding = bindings().at(&handle.schema());
  const size_t count = binding.arguments.size();
  BoundCall call;
  if (bindCall(binding, torch::jit::last(*stack, count), call)) {
    c10::optional<at::Tensor> result = runCompiled(binding, call);
    if (result) {
      torch::jit::drop(*stack, count);
      torch::jit::push(*stack, std::move(*result));
      return true;
    }
  }
  return false;
}

namespace {

NativeOpBinding copyBinding(const char* name) {
  NativeOpBinding binding;
  binding.op = fusion::findElementwiseOp("copy");
  binding.name = name;
  binding.writes_output = true;
  binding.in_place = true;
  binding.casts_freely = true;
  binding.launches = launchCounter(LaunchKind::kCompiled, name);
  return binding;
}

} // namespace

bool copyWithCompiledKernel(const at::Tensor& src, const at::Tensor& dst, const char* op_name) {
  static const NativeOpBinding copy_binding = copyBinding("aten::copy_");
  static const NativeOpBinding cat_binding = copyBinding("aten::cat");
  const NativeOpBinding& binding =
      std::strcmp(op_name, "aten::cat") == 0 ? cat_binding : copy_binding;
  if (src.device().type() != kNeuronDeviceType || dst.device().type() != kNeuronDeviceType)
    return false;
  if (src.is_alias_of(dst)) return false; // overlapping copies keep ATen's own handling
  BoundCall call;
  call.operands.push_back(src);
  call.specs.push_back(&binding.op->operands[0]);
  call.scalars.emplace_back();
  call.output = dst;
  return runCompiled(binding, call).has_value();
}

bool hasCompiledKernel(const c10::OperatorName& name) {
  auto handle = c10::Dispatcher::singleton().findOp(name);
  return handle && bindings().count(&handle->schema()) > 0;
}

std::vector<std::string> bindCompiledElementwiseOverloads() {
  std::vector<std::string> overloads;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const fusion::ElementwiseOp* op = registryOpFor(name.name);
    if (op == nullptr) continue;
    auto handle = c10::Dispatcher::singleton().findOp(name);
    if (!handle || !handle->hasSchema()) continue;
    // A composite op decomposes into ops that have kernels; a device kernel of its own would
    // hide its autograd formula.
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    c10::optional<NativeOpBinding> binding = bindSchema(handle->schema(), *op);
    if (!binding) continue;
    binding->launches = launchCounter(LaunchKind::kCompiled, binding->name);
    bindings().emplace(&handle->schema(), std::move(*binding));
    overloads.push_back(name.name.substr(6) +
                        (name.overload_name.empty() ? "" : "." + name.overload_name));
  }
  return overloads;
}

} // namespace torchneuron

// Reductions and row-wise ops (softmax) as compiled kernels. Each ATen overload below is read
// by argument name (self, dim, keepdim, dtype, out, ...) into one ReductionCall; the dimensions
// are split into kept and reduced groups, each coalesced, and the registry's reduction kernel
// for the signature runs over the kept rows. Calls the kernels do not cover (complex, empty
// max, mixed output dtypes) run on the CPU fallback, which raises ATen's own errors.

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "cache/kernel_cache.h"
#include "device/compile_warnings.h"
#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/kernel_operand.h"
#include "device/metrics.h"
#include "device/reduction_launch.h"
#include "fusion/kernel_builder.h"
#include "fusion/op_registry.h"
#include "launcher/parallel_launch.h"

namespace torchneuron {
namespace {

using fusion::InnerStride;

// How an ATen reduction overload maps onto a registry reduction.
struct ReductionBinding {
  const fusion::ReductionOp* op;
  std::string name;          // "aten::sum.dim_IntList"
  bool all_dims_when_no_dim; // an overload without `dim` reduces everything
  LaunchCounter* launches;
};

std::unordered_map<const c10::FunctionSchema*, ReductionBinding>& reductionBindings() {
  static auto* table = new std::unordered_map<const c10::FunctionSchema*, ReductionBinding>();
  return *table;
}

// Arguments by schema name.
struct NamedArgs {
  const c10::FunctionSchema& schema;
  c10::ArrayRef<c10::IValue> values;

  const c10::IValue* find(const char* name) const {
    auto index = schema.argumentIndexWithName(name);
    return index ? &values[*index] : nullptr;
  }
  bool has(const char* name) const {
    const c10::IValue* v = find(name);
    return v != nullptr && !v->isNone();
  }
  TensorList written() const {
    TensorList outputs;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const auto& alias = schema.arguments()[i].alias_info();
      if (alias && alias->isWrite()) outputs.push_back(values[i].toTensor());
    }
    return outputs;
  }
};

bool isKernelInput(const at::Tensor& t) {
  return isKernelOperand(t) && t.device().type() == kNeuronDeviceType;
}

// The reduced dimensions named by `dim` (None or [] mean all of them).
c10::SmallVector<int64_t, 6> reducedDims(const at::Tensor& self, const c10::IValue* dim,
                                         bool all_if_none) {
  const int64_t rank = std::max<int64_t>(self.dim(), 1);
  c10::SmallVector<int64_t, 6> dims;
  if (dim != nullptr && dim->isInt()) {
    dims.push_back(at::maybe_wrap_dim(dim->toInt(), rank));
  } else if (dim != nullptr && dim->isIntList() && !dim->toIntList().empty()) {
    for (int64_t d : dim->toIntList())
      dims.push_back(at::maybe_wrap_dim(d, rank));
  } else if (all_if_none || dim == nullptr || dim->isNone() || dim->isIntList()) {
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

// Which order of a vector norm the kernel specializes on, or -1 for none it supports.
int64_t normOrder(double p) {
  if (p == 2) return 0;
  if (p == 1) return 1;
  if (std::isinf(p)) return p > 0 ? 2 : 3;
  if (p == 0) return 4;
  return 5;
}

// Fills in dtypes, constants and params; false when the kernels do not run this call.
bool decideTypes(const ReductionBinding& binding, const NamedArgs& args, ReductionCall& call) {
  const std::string& name = call.op->name;
  const at::ScalarType input = call.inputs[0].scalar_type();
  c10::optional<at::ScalarType> dtype;
  if (args.has("dtype")) dtype = args.find("dtype")->toScalarType();
  const bool is_float = at::isFloatingType(input);
  if (name == "sum" || name == "prod") {
    at::ScalarType result = dtype                             ? *dtype
                            : !call.outputs.empty()           ? call.outputs[0].scalar_type()
                            : at::isIntegralType(input, true) ? at::kLong
                                                              : input;
    if (result == at::kBool) return false;
    call.compute = result;
    call.output_dtypes = {result};
  } else if (name == "mean") {
    at::ScalarType result = dtype                   ? *dtype
                            : !call.outputs.empty() ? call.outputs[0].scalar_type()
                                                    : input;
    if (!is_float || !at::isFloatingType(result)) return false;
    call.compute = result;
    call.output_dtypes = {result};
  } else if (name == "amax" || name == "amin") {
    call.compute = input;
    call.output_dtypes = {input};
  } else if (name == "argmax" || name == "argmin" || name == "max" || name == "min") {
    if (input == at::kBool) return false;
    call.compute = input;
    call.output_dtypes = name.rfind("arg", 0) == 0
                             ? c10::SmallVector<at::ScalarType, 2>{at::kLong}
                             : c10::SmallVector<at::ScalarType, 2>{input, at::kLong};
  } else if (name == "all" || name == "any") {
    call.compute = input;
    call.output_dtypes = {input == at::kByte ? at::kByte : at::kBool};
  } else if (name == "var" || name == "std") {
    if (!is_float) return false;
    call.compute = input;
    call.output_dtypes = {input};
    double correction = 1;
    if (args.has("correction"))
      correction = args.find("correction")->toScalar().toDouble();
    else if (args.has("unbiased"))
      correction = args.find("unbiased")->toBool() ? 1 : 0;
    call.params = {correction};
  } else if (name == "vector_norm") {
    const at::ScalarType result = dtype ? *dtype : input;
    if (!is_float || !at::isFloatingType(result)) return false;
    double p = 2;
    for (const char* key : {"ord", "p"})
      if (args.has(key)) p = args.find(key)->toScalar().toDouble();
    call.constants = {normOrder(p)};
    call.params = {p};
    call.compute = result;
    call.output_dtypes = {result};
  } else if (name == "logsumexp") {
    const at::ScalarType result =
        is_float ? input : c10::typeMetaToScalarType(c10::get_default_dtype());
    call.compute = result;
    call.output_dtypes = {result};
  } else if (name == "softmax" || name == "log_softmax") {
    if (!is_float || (args.has("half_to_float") && args.find("half_to_float")->toBool()))
      return false;
    call.compute = input;
    call.output_dtypes = {input};
  } else if (name == "softmax_backward" || name == "log_softmax_backward") {
    if (!is_float || call.inputs[1].scalar_type() != input) return false;
    if (args.has("input_dtype") && args.find("input_dtype")->toScalarType() != input) return false;
    call.compute = input;
    call.output_dtypes = {input};
  } else {
    return false;
  }
  for (size_t i = 0; i < call.outputs.size(); ++i)
    if (call.outputs[i].scalar_type() != call.output_dtypes.at(i)) return false;
  // ATen's half and bfloat16 reductions round partial results to the narrow dtype in places
  // (outer-dimension sums, norms, softmax's backward), where the kernels accumulate in f64 and
  // round once; the all-dtype referee found results a few ulps apart. Only the exact ones
  // (extremes, all/any) run compiled in those dtypes; the rest run on the CPU.
  const bool exact = name == "amax" || name == "amin" || name == "argmax" || name == "argmin" ||
                     name == "max" || name == "min" || name == "all" || name == "any";
  auto narrow = [](at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; };
  if (!exact && (narrow(input) || narrow(call.compute))) return false;
  return true;
}

using Dims = c10::SmallVector<int64_t, 6>;

// Merges adjacent dimensions (outer first) of one group where every operand allows it.
struct Group {
  Dims sizes;
  c10::SmallVector<Dims, 4> strides; // per operand
};

Group coalesce(const Dims& sizes, const c10::SmallVector<Dims, 4>& strides) {
  Group group;
  group.strides.resize(strides.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool mergeable = !group.sizes.empty();
    for (size_t i = 0; i < strides.size() && mergeable; ++i)
      mergeable = group.strides[i].back() == sizes[d] * strides[i][d];
    if (mergeable) {
      group.sizes.back() *= sizes[d];
      for (size_t i = 0; i < strides.size(); ++i)
        group.strides[i].back() = strides[i][d];
      continue;
    }
    group.sizes.push_back(sizes[d]);
    for (size_t i = 0; i < strides.size(); ++i)
      group.strides[i].push_back(strides[i][d]);
  }
  if (group.sizes.empty()) {
    group.sizes.push_back(1);
    for (auto& s : group.strides)
      s.push_back(0);
  }
  return group;
}

} // namespace

c10::optional<TensorList> launchReduction(ReductionCall& call, LaunchCounter* launches) {
  const at::Tensor& self = call.inputs[0];
  for (const at::Tensor& t : call.inputs)
    if (!isKernelInput(t) || t.sizes() != self.sizes() || t.device() != self.device())
      return c10::nullopt;
  // An out= tensor that shares memory with an input or with itself (expanded): ATen's
  // reductions do not check overlap, so the CPU's own element order decides the result; the
  // fallback reproduces it.
  for (const at::Tensor& t : call.outputs) {
    if (!isKernelInput(t) || t.device() != self.device()) return c10::nullopt;
    if (at::has_internal_overlap(t) != at::MemOverlap::No) return c10::nullopt;
    for (const at::Tensor& input : call.inputs)
      if (t.is_alias_of(input)) return c10::nullopt;
  }
  if (!fusion::isKernelDtype(call.compute)) return c10::nullopt;

  // Input geometry (a 0-dim input reduces as shape [1]).
  const Dims in_sizes = self.dim() == 0 ? Dims{1} : Dims(self.sizes().begin(), self.sizes().end());
  auto strideOf = [&](const at::Tensor& t, int64_t d) { return t.dim() == 0 ? 0 : t.stride(d); };
  const int64_t rank = static_cast<int64_t>(in_sizes.size());
  c10::SmallVector<bool, 6> reduced(rank, false);
  for (int64_t d : call.dims)
    reduced[d] = true;
  int64_t reduced_numel = 1;
  for (int64_t d : call.dims)
    reduced_numel *= in_sizes[d];
  const bool needs_elements = call.op->name == "amax" || call.op->name == "amin" ||
                              call.op->name == "argmax" || call.op->name == "argmin" ||
                              call.op->name == "max" || call.op->name == "min" ||
                              (call.op->name == "vector_norm" && call.constants[0] == 3);
  if (reduced_numel == 0 && needs_elements) return c10::nullopt; // ATen's error

  Dims out_shape;
  if (call.op->row_output) {
    out_shape.assign(self.sizes().begin(), self.sizes().end());
  } else if (self.dim() > 0) {
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        out_shape.push_back(in_sizes[d]);
      else if (call.keepdim)
        out_shape.push_back(1);
  }
  TensorList outputs = call.outputs;
  if (outputs.empty()) {
    for (at::ScalarType dtype : call.output_dtypes)
      outputs.push_back(at::empty(out_shape, self.options().dtype(dtype)));
  } else {
    for (at::Tensor& out : outputs)
      at::native::resize_output(out, out_shape);
  }
  if (outputs[0].numel() == 0 && !(call.op->row_output && self.numel() > 0)) return outputs;

  // Operands: outputs then inputs; kept dims first, reduced dims after, both in logical order.
  Dims kept_sizes, red_sizes;
  c10::SmallVector<Dims, 4> kept_strides, red_strides;
  TensorList operands = outputs;
  operands.append(call.inputs.begin(), call.inputs.end());
  kept_strides.resize(operands.size());
  red_strides.resize(operands.size());
  for (int64_t d = 0, out_d = 0; d < rank; ++d) {
    (reduced[d] ? red_sizes : kept_sizes).push_back(in_sizes[d]);
    for (size_t i = 0; i < operands.size(); ++i) {
      const bool is_output = i < outputs.size();
      int64_t stride = 0;
      if (!is_output || call.op->row_output) {
        stride = strideOf(operands[i], d);
      } else if (!reduced[d] && self.dim() > 0) {
        stride = operands[i].stride(call.keepdim ? d : out_d);
      }
      (reduced[d] ? red_strides : kept_strides)[i].push_back(stride);
    }
    if (!reduced[d] || call.keepdim) ++out_d;
  }
  const Group kept = coalesce(kept_sizes, kept_strides);
  Group red = coalesce(red_sizes, red_strides);

  fusion::ReductionSignature signature;
  signature.op = call.op;
  signature.constants = call.constants;
  signature.compute = call.compute;
  for (const at::Tensor& t : call.inputs)
    signature.inputs.push_back(t.scalar_type());
  for (const at::Tensor& t : outputs)
    signature.outputs.push_back(t.scalar_type());
  signature.kept_rank = static_cast<int>(kept.sizes.size());
  signature.reduced_rank = static_cast<int>(red.sizes.size());
  auto strideClass = [](int64_t stride, bool may_broadcast) {
    return stride == 1                    ? InnerStride::kContiguous
           : stride == 0 && may_broadcast ? InnerStride::kBroadcast
                                          : InnerStride::kStrided;
  };
  // Column order when the reduction runs across columns that are contiguous in the first input
  // and contiguous or broadcast in the others (sum over the rows of [N, C]; layer norm's
  // weight gradient, with per-row statistics broadcast along the columns): walking one column
  // at a time would stride through memory.
  const size_t first_input = outputs.size();
  if (fusion::columnOrderSupported(*call.op) && kept.sizes.back() >= 8 &&
      red.strides[first_input].back() != 1 && kept.strides[first_input].back() == 1) {
    bool columns_dense = true;
    for (size_t i = first_input; i < operands.size(); ++i)
      columns_dense &= kept.strides[i].back() == 1 || kept.strides[i].back() == 0;
    signature.column_order = columns_dense;
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    const bool is_input = i >= first_input;
    const bool reduce_output = !is_input && !call.op->row_output;
    const int64_t innermost = reduce_output || (is_input && signature.column_order)
                                  ? kept.strides[i].back()
                                  : red.strides[i].back();
    signature.inner.push_back(strideClass(innermost, is_input));
  }
  const Hash64 key = signature.key();
  const KernelHandle kernel =
      kernelFor(key, [&] { return fusion::buildReductionKernel(signature); });
  if (kernel->function == nullptr) {
    warnCompileFailureOnce(key, signature.describe(), kernel->failure);
    return c10::nullopt;
  }

  c10::SmallVector<int64_t, 64> slots;
  for (size_t i = 0; i < operands.size(); ++i) {
    const auto address = reinterpret_cast<int64_t>(operands[i].data_ptr());
    slots.append({address, address, 0});
    const bool reduce_output = i < outputs.size() && !call.op->row_output;
    slots.append(kept.sizes.begin(), kept.sizes.end());
    if (!reduce_output) slots.append(red.sizes.begin(), red.sizes.end());
    slots.append(kept.strides[i].begin(), kept.strides[i].end());
    if (!reduce_output) slots.append(red.strides[i].begin(), red.strides[i].end());
  }
  for (double p : call.params) {
    if (at::isFloatingType(call.compute)) {
      int64_t bits;
      std::memcpy(&bits, &p, sizeof bits);
      slots.push_back(bits);
    } else {
      slots.push_back(static_cast<int64_t>(p));
    }
  }
  slots.push_back(reduced_numel);
  int64_t kept_numel = 1;
  for (int64_t s : kept.sizes)
    kept_numel *= s;
  launchKernel(kernel->function, slots.data(),
               LaunchShape{kept.sizes[0],
                           kept_numel / kept.sizes[0] * std::max<int64_t>(reduced_numel, 1),
                           at::get_num_threads()});
  recordLaunch(launches);
  return outputs;
}

bool runCompiledReduction(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const ReductionBinding& binding = reductionBindings().at(&handle.schema());
  const c10::FunctionSchema& schema = handle.schema();
  const size_t count = schema.arguments().size();
  NamedArgs args{schema, torch::jit::last(*stack, count)};
  ReductionCall call;
  call.op = binding.op;
  const bool backward = binding.op->name.find("_backward") != std::string::npos;
  if (backward) {
    call.inputs = {args.find("grad_output")->toTensor(), args.find("output")->toTensor()};
  } else {
    call.inputs = {args.find("self")->toTensor()};
  }
  call.outputs = args.written();
  if (args.find("keepdim")) call.keepdim = args.find("keepdim")->toBool();
  call.dims = reducedDims(call.inputs[0], args.find("dim"), binding.all_dims_when_no_dim);
  c10::optional<TensorList> result;
  for (const at::Tensor& t : call.inputs)
    if (!isKernelInput(t)) return false;
  if (decideTypes(binding, args, call)) result = launchReduction(call, binding.launches);
  if (!result) return false;
  torch::jit::drop(*stack, count);
  for (at::Tensor& t : *result)
    torch::jit::push(*stack, std::move(t));
  return true;
}

namespace {

// ATen overload -> registry reduction. Overloads are listed explicitly: their argument
// conventions differ (dim as int, int[] or int?; correction; ord or p).
struct OverloadSpec {
  const char* overload; // "sum.dim_IntList"
  const char* reduction;
};

constexpr OverloadSpec kReductionOverloads[] = {
    {"sum", "sum"},
    {"sum.dim_IntList", "sum"},
    {"sum.IntList_out", "sum"},
    {"mean", "mean"},
    {"mean.dim", "mean"},
    {"mean.out", "mean"},
    {"prod", "prod"},
    {"prod.dim_int", "prod"},
    {"prod.int_out", "prod"},
    {"amax", "amax"},
    {"amax.out", "amax"},
    {"amin", "amin"},
    {"amin.out", "amin"},
    {"max", "amax"},
    {"min", "amin"},
    {"argmax", "argmax"},
    {"argmax.out", "argmax"},
    {"argmin", "argmin"},
    {"argmin.out", "argmin"},
    {"max.dim", "max"},
    {"max.dim_max", "max"},
    {"min.dim", "min"},
    {"min.dim_min", "min"},
    {"all", "all"},
    {"all.dim", "all"},
    {"all.out", "all"},
    {"all.all_out", "all"},
    {"any", "any"},
    {"any.dim", "any"},
    {"any.out", "any"},
    {"any.all_out", "any"},
    {"var.correction", "var"},
    {"var.correction_out", "var"},
    {"std.correction", "std"},
    {"std.correction_out", "std"},
    {"linalg_vector_norm", "vector_norm"},
    {"linalg_vector_norm.out", "vector_norm"},
    {"norm.ScalarOpt_dim", "vector_norm"},
    {"norm.out", "vector_norm"},
    {"norm.Scalar", "vector_norm"},
    {"logsumexp", "logsumexp"},
    {"logsumexp.out", "logsumexp"},
    {"_softmax", "softmax"},
    {"_softmax.out", "softmax"},
    {"_log_softmax", "log_softmax"},
    {"_log_softmax.out", "log_softmax"},
    {"_softmax_backward_data", "softmax_backward"},
    {"_softmax_backward_data.out", "softmax_backward"},
    {"_log_softmax_backward_data", "log_softmax_backward"},
    {"_log_softmax_backward_data.out", "log_softmax_backward"},
};

} // namespace

std::vector<std::string> bindCompiledReductionOverloads() {
  std::vector<std::string> overloads;
  for (const OverloadSpec& spec : kReductionOverloads) {
    const std::string full(spec.overload);
    const size_t dot = full.find('.');
    const c10::OperatorName name("aten::" + full.substr(0, dot),
                                 dot == std::string::npos ? "" : full.substr(dot + 1));
    auto handle = c10::Dispatcher::singleton().findOp(name);
    TORCH_INTERNAL_ASSERT(handle && handle->hasSchema(), "[device] no ATen overload ", full);
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    const fusion::ReductionOp* op = fusion::findReductionOp(spec.reduction);
    TORCH_INTERNAL_ASSERT(op != nullptr, "[device] no registry reduction ", spec.reduction);
    reductionBindings().emplace(
        &handle->schema(), ReductionBinding{op, "aten::" + full, true,
                                            launchCounter(LaunchKind::kCompiled, "aten::" + full)});
    overloads.push_back(full);
  }
  return overloads;
}

} // namespace torchneuron

// Planning a reduction or row-wise op: the input's dimensions are split into kept and reduced
// groups (each merged by the one dimension-merging rule), the outputs are described by metadata
// and the registry's reduction kernel for the signature is named by key.

#include <c10/util/accumulate.h>

#include <algorithm>

#include "device/device.h"
#include "device/kernel_operand.h"
#include "device/reduction_launch.h"
#include "device/reduction_split.h"
#include "device/view_geometry.h"
#include "launcher/kernel_abi.h"

namespace torchneuron {
namespace {

using fusion::InnerStride;

bool isKernelInput(const at::Tensor& t) {
  return isKernelOperand(t) && t.device().type() == kNeuronDeviceType;
}

// Merged dimensions of one group; a group with no dimension larger than 1 is one of size 1.
MergedDims mergeGroup(const DimVector& sizes, const c10::SmallVector<DimVector, 4>& strides) {
  MergedDims group = mergeDimensions(sizes, strides);
  if (group.sizes.empty()) {
    group.sizes.push_back(1);
    for (DimVector& s : group.strides)
      s.push_back(0);
  }
  return group;
}

// Whether reduced dimension `a` of the inputs lies outside `b` in memory: by the first input
// whose strides along both are nonzero and differ (the larger stride is outer), as ATen's
// TensorIterator orders dimensions.
bool liesOutside(const c10::SmallVector<DimVector, 4>& strides, size_t first_input, size_t a,
                 size_t b) {
  for (size_t i = first_input; i < strides.size(); ++i) {
    const int64_t sa = strides[i][a], sb = strides[i][b];
    if (sa != 0 && sb != 0 && sa != sb) return sa > sb;
  }
  return false;
}

// Puts the reduced dimensions in the inputs' memory order, outermost first (operands
// `first_input` on are the inputs). The kernel walks a row in the order of its dimensions: over a
// transposed tensor in logical order it strided through memory at every element (the sum of a
// transposed 4096 x 4096 float matrix: 123.5 ms against the CPU's 2.7, bench/reduction_fusion.py);
// in memory order the dimensions merge into one contiguous row. Insertion sort with adjacent
// swaps: well defined whatever the inputs' orders.
void orderReducedByMemory(DimVector& sizes, c10::SmallVector<DimVector, 4>& strides,
                          size_t first_input) {
  const size_t n = sizes.size();
  c10::SmallVector<size_t, 6> order(n);
  for (size_t d = 0; d < n; ++d)
    order[d] = d;
  for (size_t i = 1; i < n; ++i)
    for (size_t j = i; j > 0 && liesOutside(strides, first_input, order[j], order[j - 1]); --j)
      std::swap(order[j], order[j - 1]);
  auto permute = [&order](DimVector& dims) {
    DimVector moved;
    for (size_t d : order)
      moved.push_back(dims[d]);
    dims = std::move(moved);
  };
  permute(sizes);
  for (DimVector& operand : strides)
    permute(operand);
}

} // namespace

c10::optional<LaunchPlan> planReduction(const ReductionCall& call) {
  const at::Tensor& self = call.inputs[0];
  for (const at::Tensor& t : call.inputs)
    if (!isKernelInput(t) || t.sizes() != self.sizes() || t.device() != self.device())
      return c10::nullopt;
  // An out= tensor that shares memory with an input or with itself (expanded): ATen's
  // reductions do not check overlap, so the CPU's own element order decides the result; the
  // fallback reproduces it.
  for (const at::Tensor& t : call.outputs) {
    if (!isKernelInput(t) || t.device() != self.device()) return c10::nullopt;
    const ViewGeometry view = ViewGeometry::of(t);
    if (internalOverlap(view) != at::MemOverlap::No) return c10::nullopt;
    for (const at::Tensor& input : call.inputs)
      if (ViewGeometry::of(input).storage == view.storage) return c10::nullopt;
  }
  if (!fusion::isKernelDtype(call.compute)) return c10::nullopt;

  // Input geometry (a 0-dim input reduces as shape [1]).
  const DimVector in_sizes =
      self.dim() == 0 ? DimVector{1} : DimVector(self.sizes().begin(), self.sizes().end());
  auto strideOf = [&](const at::Tensor& t, int64_t d) { return t.dim() == 0 ? 0 : t.stride(d); };
  const int64_t rank = static_cast<int64_t>(in_sizes.size());
  c10::SmallVector<bool, 6> reduced(rank, false);
  for (int64_t d : call.dims)
    reduced[d] = true;
  int64_t reduced_numel = 1;
  for (int64_t d : call.dims)
    reduced_numel *= in_sizes[d];
  if (reduced_numel == 0 && call.needs_elements) return c10::nullopt; // ATen's error

  // A row-wise op's outputs have the input's shape, but its per-row results (row_stats).
  DimVector row_shape, reduced_shape;
  if (call.op->row_output) row_shape.assign(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) {
    for (int64_t d = 0; d < rank; ++d) {
      if (!reduced[d])
        reduced_shape.push_back(in_sizes[d]);
      else if (call.keepdim)
        reduced_shape.push_back(1);
    }
  }
  LaunchPlan plan;
  const size_t num_outputs = call.outputs.empty() ? call.output_dtypes.size() : call.outputs.size();
  for (size_t k = 0; k < num_outputs; ++k) {
    const DimVector& out_shape = call.op->elementOutput(k) ? row_shape : reduced_shape;
    PlannedOutput& output = plan.outputs.emplace_back();
    output.device = self.device();
    output.sizes = out_shape;
    if (call.outputs.empty()) {
      output.dtype = call.output_dtypes[k];
      output.strides = contiguousStrides(out_shape);
      continue;
    }
    const at::Tensor& given = call.outputs[k];
    output.given = static_cast<int>(k);
    output.dtype = given.scalar_type();
    output.resize = given.sizes() != at::IntArrayRef(out_shape);
    output.strides = output.resize ? contiguousStrides(out_shape)
                                   : DimVector(given.strides().begin(), given.strides().end());
  }
  const DimVector& out_shape = call.op->row_output ? row_shape : reduced_shape;
  if (c10::multiply_integers(out_shape) == 0 && !(call.op->row_output && self.numel() > 0))
    return plan;

  // Operands: outputs then inputs; kept dims first, reduced dims after, both in logical order
  // (the reduced ones then in memory order, below).
  const size_t num_operands = num_outputs + call.inputs.size();
  DimVector kept_sizes, red_sizes;
  c10::SmallVector<DimVector, 4> kept_strides(num_operands), red_strides(num_operands);
  for (int64_t d = 0, out_d = 0; d < rank; ++d) {
    (reduced[d] ? red_sizes : kept_sizes).push_back(in_sizes[d]);
    for (size_t i = 0; i < num_operands; ++i) {
      const bool is_output = i < num_outputs;
      int64_t stride = 0;
      if (!is_output) {
        stride = strideOf(call.inputs[i - num_outputs], d);
      } else if (call.op->elementOutput(i)) {
        stride = self.dim() == 0 ? 0 : plan.outputs[i].strides[d];
      } else if (!reduced[d] && self.dim() > 0) {
        stride = plan.outputs[i].strides[call.keepdim ? d : out_d];
      }
      (reduced[d] ? red_strides : kept_strides)[i].push_back(stride);
    }
    if (!reduced[d] || call.keepdim) ++out_d;
  }
  // The order of a row's elements is the op's business only when it reports where an element
  // was (argmax, a pooling window's offset) or writes one output per element (row-wise ops).
  if (!call.op->needs_index && !call.op->row_output && !call.op->static_window)
    orderReducedByMemory(red_sizes, red_strides, num_outputs);
  const MergedDims kept = mergeGroup(kept_sizes, kept_strides);
  const MergedDims red = mergeGroup(red_sizes, red_strides);

  PlannedLaunch& launch = plan.launches.emplace_back();
  launch.kind = KernelKind::kReduction;
  fusion::ReductionSignature& signature = launch.reduction;
  signature.op = call.op;
  signature.constants = call.constants;
  if (call.op->static_window) {
    // Every input steps alike between windows (the kernel's memref types say so).
    for (size_t i = num_outputs; i < num_outputs + call.inputs.size(); ++i)
      if (kept.strides[i].back() != kept.strides[num_outputs].back()) return c10::nullopt;
    signature.constants.append(red.sizes.begin(), red.sizes.end());
    signature.constants.push_back(kept.strides[num_outputs].back());
  }
  signature.compute = call.compute;
  for (const at::Tensor& t : call.inputs)
    signature.inputs.push_back(t.scalar_type());
  for (const PlannedOutput& output : plan.outputs)
    signature.outputs.push_back(output.dtype);
  signature.kept_rank = static_cast<int>(kept.sizes.size());
  signature.reduced_rank = static_cast<int>(red.sizes.size());
  // Column order when the reduction runs across columns that are contiguous in the first input
  // and contiguous or broadcast in the others (sum over the rows of [N, C]; layer norm's
  // weight gradient, with per-row statistics broadcast along the columns): walking one column
  // at a time would stride through memory.
  const size_t first_input = num_outputs;
  if (fusion::columnOrderSupported(*call.op) && kept.sizes.back() >= 8 &&
      red.strides[first_input].back() != 1 && kept.strides[first_input].back() == 1) {
    bool columns_dense = true;
    for (size_t i = first_input; i < num_operands; ++i)
      columns_dense &= kept.strides[i].back() == 1 || kept.strides[i].back() == 0;
    signature.column_order = columns_dense;
  }
  // Blocked rows when one kept dimension lies between reduced ones in the first input (a batch
  // norm's channel): its rows are short runs far apart (ReductionSignature::blocked_rows).
  if (fusion::blockedRowsSupported(*call.op) && !signature.column_order && kept.sizes.size() == 1 &&
      red.sizes.size() >= 2 && kept.sizes[0] > 1) {
    const int64_t kept_stride = kept.strides[first_input][0];
    signature.blocked_rows = red.strides[first_input].front() > kept_stride &&
                             red.strides[first_input].back() < kept_stride;
  }
  for (size_t i = 0; i < num_operands; ++i) {
    const bool is_input = i >= first_input;
    const bool reduce_output = !is_input && !call.op->elementOutput(i);
    const int64_t innermost = reduce_output || (is_input && signature.column_order)
                                  ? kept.strides[i].back()
                                  : red.strides[i].back();
    signature.inner.push_back(fusion::innerStrideClass(innermost, is_input));
  }
  launch.key = signature.key();

  for (size_t i = 0; i < num_operands; ++i) {
    const bool is_output = i < num_outputs;
    PlannedOperand& operand = launch.operands.emplace_back();
    operand.role = is_output ? OperandRole::kOutput : OperandRole::kInput;
    operand.index = static_cast<int>(is_output ? i : i - num_outputs);
    // An output of a reduction has the kept dimensions only.
    const bool reduce_output = is_output && !call.op->elementOutput(i);
    operand.sizes = kept.sizes;
    operand.strides = kept.strides[i];
    if (!reduce_output) {
      operand.sizes.append(red.sizes.begin(), red.sizes.end());
      operand.strides.append(red.strides[i].begin(), red.strides[i].end());
    }
  }
  for (double p : call.params)
    launch.words.push_back(at::isFloatingType(call.compute) ? floatSlot(p)
                                                            : static_cast<int64_t>(p));
  launch.words.push_back(reduced_numel);
  const int64_t kept_numel = c10::multiply_integers(kept.sizes);
  launch.range = kept.sizes[0];
  launch.work_per_index = kept_numel / kept.sizes[0] * std::max<int64_t>(reduced_numel, 1);
  splitLongRow(plan); // one long row: chunks on every thread, then their partials combined
  return plan;
}

c10::optional<TensorList> launchReduction(const ReductionCall& call, LaunchCounter* launches) {
  const c10::optional<LaunchPlan> plan = planReduction(call);
  if (!plan) return c10::nullopt;
  c10::optional<TensorList> outputs = executePlan(*plan, call.inputs, call.outputs, launches);
  // Not the scratch outputs a split row appends (reduction_split.h).
  const size_t returned = call.outputs.empty() ? call.output_dtypes.size() : call.outputs.size();
  if (outputs) outputs->resize(returned);
  return outputs;
}

c10::optional<TensorList>
launchNamedReduction(const char* op, TensorList inputs, c10::SmallVector<int64_t, 6> dims,
                     TensorList outputs, c10::SmallVector<double, 2> params,
                     LaunchCounter* launches, c10::SmallVector<int64_t, 2> constants) {
  ReductionCall call;
  call.op = fusion::findReductionOp(op);
  TORCH_INTERNAL_ASSERT(call.op != nullptr, "[device] no registry reduction named ", op);
  call.dims = std::move(dims);
  call.compute = inputs[0].scalar_type();
  call.output_dtypes.assign(call.op->num_outputs, call.compute);
  call.inputs = std::move(inputs);
  call.outputs = std::move(outputs);
  call.params = std::move(params);
  call.constants = std::move(constants);
  return launchReduction(call, launches);
}

} // namespace torchneuron

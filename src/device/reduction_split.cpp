#include "device/reduction_split.h"

#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <vector>

#include "fusion/op_registry.h"

namespace torchneuron {

int64_t rowChunks(int64_t elements, int64_t outermost) {
  if (elements < kSplitRowMinElements) return 0;
  constexpr int64_t kMinChunks = 4, kMaxChunks = 64, kMinChunkElements = 4096;
  for (int64_t chunks = std::min(kMaxChunks, elements / kMinChunkElements); chunks >= kMinChunks;
       --chunks)
    if (outermost % chunks == 0) return chunks;
  return 0;
}

void splitLongRow(LaunchPlan& plan) {
  if (plan.launches.size() != 1) return;
  const PlannedLaunch& whole = plan.launches.front();
  const fusion::ReductionSignature& signature = whole.reduction;
  const fusion::ReductionOp& op = *signature.op;
  // One output with one kept row, every input over the same reduced dimensions: operands
  // [output: sizes {1}] then [input: sizes {1, r0, r1, ...}], r0 * r1 * ... = n.
  if (whole.kind != KernelKind::kReduction || !op.partials || op.row_output || op.static_window ||
      signature.column_order || signature.outputs.size() != 1 || signature.kept_rank != 1)
    return;
  const PlannedOperand& output = whole.operands.front();
  if (output.sizes.size() != 1 || output.sizes[0] != 1) return;
  const int64_t elements = whole.words.back();
  const DimVector& row = whole.operands.back().sizes;
  for (size_t i = 1; i < whole.operands.size(); ++i) {
    const PlannedOperand& input = whole.operands[i];
    if (input.role != OperandRole::kInput || input.sizes != row ||
        static_cast<int>(row.size()) != 1 + signature.reduced_rank || row[0] != 1 ||
        c10::multiply_integers(row.begin() + 1, row.end()) != elements)
      return;
  }
  const int64_t outermost = row[1];
  const int64_t chunks = rowChunks(elements, outermost);
  if (chunks == 0) return;
  const fusion::ReductionOp::Partials how =
      op.partials(std::vector<int64_t>(signature.constants.begin(), signature.constants.end()));
  if (how.op.empty()) return;
  const fusion::ReductionOp* combine = fusion::findReductionOp(how.op);
  // A combining op with run-time params is the op itself, and gets the same params.
  TORCH_INTERNAL_ASSERT(
      combine != nullptr && !combine->row_output && (combine->num_params == 0 || combine == &op),
      "[device] ", op.name, " names no reduction to combine its partials: ", how.op);
  const at::ScalarType partial_dtype =
      op.widen_partials && at::isFloatingType(signature.compute) ? at::kDouble : signature.compute;
  const int64_t chunk = elements / chunks; // elements of a chunk

  PlannedOutput& partials = plan.outputs.emplace_back();
  partials.sizes = {chunks};
  partials.strides = {1};
  partials.dtype = partial_dtype;
  partials.device = plan.outputs.front().device;
  const int partials_index = static_cast<int>(plan.outputs.size() - 1);

  // 1. The op over [chunks, r0 / chunks, r1, ...] into the partials: the outermost reduced
  //    dimension is cut into the chunks, the kept one.
  PlannedLaunch first = whole;
  first.reduction.outputs = {partial_dtype};
  first.reduction.inner[0] = fusion::innerStrideClass(1, false);
  first.operands[0] = PlannedOperand{OperandRole::kOutput, partials_index, 0, {chunks}, {1}};
  const int64_t outer_per_chunk = outermost / chunks;
  for (size_t i = 1; i < first.operands.size(); ++i) {
    PlannedOperand& input = first.operands[i];
    const int64_t stride = input.strides[1];
    input.sizes[0] = chunks;
    input.strides[0] = stride * outer_per_chunk;
    input.sizes[1] = outer_per_chunk;
  }
  first.words.back() = chunk;
  first.range = chunks;
  first.work_per_index = chunk;
  first.interned_reduction = nullptr;
  first.key = first.reduction.key();

  // 2. The combining op over the partials into the output.
  PlannedLaunch second;
  second.kind = KernelKind::kReduction;
  fusion::ReductionSignature& combined = second.reduction;
  combined.op = combine;
  combined.constants.assign(how.constants.begin(), how.constants.end());
  combined.compute = partial_dtype;
  combined.inputs = {partial_dtype};
  combined.outputs = signature.outputs;
  combined.kept_rank = 1;
  combined.reduced_rank = 1;
  combined.inner = {signature.inner[0], fusion::innerStrideClass(1, true)};
  second.operands.push_back(output);
  second.operands.push_back(
      PlannedOperand{OperandRole::kOutput, partials_index, 0, {1, chunks}, {chunks, 1}});
  second.words.assign(whole.words.begin(), whole.words.begin() + combine->num_params);
  second.words.push_back(chunks);
  second.range = 1;
  second.work_per_index = chunks;
  second.key = combined.key();

  plan.launches.clear();
  plan.launches.push_back(std::move(first));
  plan.launches.push_back(std::move(second));
}

} // namespace torchneuron

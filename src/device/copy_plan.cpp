#include "device/copy_plan.h"

#include "device/compiled_ops.h"
#include "device/device.h"
#include "device/plan_executor.h"
#include "support/made_once.h"

namespace torchneuron {
namespace {

// The copy op's binding: the destination is written in place and any dtype converts to its own.
// Copies count as compiled launches of aten::copy_.
const NativeOpBinding& copyBinding() {
  static MadeOnce<const NativeOpBinding> binding; // fork-safe (made_once.h): it takes a lock
  return binding.get([] {
    auto* copy_binding = new NativeOpBinding();
    NativeOpBinding& copy = *copy_binding;
    copy.op = fusion::findElementwiseOp("copy");
    copy.name = "aten::copy_";
    copy.writes_output = true;
    copy.in_place = true;
    copy.casts_freely = true;
    copy.launches = launchCounter(LaunchKind::kCompiled, copy.name);
    return copy_binding;
  });
}

BoundCall copyCall(const at::Tensor& src) {
  BoundCall call;
  call.operands.push_back(src);
  call.specs.push_back(&copyBinding().op->operands[0]);
  call.scalars.emplace_back();
  return call;
}

} // namespace

c10::optional<LaunchPlan> planCopy(const at::Tensor& src, const WrittenOperand& target) {
  return planElementwiseInto(copyBinding(), copyCall(src), target);
}

bool isAtenBlockedTranspose(const at::Tensor& src, const at::Tensor& dst) {
  constexpr int64_t kMinimumElements = 60 * 60; // ATen's MIN_SZ
  return src.device().type() == kNeuronDeviceType && dst.device().type() == kNeuronDeviceType &&
         src.layout() == at::kStrided && dst.layout() == at::kStrided && src.dim() == 2 &&
         src.numel() >= kMinimumElements && src.stride(0) == 1 && src.stride(1) == src.size(0) &&
         dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
         dst.sizes() == src.sizes() && dst.is_neg() == src.is_neg() &&
         dst.is_conj() == src.is_conj() && !src.is_alias_of(dst);
}

bool copyWithCompiledKernel(const at::Tensor& src, const at::Tensor& dst) {
  if (src.device().type() != kNeuronDeviceType || dst.device().type() != kNeuronDeviceType)
    return false;
  if (src.is_alias_of(dst)) return false; // overlapping copies keep ATen's own handling
  BoundCall call = copyCall(src);
  call.output = dst;
  const c10::optional<LaunchPlan> plan = planElementwise(copyBinding(), call);
  return plan && executePlan(*plan, call.operands, {dst}, copyBinding().launches).has_value();
}

} // namespace torchneuron

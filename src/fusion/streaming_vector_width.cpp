#include "fusion/streaming_vector_width.h"

#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

namespace torchneuron::fusion {
namespace {

// Intrinsics the x86 code generator turns into a few vector instructions, never a call.
bool inlineIntrinsic(llvm::Intrinsic::ID id) {
  switch (id) {
  case llvm::Intrinsic::fma:
  case llvm::Intrinsic::fmuladd:
  case llvm::Intrinsic::fabs:
  case llvm::Intrinsic::copysign:
  case llvm::Intrinsic::minnum:
  case llvm::Intrinsic::maxnum:
  case llvm::Intrinsic::minimum:
  case llvm::Intrinsic::maximum:
  case llvm::Intrinsic::floor:
  case llvm::Intrinsic::ceil:
  case llvm::Intrinsic::trunc:
  case llvm::Intrinsic::rint:
  case llvm::Intrinsic::nearbyint:
  case llvm::Intrinsic::round:
  case llvm::Intrinsic::roundeven:
  case llvm::Intrinsic::sqrt:
  case llvm::Intrinsic::smax:
  case llvm::Intrinsic::smin:
  case llvm::Intrinsic::umax:
  case llvm::Intrinsic::umin:
  case llvm::Intrinsic::abs:
  case llvm::Intrinsic::ctpop:
  case llvm::Intrinsic::ctlz:
  case llvm::Intrinsic::cttz:
  case llvm::Intrinsic::fshl:
  case llvm::Intrinsic::fshr:
  case llvm::Intrinsic::is_fpclass:
  case llvm::Intrinsic::assume:
  case llvm::Intrinsic::lifetime_start:
  case llvm::Intrinsic::lifetime_end:
  case llvm::Intrinsic::stacksave:
  case llvm::Intrinsic::stackrestore:
  case llvm::Intrinsic::x86_sse_sfence: // after non-temporal stores (non_temporal_stores.h)
    return true;
  default:
    return false;
  }
}

// Whether `function` calls anything but inline intrinsics: a math library function (tanhf),
// an intrinsic that becomes one (llvm.exp), or an unknown callee.
bool callsMath(const llvm::Function& function) {
  for (const llvm::BasicBlock& block : function)
    for (const llvm::Instruction& instruction : block) {
      const auto* call = llvm::dyn_cast<llvm::CallBase>(&instruction);
      if (call == nullptr) continue;
      const llvm::Function* callee = call->getCalledFunction();
      if (callee == nullptr || !callee->isIntrinsic() || !inlineIntrinsic(callee->getIntrinsicID()))
        return true;
    }
  return false;
}

} // namespace

bool preferHalfWidthVectorsForStreaming(llvm::Module& module, const std::string& entry) {
  llvm::Function* kernel = module.getFunction("kernel");
  if (kernel == nullptr || !kernel->hasFnAttribute(kElementwiseKernel) || callsMath(*kernel))
    return false;
  kernel->addFnAttr("prefer-vector-width", "256");
  if (llvm::Function* entry_point = module.getFunction(entry))
    entry_point->addFnAttr("prefer-vector-width", "256");
  return true;
}

} // namespace torchneuron::fusion

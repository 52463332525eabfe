#include "fusion/unmasked_selects.h"

#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

namespace torchneuron::fusion {

int keepSelectedLoadsUnmasked(llvm::Module& module) {
  int changed = 0;
  for (llvm::Function& function : module)
    for (llvm::BasicBlock& block : function)
      for (llvm::Instruction& instruction : block) {
        auto* select = llvm::dyn_cast<llvm::SelectInst>(&instruction);
        if (select == nullptr || !select->getType()->isVectorTy()) continue;
        for (unsigned operand = 1; operand <= 2; ++operand) {
          auto* load = llvm::dyn_cast<llvm::LoadInst>(select->getOperand(operand));
          if (load == nullptr) continue;
          auto* frozen = new llvm::FreezeInst(load, load->getName() + ".unmasked", select);
          select->setOperand(operand, frozen);
          ++changed;
        }
      }
  return changed;
}

} // namespace torchneuron::fusion

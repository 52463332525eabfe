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
          // Only a load the select alone uses can become a masked load. A load the select's
          // compare reads too (relu's select(x < 0, 0, x)) is what the code generator turns into
          // a min or max with the load folded in; a freeze would hide that pattern from it.
          auto* load = llvm::dyn_cast<llvm::LoadInst>(select->getOperand(operand));
          if (load == nullptr || !load->hasOneUse()) continue;
          auto* frozen = new llvm::FreezeInst(load, load->getName() + ".unmasked", select);
          select->setOperand(operand, frozen);
          ++changed;
        }
      }
  return changed;
}

} // namespace torchneuron::fusion

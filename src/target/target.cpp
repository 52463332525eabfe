#include "target/target.h"

#include "support/hash.h"

namespace torchneuron {

std::string TargetDescription::compileOptions() const {
  auto digest = [](const std::string& text) {
    return hashBytes128(text.data(), text.size()).hex();
  };
  return "target " + name + "\nlowering " + lowering_pipeline + "\noptimization " +
         digest(optimization_pipeline) + "\nvector-math " + digest(vector_math);
}

bool TargetDescription::operator==(const TargetDescription& o) const {
  return name == o.name && triple == o.triple && cpu == o.cpu && features == o.features &&
         llvm_version == o.llvm_version && lowering_pipeline == o.lowering_pipeline &&
         optimization_pipeline == o.optimization_pipeline && vector_math == o.vector_math;
}

ObjectCode Target::compile(const std::string& mlir_module, const std::string& entry) const {
  return emitObject(lower(mlir_module, entry));
}

} // namespace torchneuron

#pragma once
// The host CPU as the device target: MLIR lowered and compiled by LLVM for this machine
// (fusion/compiler.h), linked with ORC and launched with TBB (src/launcher).

#include "fusion/compiler.h"
#include "target/target.h"

namespace torchneuron {

class HostCpuTarget final : public Target {
public:
  // Describes the compile at once (LLVM's pipeline is built and printed: a few milliseconds).
  explicit HostCpuTarget(fusion::CodegenOptions options = fusion::CodegenOptions());

  const TargetDescription& description() const override { return description_; }
  std::unique_ptr<LoweredKernel> lower(const std::string& mlir_module,
                                       const std::string& entry) const override;
  ObjectCode emitObject(std::unique_ptr<LoweredKernel> kernel) const override;
  std::shared_ptr<LoadedCode> link(const std::vector<char>& object,
                                   const std::string& entry) const override;
  void launch(KernelFunction kernel, const int64_t* slots, const LaunchShape& shape) const override;
  void launchTable(const TableEntry* entries, size_t count, int threads) const override;

private:
  const fusion::CodegenOptions options_;
  TargetDescription description_;
};

} // namespace torchneuron

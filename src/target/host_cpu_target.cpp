#include "target/host_cpu_target.h"

#include <c10/util/Exception.h>

#include "support/made_once.h"

namespace torchneuron {
namespace {

class HostLoweredKernel final : public LoweredKernel {
public:
  explicit HostLoweredKernel(fusion::LoweredModule module) : module(std::move(module)) {}
  const std::string& entry() const override { return module.entry(); }
  std::string text() const override { return module.llvmIR(); }

  fusion::LoweredModule module;
};

} // namespace

HostCpuTarget::HostCpuTarget(fusion::CodegenOptions options) : options_(std::move(options)) {
  const fusion::HostCpu& host = fusion::hostCpu();
  const fusion::CodegenDescription codegen = fusion::describeCodegen(options_);
  description_.name = "host-cpu";
  description_.triple = host.triple;
  description_.cpu = host.cpu;
  description_.features = host.features;
  description_.llvm_version = host.llvm_version;
  description_.lowering_pipeline = codegen.lowering_pipeline;
  description_.optimization_pipeline = codegen.optimization_pipeline;
  description_.vector_math = codegen.vector_math;
}

std::unique_ptr<LoweredKernel> HostCpuTarget::lower(const std::string& mlir_module,
                                                    const std::string& entry) const {
  return std::make_unique<HostLoweredKernel>(fusion::lowerKernel(mlir_module, entry, options_));
}

ObjectCode HostCpuTarget::emitObject(std::unique_ptr<LoweredKernel> kernel) const {
  auto* host = dynamic_cast<HostLoweredKernel*>(kernel.get());
  TORCH_INTERNAL_ASSERT(host != nullptr, "[target] a kernel lowered by another target");
  return fusion::emitObjectCode(std::move(host->module));
}

std::shared_ptr<LoadedCode> HostCpuTarget::link(const std::vector<char>& object,
                                                const std::string& entry) const {
  return loadKernelObject(object, entry);
}

void HostCpuTarget::launch(KernelFunction kernel, const int64_t* slots,
                           const LaunchShape& shape) const {
  launchKernel(kernel, slots, shape);
}

void HostCpuTarget::launchTable(const TableEntry* entries, size_t count, int threads) const {
  launchKernelTable(entries, count, threads);
}

// MadeOnce (support/made_once.h): a child forked while another thread made the target makes it
// again instead of waiting forever (a function-local static's guard would), and a made target
// costs one atomic load per launch (std::call_once alone costs two thread-local writes and a
// pthread_once call each time).
const Target& deviceTarget() {
  static MadeOnce<const Target> made;
  return made.get([]() -> const Target* { return new HostCpuTarget(); });
}

} // namespace torchneuron

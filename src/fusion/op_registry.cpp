#include "fusion/op_registry.h"
#include "support/made_once.h"

#include <c10/util/Exception.h>

#include <unordered_map>

namespace torchneuron::fusion {
namespace {

struct Registry {
  std::vector<ElementwiseOp> ops;
  std::unordered_map<std::string, size_t> by_name;
  std::vector<ReductionOp> reductions;

  Registry() {
    addUnaryOps(ops);
    addBinaryOps(ops);
    addActivationOps(ops);
    addReductionOps(reductions);
    for (size_t i = 0; i < ops.size(); ++i) {
      const bool inserted = by_name.emplace(ops[i].name, i).second;
      TORCH_INTERNAL_ASSERT(inserted, "[fusion] op registered twice: ", ops[i].name);
    }
  }
};

const Registry& registry() {
  static MadeOnce<const Registry> instance; // fork-safe (made_once.h); never destroyed
  return instance.get([] { return new Registry(); });
}

} // namespace

const ElementwiseOp* findElementwiseOp(const std::string& name) {
  const Registry& r = registry();
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : &r.ops[it->second];
}

const std::vector<ElementwiseOp>& elementwiseOps() { return registry().ops; }

bool notBFloat16(c10::ScalarType dtype, const std::vector<int64_t>&) {
  return dtype != c10::kBFloat16;
}

const std::vector<ReductionOp>& reductionOps() { return registry().reductions; }

const ReductionOp* findReductionOp(const std::string& name) {
  for (const ReductionOp& op : registry().reductions)
    if (op.name == name) return &op;
  return nullptr;
}

} // namespace torchneuron::fusion

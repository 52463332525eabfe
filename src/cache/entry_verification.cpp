#include "cache/entry_verification.h"

#include <optional>

#include "support/hash.h"
#include "target/target.h"

namespace torchneuron {

LoadRequirements hostRequirements() {
  const TargetDescription& target = deviceTarget().description();
  return {kEngineVersion,  target.llvm_version,     target.triple,
          target.features, target.compileOptions(), ""};
}

std::string storeKeyFor(const LoadRequirements& r) {
  std::string material;
  for (const std::string* field : {&r.engine_version, &r.llvm_version, &r.target_triple,
                                   &r.cpu_features, &r.compile_options, &r.key_material})
    material += std::to_string(field->size()) + ":" + *field;
  return hashBytes128(material.data(), material.size()).hex();
}

std::string ownStoreKey(const ExecutableContainer& c) {
  return storeKeyFor({c.engine_version, c.llvm_version, c.target_triple, c.cpu_features,
                      c.compile_options, c.key_material});
}

std::string misfiledProblem(const std::string& store_key, const ExecutableContainer& container) {
  const std::string own = ownStoreKey(container);
  if (own == store_key) return "";
  return "filed under " + store_key + ", but its compile inputs hash to " + own +
         " (moved or copied there from another entry; never loaded)";
}

std::string verifyEntryForHost(const std::string& store_key, const std::vector<char>& bytes,
                               ExecutableContainer* container) {
  std::string why;
  std::optional<ExecutableContainer> parsed = parseContainer(bytes, &why);
  if (!parsed) return why;
  LoadRequirements required = hostRequirements();
  required.key_material = parsed->key_material;
  why = verifyContainer(*parsed, required);
  if (why.empty() && storeKeyFor(required) != store_key)
    why = "the entry is filed under another key";
  if (why.empty() && container) *container = std::move(*parsed);
  return why;
}

} // namespace torchneuron

#include "fusion/kernel_signature.h"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "fusion/op_registry.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron::fusion {
namespace {

const char* strideCode(InnerStride stride) {
  switch (stride) {
  case InnerStride::kContiguous:
    return "c";
  case InnerStride::kBroadcast:
    return "b";
  case InnerStride::kStrided:
    return "s";
  }
  return "?";
}

} // namespace

Hash64 ElementwiseSignature::key() const {
  Hasher h;
  h.str("elementwise").str(op->name);
  h.u64(constants.size());
  for (int64_t c : constants)
    h.i64(c);
  h.u64(present.size());
  for (bool p : present)
    h.u64(p);
  h.i64(static_cast<int64_t>(compute)).i64(static_cast<int64_t>(output));
  h.u64(inputs.size());
  for (c10::ScalarType t : inputs)
    h.i64(static_cast<int64_t>(t));
  h.i64(rank);
  for (InnerStride s : inner)
    h.u64(static_cast<uint64_t>(s));
  h.i64(aliased_input);
  return h.digest();
}

std::string ElementwiseSignature::describe() const {
  std::string text = op->name + "(";
  for (size_t i = 0; i < inputs.size(); ++i)
    text += std::string(i ? "," : "") + c10::toString(inputs[i]);
  text += std::string("->") + c10::toString(output) + ") rank " + std::to_string(rank) + " [";
  for (size_t i = 0; i < inner.size(); ++i)
    text += std::string(i ? "," : "") + strideCode(inner[i]);
  text += "]";
  for (int64_t c : constants)
    text += " " + std::to_string(c);
  return text;
}

Hash64 ReductionSignature::key() const {
  Hasher h;
  h.str("reduction").str(op->name);
  h.u64(constants.size());
  for (int64_t c : constants)
    h.i64(c);
  h.i64(static_cast<int64_t>(compute));
  h.u64(inputs.size());
  for (c10::ScalarType t : inputs)
    h.i64(static_cast<int64_t>(t));
  h.u64(outputs.size());
  for (c10::ScalarType t : outputs)
    h.i64(static_cast<int64_t>(t));
  h.i64(kept_rank).i64(reduced_rank);
  for (InnerStride s : inner)
    h.u64(static_cast<uint64_t>(s));
  h.u64(column_order);
  if (blocked_rows) h.str("blocked rows"); // other keys unchanged
  return h.digest();
}

std::string ReductionSignature::describe() const {
  std::string text = op->name + "(";
  for (size_t i = 0; i < inputs.size(); ++i)
    text += std::string(i ? "," : "") + c10::toString(inputs[i]);
  text += "->";
  for (size_t i = 0; i < outputs.size(); ++i)
    text += std::string(i ? "," : "") + c10::toString(outputs[i]);
  return text + ") kept " + std::to_string(kept_rank) + " reduced " + std::to_string(reduced_rank) +
         (column_order ? " column order" : "") + (blocked_rows ? " blocked rows" : "");
}

int ReductionSignature::outputRank(size_t o) const {
  return op->elementOutput(o) ? kept_rank + reduced_rank : kept_rank;
}

bool columnOrderSupported(const ReductionOp& op) {
  // A window's loops are unrolled over its constant shape instead (static_window).
  return op.passes == 1 && !op.row_output && !op.needs_index && !op.static_window;
}

bool blockedRowsSupported(const ReductionOp& op) {
  return op.row_output && op.row_stats > 0 && !op.needs_index && !op.static_window &&
         op.store_pass < 0 && !op.pass_results;
}

std::string kernelEntryName(Hash64 key) { return "neuron_kernel_" + hexOf(key); }

namespace {
std::mutex intern_mutex;

// One table per signature type. Never destroyed: launches may be recorded during static
// destruction. Bounded by the number of kernels the process plans (one entry per kernel key).
template <typename Signature> const Signature* intern(const Signature& signature, Hash64 key) {
  using Table = std::unordered_map<Hash64, std::unique_ptr<Signature>>;
  static MadeOnce<Table> table; // fork-safe (made_once.h)
  Table& interned = table.get([] { return new Table(); });
  holdAcrossFork<intern_mutex>(ForkRank::kSignatureIntern);
  std::lock_guard<std::mutex> lock(intern_mutex);
  std::unique_ptr<Signature>& slot = interned[key];
  if (!slot) slot = std::make_unique<Signature>(signature);
  return slot.get();
}
} // namespace

const ElementwiseSignature* internSignature(const ElementwiseSignature& signature, Hash64 key) {
  return intern(signature, key);
}

const ReductionSignature* internSignature(const ReductionSignature& signature, Hash64 key) {
  return intern(signature, key);
}

} // namespace torchneuron::fusion

// The elementwise members fused with a reduction (fusion/fused_kernel.h): the prologue members
// that compute the reduction's inputs as its loops read them, the epilogue members over the
// reduction's outputs (over the kept dimensions, or over the rows of a row-wise op) and the row
// epilogue over each row's results; their memref arguments, params and loads. The emitter:
// reduction_emitter.h.

#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "fusion/fused_member_lowering.h"
#include "fusion/memref_type.h"
#include "fusion/reduction_emitter.h"

namespace torchneuron::fusion::reduction_detail {

std::vector<Value> ReductionEmitter::loadExternals(const std::vector<FusedExternal>& externals,
                                                   const std::vector<std::string>& types,
                                                   const std::string& prefix,
                                                   const std::vector<std::string>& indices) {
  std::vector<Value> values;
  for (size_t e = 0; e < externals.size(); ++e) {
    std::vector<std::string> at = indices;
    if (externals[e].inner == InnerStride::kBroadcast) at.back() = "%c0";
    const std::string name = e_.freshName();
    e_.line(name + " = memref.load " + prefix + std::to_string(e) + "[" + join(at) +
            "] : " + types[e]);
    values.push_back(Value{name, storageType(externals[e].dtype)});
  }
  return values;
}

std::vector<Value> ReductionEmitter::emitEpilogue(const std::vector<Value>& outputs,
                                                  const std::vector<std::string>& indices) {
  const FusedReductionConsumer& consumer = *prologue_->consumer;
  // lowerFusedMember reads kMember sources from `values` and the rest from `inputs`: the
  // epilogue's externals, then the reduction's outputs.
  std::vector<Value> inputs =
      loadExternals(consumer.epilogue_externals, epilogue_external_types_, "%z", indices);
  const int first_output = static_cast<int>(inputs.size());
  inputs.insert(inputs.end(), outputs.begin(), outputs.end());
  std::vector<Value> values;
  for (size_t m = 0; m < consumer.epilogue.size(); ++m) {
    FusedMember member = consumer.epilogue[m];
    for (FusedSource& source : member.sources) {
      if (source.kind != FusedSource::kReductionOutput) continue;
      TORCH_INTERNAL_ASSERT(!outputs[source.index].name.empty(), "[fusion] epilogue member ", m,
                            " reads a per-row result over the rows");
      source = {FusedSource::kExternal, first_output + source.index};
    }
    values.push_back(lowerFusedMember(e_, member, epilogue_params_[m], values, inputs));
    if (member.stored)
      e_.line("memref.store " + values[m].name + ", %y" + std::to_string(m) + "[" + join(indices) +
              "] : " + epilogue_types_[m]);
  }
  return values;
}

void ReductionEmitter::emitRowEpilogue(const std::vector<Value>& outputs,
                                       const std::vector<Value>& kept) {
  const FusedReductionConsumer& consumer = *prologue_->consumer;
  const std::string prefix = "%rw";
  for (int j = 0; j < m_; ++j)
    e_.line("scf.for " + prefix + std::to_string(j) + " = %c0 to %R" + std::to_string(j) +
            " step %c1 {");
  const std::vector<std::string> indices = allIndices(prefix);
  // lowerFusedMember reads kMember sources from `values` and the rest from `inputs`: the row
  // externals, then the reduction's outputs, then the kept epilogue's members.
  std::vector<Value> inputs =
      loadExternals(consumer.row_externals, row_external_types_, "%rx", indices);
  const int first_output = static_cast<int>(inputs.size());
  inputs.insert(inputs.end(), outputs.begin(), outputs.end());
  const int first_kept = static_cast<int>(inputs.size());
  inputs.insert(inputs.end(), kept.begin(), kept.end());
  // Stored prologue members' values at the element, read back from their own memrefs (which
  // the first pass over the row wrote), once each.
  std::vector<int> prologue_input(prologue_->members.size(), -1);
  for (const FusedMember& member : consumer.row_epilogue)
    for (const FusedSource& source : member.sources) {
      if (source.kind != FusedSource::kPrologueMember || prologue_input[source.index] >= 0)
        continue;
      const std::string name = e_.freshName();
      e_.line(name + " = memref.load %m" + std::to_string(source.index) + "[" + join(indices) +
              "] : " + member_types_[source.index]);
      prologue_input[source.index] = static_cast<int>(inputs.size());
      inputs.push_back(Value{name, storageType(prologue_->members[source.index].signature.output)});
    }
  std::vector<Value> values;
  for (size_t m = 0; m < consumer.row_epilogue.size(); ++m) {
    FusedMember member = consumer.row_epilogue[m];
    for (FusedSource& source : member.sources) {
      if (source.kind == FusedSource::kReductionOutput)
        source = {FusedSource::kExternal, first_output + source.index};
      else if (source.kind == FusedSource::kKeptMember)
        source = {FusedSource::kExternal, first_kept + source.index};
      else if (source.kind == FusedSource::kPrologueMember)
        source = {FusedSource::kExternal, prologue_input[source.index]};
    }
    values.push_back(lowerFusedMember(e_, member, row_params_[m], values, inputs));
    if (member.stored)
      e_.line("memref.store " + values[m].name + ", %ro" + std::to_string(m) + "[" + join(indices) +
              "] : " + row_types_[m]);
  }
  for (int j = 0; j < m_; ++j)
    e_.line("}");
}

void ReductionEmitter::preparePrologue() {
  const std::vector<FusedMember>& members = prologue_->members;
  member_types_.resize(members.size());
  for (size_t m = 0; m < members.size(); ++m)
    if (members[m].stored)
      member_types_[m] = stridedMemrefType(k_ + m_, storageType(members[m].signature.output).mlir,
                                           members[m].signature.inner[0]);
  for (const FusedExternal& external : prologue_->externals)
    external_types_.push_back(stridedMemrefType(k_ + m_, storageType(external.dtype).mlir,
                                                external.inner, classifiedDim()));
  for (size_t m = 0; m < members.size(); ++m) {
    const ElementwiseSignature& sig = members[m].signature;
    for (size_t p = 0; p < sig.op->params.size(); ++p)
      member_param_arguments_.push_back(
          Value{"%q" + std::to_string(m) + "_" + std::to_string(p), paramType(sig)});
  }
  const FusedReductionConsumer& consumer = *prologue_->consumer;
  const int epilogue_rank = consumer.epilogue_over_rows ? k_ + m_ : k_;
  prepareEpilogue(consumer.epilogue, consumer.epilogue_externals, epilogue_rank, "%r",
                  epilogue_types_, epilogue_external_types_, epilogue_param_arguments_);
  prepareEpilogue(consumer.row_epilogue, consumer.row_externals, k_ + m_, "%rp", row_types_,
                  row_external_types_, row_param_arguments_);
}

void ReductionEmitter::prepareEpilogue(const std::vector<FusedMember>& members,
                                       const std::vector<FusedExternal>& externals, int rank,
                                       const std::string& param_prefix,
                                       std::vector<std::string>& types,
                                       std::vector<std::string>& external_types,
                                       std::vector<Value>& params) {
  for (size_t m = 0; m < members.size(); ++m) {
    const ElementwiseSignature& sig = members[m].signature;
    types.push_back(members[m].stored
                        ? stridedMemrefType(rank, storageType(sig.output).mlir, sig.inner[0])
                        : std::string());
    for (size_t p = 0; p < sig.op->params.size(); ++p)
      params.push_back(
          Value{param_prefix + std::to_string(m) + "_" + std::to_string(p), paramType(sig)});
  }
  for (const FusedExternal& external : externals)
    external_types.push_back(
        stridedMemrefType(rank, storageType(external.dtype).mlir, external.inner));
}

void ReductionEmitter::convertMemberParams() {
  if (prologue_ == nullptr) return;
  size_t next = 0;
  member_params_.resize(prologue_->members.size());
  for (size_t m = 0; m < prologue_->members.size(); ++m) {
    const ElementwiseSignature& sig = prologue_->members[m].signature;
    for (size_t p = 0; p < sig.op->params.size(); ++p)
      member_params_[m].push_back(
          e_.convert(member_param_arguments_[next++], computeType(sig.compute)));
  }
  convertParams(prologue_->consumer->epilogue, epilogue_param_arguments_, epilogue_params_);
  convertParams(prologue_->consumer->row_epilogue, row_param_arguments_, row_params_);
}

void ReductionEmitter::convertParams(const std::vector<FusedMember>& members,
                                     const std::vector<Value>& arguments,
                                     std::vector<std::vector<Value>>& params) {
  size_t next = 0;
  params.resize(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    const ElementwiseSignature& sig = members[m].signature;
    for (size_t p = 0; p < sig.op->params.size(); ++p)
      params[m].push_back(e_.convert(arguments[next++], computeType(sig.compute)));
  }
}

std::vector<Value> ReductionEmitter::emitMembers(const std::string& prefix, bool store_members) {
  const std::vector<std::string> indices = allIndices(prefix);
  const std::vector<Value> externals =
      loadExternals(prologue_->externals, external_types_, "%e", indices);
  std::vector<Value> stored;
  for (size_t m = 0; m < prologue_->members.size(); ++m) {
    const FusedMember& member = prologue_->members[m];
    stored.push_back(lowerFusedMember(e_, member, member_params_[m], stored, externals));
    if (store_members && member.stored)
      e_.line("memref.store " + stored[m].name + ", %m" + std::to_string(m) + "[" + join(indices) +
              "] : " + member_types_[m]);
  }
  return stored;
}

} // namespace torchneuron::fusion::reduction_detail

#include "tracer/op_record.h"
#include "support/made_once.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace torchneuron::tracer {
namespace {

constexpr uint64_t kInputSource = uint64_t{1} << 63;

// Per schema: its name's key and which arguments are run-time numbers. Filled on first use;
// read and written under the window lock (op_window.cpp), like everything here.
struct SchemaKeys {
  Hash64 name = 0;
  std::vector<bool> number; // per argument: a Scalar or float (run time, not key material)
};

const SchemaKeys& schemaKeys(const c10::OperatorHandle& op) {
  using Table = std::unordered_map<const c10::FunctionSchema*, SchemaKeys>;
  static MadeOnce<Table> made; // fork-safe (made_once.h)
  Table* table = &made.get([] { return new Table(); });
  const c10::FunctionSchema& schema = op.schema();
  auto found = table->find(&schema);
  if (found != table->end()) return found->second;
  SchemaKeys keys;
  const c10::OperatorName& name = schema.operator_name();
  keys.name = Hasher().str(name.name).str(name.overload_name).digest();
  for (const c10::Argument& argument : schema.arguments()) {
    c10::TypePtr type = argument.type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    const c10::TypeKind kind = type->kind();
    keys.number.push_back(kind == c10::TypeKind::NumberType || kind == c10::TypeKind::FloatType);
  }
  return table->emplace(&schema, std::move(keys)).first->second;
}

// 0: contiguous; 1: some dimension broadcast (stride 0 over more than one element); 2: other.
uint64_t layoutClass(const at::Tensor& t) {
  if (t.is_contiguous()) return 0;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return 1;
  return 2;
}

void hashTensor(Hasher& hasher, const at::Tensor& t, SourceTable& sources) {
  if (!t.defined()) {
    hasher.u64(0x7e);
    return;
  }
  hasher.u64(static_cast<uint64_t>(t.device().type()))
      .u64(static_cast<uint64_t>(t.scalar_type()))
      .i64(t.dim())
      .u64(layoutClass(t));
  // A CPU number (a wrapped Python scalar) is a run-time value; a device tensor has a source.
  if (t.device().is_cpu() || !t.has_storage()) return;
  hasher.u64(sources.sourceOf(t.storage()));
}

// Each kind of value gets its own tag word, so values of different kinds never collide.
void hashValue(Hasher& hasher, const c10::IValue& value, bool number, SourceTable& sources) {
  if (value.isTensor()) return hashTensor(hasher.u64(1), value.toTensor(), sources);
  if (value.isTensorList()) {
    const c10::List<at::Tensor> list = value.toTensorList();
    hasher.u64(2).u64(list.size());
    for (const at::Tensor& t : list)
      hashTensor(hasher, t, sources);
    return;
  }
  if (value.isNone()) return void(hasher.u64(3));
  if (value.isList() && !value.isIntList() && !value.isDoubleList() && !value.isBoolList()) {
    // List[Optional[Tensor]] (index, index_put_'s indices): each element's tensor key or None.
    const c10::ArrayRef<c10::IValue> elements = value.toListRef();
    hasher.u64(10).u64(elements.size());
    for (const c10::IValue& element : elements) {
      if (element.isTensor())
        hashTensor(hasher, element.toTensor(), sources);
      else
        hasher.u64(3);
    }
    return;
  }
  // A number argument (alpha, a learning rate) is a run-time value: only its type is key.
  if (number || value.isDouble() || value.isComplexDouble())
    return void(hasher.u64(4).u64(value.isDouble() ? 1
                                  : value.isInt()  ? 2
                                  : value.isBool() ? 3
                                                   : 4));
  if (value.isInt()) return void(hasher.u64(5).i64(value.toInt()));
  if (value.isBool()) return void(hasher.u64(6).u64(value.toBool()));
  if (value.isIntList()) {
    hasher.u64(7);
    for (int64_t v : value.toIntList())
      hasher.i64(v);
    return;
  }
  if (value.isString()) return void(hasher.u64(8).str(value.toStringRef()));
  hasher.u64(9); // a device, layout, memory format or generator: its kind is enough
}

} // namespace

namespace {
size_t bucketOf(const c10::StorageImpl* storage, size_t mask) {
  const auto bits = reinterpret_cast<uintptr_t>(storage);
  return static_cast<size_t>((bits >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask;
}
} // namespace

SourceTable::Entry& SourceTable::entryOf(c10::StorageImpl* storage, uint64_t source, bool& made) {
  if (2 * (used_.size() + 1) > entries_.size()) grow();
  const size_t mask = entries_.size() - 1;
  for (size_t i = bucketOf(storage, mask);; i = (i + 1) & mask) {
    Entry& entry = entries_[i];
    if (entry.storage == storage) {
      made = false;
      return entry;
    }
    if (entry.storage == nullptr) {
      used_.reserve(used_.size() + 1);               // may throw: before the reference is taken
      c10::raw::weak_intrusive_ptr::incref(storage); // reserves the address (see above)
      entry = Entry{storage, source};
      used_.push_back(static_cast<uint32_t>(i));
      made = true;
      return entry;
    }
  }
}

// The new table is made before the old one is let go (allocation may throw; the references
// must stay counted exactly once either way).
void SourceTable::grow() {
  std::vector<Entry> bigger(entries_.empty() ? 256 : 2 * entries_.size());
  std::vector<uint32_t> used;
  used.reserve(bigger.size() / 2);
  const size_t mask = bigger.size() - 1;
  for (const Entry& entry : entries_) {
    if (entry.storage == nullptr) continue;
    size_t i = bucketOf(entry.storage, mask);
    while (bigger[i].storage != nullptr)
      i = (i + 1) & mask;
    bigger[i] = entry; // its weak reference moves with it
    used.push_back(static_cast<uint32_t>(i));
  }
  entries_.swap(bigger);
  used_.swap(used);
}

uint64_t SourceTable::sourceOf(const c10::Storage& storage) {
  bool made = false;
  Entry& entry = entryOf(storage.unsafeGetStorageImpl(), kInputSource | inputs_, made);
  if (made) ++inputs_;
  return entry.source;
}

void SourceTable::noteOutput(const c10::Storage& storage, int64_t step, int64_t slot) {
  const uint64_t source = (static_cast<uint64_t>(step) << 8) | static_cast<uint64_t>(slot & 0xff);
  bool made = false;
  entryOf(storage.unsafeGetStorageImpl(), source, made).source = source;
}

void SourceTable::clear() {
  for (uint32_t i : used_) {
    Entry& entry = entries_[i];
    c10::raw::weak_intrusive_ptr::decref(entry.storage); // may free the storage object
    entry = Entry();
  }
  used_.clear();
  inputs_ = 0;
}

Hash64 opRecordKey(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   SourceTable& sources) {
  const SchemaKeys& keys = schemaKeys(op);
  Hasher hasher;
  hasher.u64(keys.name);
  for (size_t i = 0; i < args.size(); ++i)
    hashValue(hasher, args[i], i < keys.number.size() && keys.number[i], sources);
  return hasher.digest();
}

} // namespace torchneuron::tracer

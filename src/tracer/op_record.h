#pragma once
// Canonical op records (DESIGN.md decision 3): what one op call contributes to its window's
// signature. A record names the op, and per argument the kind of value it is: for a tensor its
// dtype, rank, layout class and where it comes from (the output slot of an earlier step of the
// window, or a window input by order of first use), never its address; for an integer or bool
// argument (a dim, keepdim) its value; for a number argument (alpha, a learning rate) only its
// type. Sizes, strides and numbers are run-time arguments, so a changed size or scalar keeps
// the record, and a changed dtype, rank or operand source changes it.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <vector>

#include "support/hash.h"

namespace torchneuron::tracer {

// Where a window's tensors come from, keyed by storage. Holds a weak reference to every storage
// it names: a dead tensor's memory goes back to the allocator at once, while the storage
// object's address stays reserved, so no new storage can take it within the window (a reused
// address would give a new tensor an earlier step's source).
class SourceTable {
public:
  SourceTable() = default;
  SourceTable(const SourceTable&) = delete;
  SourceTable& operator=(const SourceTable&) = delete;
  ~SourceTable() { clear(); }

  // The source word of `storage`: an earlier step's output, or a window input (numbered in
  // order of first use; the first use assigns it).
  uint64_t sourceOf(const c10::Storage& storage);
  // `storage` now holds output `slot` of step `step`.
  void noteOutput(const c10::Storage& storage, int64_t step, int64_t slot);
  void clear();
  size_t size() const { return used_.size(); }

private:
  // Open addressing over storage addresses (every op looks up its operands and adds its
  // outputs: a node-based map cost an allocation per output). Each named storage holds one weak
  // reference, released by clear().
  struct Entry {
    c10::StorageImpl* storage = nullptr;
    uint64_t source = 0;
  };
  // The entry of `storage`, made (weakly referencing it, with `source`) when it has none.
  Entry& entryOf(c10::StorageImpl* storage, uint64_t source, bool& made);
  void grow();

  std::vector<Entry> entries_; // capacity a power of two, at most half full
  std::vector<uint32_t> used_; // indices of the entries in use
  uint64_t inputs_ = 0;
};

// The record key of one call of `op` with `args` (its schema's arguments, in order). Outputs
// of the call are noted by the caller afterwards (SourceTable::noteOutput).
Hash64 opRecordKey(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   SourceTable& sources);

} // namespace torchneuron::tracer

#pragma once
// A map keyed by pointers for the few entries of one op call (its tensors' storages and
// implementations): entries inline and searched in order, with a hash index added once there
// are more than kLinear of them (a _foreach_ op's list of hundreds of parameters). A tiny op's
// call made three std::unordered_maps, each allocating a node per entry and a bucket array:
// most of the generic library path's cost beyond the CPU kernel itself.

#include <c10/util/SmallVector.h>

#include <cstddef>
#include <unordered_map>
#include <utility>

namespace torchneuron {

template <typename Key, typename Value> class SmallPointerMap {
public:
  Value* find(const Key* key) {
    if (!index_.empty()) {
      auto found = index_.find(key);
      return found == index_.end() ? nullptr : &entries_[found->second].second;
    }
    for (auto& [k, v] : entries_)
      if (k == key) return &v;
    return nullptr;
  }
  const Value* find(const Key* key) const { return const_cast<SmallPointerMap*>(this)->find(key); }

  // The value of `key`, inserted as `value` if absent (an existing value is kept).
  Value& emplace(const Key* key, Value value) {
    if (Value* existing = find(key)) return *existing;
    entries_.emplace_back(key, std::move(value));
    if (!index_.empty()) {
      index_.emplace(key, entries_.size() - 1);
    } else if (entries_.size() > kLinear) {
      for (size_t i = 0; i < entries_.size(); ++i)
        index_.emplace(entries_[i].first, i);
    }
    return entries_.back().second;
  }

private:
  static constexpr size_t kLinear = 16;
  c10::SmallVector<std::pair<const Key*, Value>, 4> entries_;
  std::unordered_map<const Key*, size_t> index_; // empty until entries_ outgrow kLinear
};

} // namespace torchneuron

#include "tracer/independent_chains.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "tracer/op_window.h"

namespace torchneuron::tracer {
namespace {

// Union-find over the steps of one segment, by index from the segment's start.
class Chains {
public:
  explicit Chains(size_t steps) : parent_(steps) {
    std::iota(parent_.begin(), parent_.end(), uint32_t{0});
  }
  uint32_t find(uint32_t step) {
    while (parent_[step] != step) {
      parent_[step] = parent_[parent_[step]];
      step = parent_[step];
    }
    return step;
  }
  // The chain with the earlier first step names the union.
  void join(uint32_t a, uint32_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (a > b) std::swap(a, b);
    parent_[b] = a;
  }

private:
  std::vector<uint32_t> parent_;
};

// Regroups launches [begin, end), none of which is a host step. Returns whether any moved.
bool regroupSegment(std::vector<DeferredLaunch>& launches, size_t begin, size_t end) {
  const size_t steps = end - begin;
  if (steps < 3) return false;
  Chains chains(steps);
  std::unordered_map<const void*, uint32_t> first_toucher;
  first_toucher.reserve(2 * steps);
  for (size_t i = 0; i < steps; ++i)
    for (const void* storage : launches[begin + i].storages) {
      auto [found, made] = first_toucher.emplace(storage, static_cast<uint32_t>(i));
      if (!made) chains.join(found->second, static_cast<uint32_t>(i));
    }
  // Each chain's steps in order, chains in order of their first step (a chain's root is its
  // first step, so sorting by (root, index) is that order).
  std::vector<std::pair<uint32_t, uint32_t>> order(steps);
  bool moved = false;
  uint32_t last_root = 0;
  for (size_t i = 0; i < steps; ++i) {
    const uint32_t root = chains.find(static_cast<uint32_t>(i));
    launches[begin + i].chain = static_cast<uint32_t>(begin) + root; // unique in the batch
    order[i] = {root, static_cast<uint32_t>(i)};
    if (root < last_root) moved = true; // an earlier chain continues after a later one began
    last_root = std::max(last_root, root);
  }
  if (!moved) return false;
  std::sort(order.begin(), order.end()); // (root, index) pairs are distinct
  std::vector<DeferredLaunch> regrouped;
  regrouped.reserve(steps);
  for (const auto& [root, i] : order)
    regrouped.push_back(std::move(launches[begin + i]));
  std::move(regrouped.begin(), regrouped.end(), launches.begin() + static_cast<ptrdiff_t>(begin));
  return true;
}

} // namespace

bool regroupIndependentChains(std::vector<DeferredLaunch>& launches) {
  bool moved = false;
  size_t begin = 0;
  for (size_t i = 0; i <= launches.size(); ++i) {
    if (i < launches.size() && !launches[i].host_step) continue;
    moved |= regroupSegment(launches, begin, i);
    begin = i + 1;
  }
  return moved;
}

} // namespace torchneuron::tracer

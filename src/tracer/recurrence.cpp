#include "tracer/recurrence.h"

#include <algorithm>

namespace torchneuron::tracer {

const SignatureStats* Recurrence::countWindow(const Hash128& signature,
                                              const std::vector<Hash64>& records,
                                              SyncCause ended_by, const std::string& ending_op,
                                              const std::string& first_op) {
  if (records.empty()) return nullptr;
  const Hash64 site = records.front();
  if (pinned(site)) return nullptr;
  auto found = signatures_.find(signature);
  if (found == signatures_.end()) {
    if (signatures_.size() >= kMaxSignatures) return nullptr;
    Site& entry = sites_[site];
    entry.first_op = first_op;
    if (++entry.signatures > kSignaturesPerSite && entry.hot == 0) {
      pinned_sites_.insert(site);
      return nullptr;
    }
    found = signatures_.emplace(signature, SignatureStats{}).first;
    found->second.first_op = first_op;
    found->second.ops = static_cast<int64_t>(records.size());
  }
  SignatureStats& stats = found->second;
  ++stats.occurrences;
  stats.ended_by = ended_by;
  stats.ending_op = ending_op;
  if (!stats.hot && stats.occurrences >= threshold_) {
    stats.hot = true;
    ++sites_[site].hot;
    makeHot(records, ended_by);
  }
  return &stats;
}

void Recurrence::makeHot(const std::vector<Hash64>& records, SyncCause ended_by) {
  TrieNode* node = &root_;
  for (Hash64 record : records) {
    std::unique_ptr<TrieNode>& child = node->children[record];
    if (!child) child = std::make_unique<TrieNode>();
    node = child.get();
  }
  node->ends_hot_window = true;
  if (ended_by == SyncCause::kByteLimit) node->cut_by_byte_limit = true;
}

RecurrenceCounts Recurrence::counts() const {
  RecurrenceCounts counts;
  for (const auto& [signature, stats] : signatures_)
    ++(stats.hot ? counts.hot : counts.cold);
  counts.pinned_sites = static_cast<int64_t>(pinned_sites_.size());
  return counts;
}

std::vector<std::pair<Hash128, SignatureStats>> Recurrence::mostFrequent(size_t count) const {
  std::vector<std::pair<Hash128, SignatureStats>> all(signatures_.begin(), signatures_.end());
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second.occurrences != b.second.occurrences
               ? a.second.occurrences > b.second.occurrences
               : a.first.low < b.first.low;
  });
  if (all.size() > count) all.resize(count);
  return all;
}

std::vector<std::pair<Hash64, std::string>> Recurrence::pinnedSites() const {
  std::vector<std::pair<Hash64, std::string>> pinned;
  for (Hash64 site : pinned_sites_) {
    auto found = sites_.find(site);
    pinned.emplace_back(site, found == sites_.end() ? "" : found->second.first_op);
  }
  return pinned;
}

} // namespace torchneuron::tracer

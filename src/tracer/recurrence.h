#pragma once
// Recurrence (DESIGN.md decision 6): how often each window signature was seen, which windows
// are hot, and the trie of hot windows' op records that the tracer walks while recording, so a
// hot window is recognised op by op. A recording site (a window's first op record) that keeps
// producing new signatures without any turning hot is pinned to op-by-op execution.
//
// Locking: none of its own; the tracer's window lock (op_window.cpp) guards every call.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "support/hash.h"
#include "tracer/sync_cause.h"

namespace torchneuron::tracer {

class WindowFusionStatus;

// A node of the hot-window trie: one op record after the path from the root.
struct TrieNode {
  std::unordered_map<Hash64, std::unique_ptr<TrieNode>> children;
  bool ends_hot_window = false;
  // A hot window ends here because its pending bytes reached NEURON_ADAPTIVE_WINDOW_BYTES: a
  // window that does not count its bytes (a fused one) still ends here, keeping its phase.
  bool cut_by_byte_limit = false;
  // What fusion found for the hot windows through this node (window_fusion.h), set by the first
  // batch of recorded launches that ran this node's op; null until then. Guarded by the window
  // lock.
  mutable std::shared_ptr<const WindowFusionStatus> fusion;
  // The device's capture of this op's last deferred call (tracer.h, CallCacheHooks); replaced
  // whenever a call with other metadata is captured. Guarded by the window lock.
  mutable std::shared_ptr<const void> captured_call;

  const TrieNode* child(Hash64 record) const {
    // Most nodes of a hot window have one child: the last one found answers without hashing.
    if (last_child != nullptr && last_record == record) return last_child;
    auto found = children.find(record);
    if (found == children.end()) return nullptr;
    last_record = record;
    last_child = found->second.get();
    return last_child;
  }

private:
  // child()'s last answer (children are never removed while the node lives). Guarded by the
  // window lock.
  mutable Hash64 last_record = 0;
  mutable const TrieNode* last_child = nullptr;
};

// What the tracer knows of one window signature.
struct SignatureStats {
  int64_t occurrences = 0;
  int64_t ops = 0;
  bool hot = false;
  SyncCause ended_by = SyncCause::kSynchronize; // the last occurrence's sync point
  std::string ending_op;                        // the op at that sync point, if any
  std::string first_op;
};

struct RecurrenceCounts {
  int64_t cold = 0;
  int64_t hot = 0;
  int64_t pinned_sites = 0;
};

class Recurrence {
public:
  // A site with more than this many distinct signatures, none hot, is pinned.
  static constexpr int64_t kSignaturesPerSite = 12;
  // At most this many signatures are tracked; later new ones are not counted.
  static constexpr size_t kMaxSignatures = 1 << 14;

  explicit Recurrence(int64_t threshold) : threshold_(threshold) {}

  // Counts one occurrence of the window `records` with `signature`; a window that reaches the
  // threshold becomes hot (its records enter the trie). Returns its stats (nullptr when the
  // window was not counted: a pinned site, or the table is full).
  const SignatureStats* countWindow(const Hash128& signature, const std::vector<Hash64>& records,
                                    SyncCause ended_by, const std::string& ending_op,
                                    const std::string& first_op);

  bool pinned(Hash64 site) const { return pinned_sites_.count(site) > 0; }
  const TrieNode& root() const { return root_; }
  RecurrenceCounts counts() const;
  int64_t threshold() const { return threshold_; }

  // The most frequent signatures, most frequent first (explain()).
  std::vector<std::pair<Hash128, SignatureStats>> mostFrequent(size_t count) const;
  std::vector<std::pair<Hash64, std::string>> pinnedSites() const;

private:
  struct Hash128Hasher {
    size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.low ^ h.high); }
  };

  void makeHot(const std::vector<Hash64>& records, SyncCause ended_by);

  int64_t threshold_;
  std::unordered_map<Hash128, SignatureStats, Hash128Hasher> signatures_;
  struct Site {
    int64_t signatures = 0;
    int64_t hot = 0;
    std::string first_op;
  };
  std::unordered_map<Hash64, Site> sites_;
  std::unordered_set<Hash64> pinned_sites_;
  TrieNode root_;
};

} // namespace torchneuron::tracer

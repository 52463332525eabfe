#pragma once
// Copies between a node's store and the cluster's remote tier, and a survey of the remote tier
// (the torchneuron-cache CLI: push, pull, stats). Only verified entries move: authentic under the
// cluster key (both tiers must seal with it: NEURON_CACHE_KEY_FILE), intact, and filed under
// their own key; a pull also takes only entries compiled for this host (the remote tier holds
// those of every kind of node of the cluster).

#include <cstdint>
#include <string>

namespace torchneuron {

class PersistentStore;
class RemoteCache;

struct TransferReport {
  int64_t copied = 0;
  int64_t present = 0;     // already in the destination
  int64_t rejected = 0;    // not authentic under the cluster key, damaged, or misfiled
  int64_t other_hosts = 0; // pull: compiled for another kind of host (kept there, not copied)
  int64_t failed = 0;      // push: the remote tier did not take them
  std::string problem;     // "" unless the transfer could not run (named)
};

struct RemoteSurvey {
  std::string location;
  std::string key_id;
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t authentic = 0; // verify under the cluster key (of any host)
  int64_t rejected = 0;  // would never be loaded: forged, other key, damaged, over the bound
  std::string problem;   // "" unless the tier could not be listed or read
};

// Publishes every entry of `store` that verifies and the remote tier lacks.
TransferReport pushEntries(PersistentStore& store, RemoteCache& remote);
// Stores every entry of the remote tier that verifies for this host and `store` lacks.
TransferReport pullEntries(PersistentStore& store, RemoteCache& remote);
// Reads every entry of the remote tier's namespace once and counts them.
RemoteSurvey surveyRemote(RemoteCache& remote);

} // namespace torchneuron

#include "cache/remote_transfer.h"

#include <optional>
#include <vector>

#include "cache/entry_verification.h"
#include "cache/persistent_store.h"
#include "cache/remote_cache.h"

namespace torchneuron {
namespace {

// "" when both tiers seal with one key (entries move as sealed), else the problem.
std::string keyMismatch(PersistentStore& store, RemoteCache& remote) {
  if (store.keyId() == remote.keyId()) return "";
  return "the local cache " + store.directory() + " signs with key " + store.keyId() + " (" +
         store.keySource() + "), the remote tier's key is " + remote.keyId() +
         " (NEURON_CACHE_KEY_FILE): both must use the cluster key";
}

enum class Fit { kHere, kOtherHost, kBad };

// Whether sealed `bytes` filed under `key` may be loaded on this host.
Fit fitOf(const std::string& key, const std::vector<char>& bytes) {
  std::string why;
  std::optional<ExecutableContainer> container = parseContainer(bytes, &why);
  if (!container) return Fit::kBad;
  LoadRequirements required = hostRequirements();
  required.key_material = container->key_material;
  if (storeKeyFor(LoadRequirements{container->engine_version, container->llvm_version,
                                   container->target_triple, container->cpu_features,
                                   container->compile_options, container->key_material}) != key)
    return Fit::kBad; // filed under a key that is not its own
  return verifyContainer(*container, required).empty() ? Fit::kHere : Fit::kOtherHost;
}

} // namespace

TransferReport pushEntries(PersistentStore& store, RemoteCache& remote) {
  TransferReport report;
  report.problem = keyMismatch(store, remote);
  if (!report.problem.empty()) return report;
  std::string database_problem;
  const std::vector<StoredEntryInfo> entries = store.list(&database_problem);
  if (!database_problem.empty()) {
    report.problem = "cannot read the local cache (" + database_problem + ")";
    return report;
  }
  for (const StoredEntryInfo& info : entries) {
    std::optional<std::vector<char>> bytes = store.get(info.key);
    if (!bytes || fitOf(info.key, *bytes) == Fit::kBad) {
      ++report.rejected;
      continue;
    }
    RemoteRead read = RemoteRead::kAbsent;
    remote.fetch(info.key, &read);
    if (read == RemoteRead::kFound) {
      ++report.present;
      continue;
    }
    if (read == RemoteRead::kUnavailable) {
      report.problem = "the remote tier " + remote.location() + " is unavailable (see the warning)";
      return report;
    }
    if (remote.publishNow(info.key, *bytes).empty())
      ++report.copied;
    else
      ++report.failed;
  }
  return report;
}

TransferReport pullEntries(PersistentStore& store, RemoteCache& remote) {
  TransferReport report;
  report.problem = keyMismatch(store, remote);
  if (!report.problem.empty()) return report;
  std::string problem;
  const std::vector<std::string> keys = remote.list(&problem);
  if (!problem.empty()) {
    report.problem = "cannot list the remote tier " + remote.location() + " (" + problem + ")";
    return report;
  }
  const int64_t failures_before = store.writeFailures();
  for (const std::string& key : keys) {
    if (store.get(key)) {
      ++report.present;
      continue;
    }
    RemoteRead read = RemoteRead::kAbsent;
    std::optional<std::vector<char>> bytes = remote.fetch(key, &read);
    if (read == RemoteRead::kUnavailable) {
      report.problem = "the remote tier " + remote.location() + " is unavailable (see the warning)";
      break;
    }
    if (!bytes) { // rejected (counted and warned by the tier), or gone since the listing
      if (read == RemoteRead::kRejected) ++report.rejected;
      continue;
    }
    switch (fitOf(key, *bytes)) {
    case Fit::kBad:
      remote.reject(key, "it is damaged or filed under another key");
      ++report.rejected;
      continue;
    case Fit::kOtherHost:
      ++report.other_hosts;
      continue;
    case Fit::kHere:
      break;
    }
    store.putLater(key, std::move(*bytes), nullptr, /*sealed=*/true);
    ++report.copied;
  }
  store.flushWrites();
  if (store.writeFailures() > failures_before && report.problem.empty())
    report.problem = "writing the local cache " + store.directory() + " failed (see the warning)";
  return report;
}

RemoteSurvey surveyRemote(RemoteCache& remote) {
  RemoteSurvey survey;
  survey.location = remote.location();
  survey.key_id = remote.keyId();
  const std::vector<std::string> keys = remote.list(&survey.problem);
  if (!survey.problem.empty()) return survey;
  for (const std::string& key : keys) {
    RemoteRead read = RemoteRead::kAbsent;
    std::optional<std::vector<char>> bytes = remote.fetch(key, &read);
    if (read == RemoteRead::kUnavailable) {
      survey.problem = "the remote tier became unavailable while it was read (see the warning)";
      return survey;
    }
    if (read == RemoteRead::kAbsent) continue; // gone since the listing
    ++survey.entries;
    if (bytes) {
      ++survey.authentic;
      survey.bytes += static_cast<int64_t>(bytes->size());
    } else {
      ++survey.rejected;
    }
  }
  return survey;
}

} // namespace torchneuron

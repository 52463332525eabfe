// A process's first lookups in the persistent store (src/cache/persistent_store.h) as the store
// grows: what every process pays before its first cached kernel runs. Each iteration is a new
// store instance on one directory (a new process, as far as the store knows): 32 hits and one
// miss. The directories are filled once per run (entries of 6 KB of random bytes, as compiled
// objects are, so RocksDB's compression does not shrink them) and removed at exit.

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cache/executable_container.h"
#include "cache/persistent_store.h"

namespace {

using torchneuron::PersistentStore;

constexpr size_t kEntryBytes = 6 << 10;
constexpr int kHitsPerIteration = 32;

std::string keyOf(int64_t i) {
  char key[33];
  std::snprintf(key, sizeof key, "%032llx", static_cast<unsigned long long>(i));
  return key;
}

// A directory holding `entries` entries, filled at its first use and removed at exit.
class FilledStores {
public:
  ~FilledStores() {
    for (const auto& item : directories_)
      std::filesystem::remove_all(item.second);
  }

  const std::string& directoryWith(int64_t entries) {
    auto it = directories_.find(entries);
    if (it != directories_.end()) return it->second;
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/neuron-store-bench-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) return directories_[entries] = "";
    PersistentStore store(pattern, 0);
    std::mt19937_64 random(42);
    for (int64_t i = 0; i < entries; ++i) {
      torchneuron::ExecutableContainer c;
      c.engine_version = torchneuron::kEngineVersion;
      c.key_material = keyOf(i);
      c.kernels = {{"k", "slots-v1"}};
      c.object.resize(kEntryBytes);
      for (char& byte : c.object)
        byte = static_cast<char>(random());
      store.putLater(keyOf(i), c.serialize(), nullptr);
    }
    store.flushWrites();
    return directories_[entries] = pattern;
  }

private:
  std::map<int64_t, std::string> directories_;
};

FilledStores& filledStores() {
  static FilledStores stores;
  return stores;
}

// args: the number of entries stored.
void BM_StoreFirstLookups(benchmark::State& state) {
  const int64_t entries = state.range(0);
  const std::string& directory = filledStores().directoryWith(entries);
  if (directory.empty()) {
    state.SkipWithError("cannot make a temporary directory");
    return;
  }
  int64_t next = 0;
  for (auto _ : state) {
    PersistentStore store(directory, 0);
    for (int i = 0; i < kHitsPerIteration; ++i)
      if (!store.get(keyOf(next++ % entries))) state.SkipWithError("a stored entry was not found");
    if (store.get(keyOf(entries))) state.SkipWithError("an entry never stored was found");
  }
  state.counters["stored_MB"] = static_cast<double>(entries * kEntryBytes) / (1 << 20);
}
BENCHMARK(BM_StoreFirstLookups)
    ->ArgNames({"entries"})
    ->Arg(100)
    ->Arg(10000)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

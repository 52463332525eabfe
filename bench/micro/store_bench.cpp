// The persistent store (src/cache/persistent_store.h) as it grows. BM_StoreFirstLookups: a
// process's first lookups, what every process pays before its first cached kernel runs (each
// iteration is a new store instance on one directory, a new process as far as the store knows:
// 32 hits and one miss). BM_StoreWrite: one entry written (synced, flushed) with and without a
// size cap, whose eviction totals the store under the exclusive lock that every other process's
// lookups wait for. The directories are filled once per run (entries of 6 KB of random bytes, as
// compiled objects are, so RocksDB's compression does not shrink them) and removed at exit.

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

// An entry as the compiler would store it (its object random bytes).
std::vector<char> entryBytes(int64_t i, std::mt19937_64& random) {
  torchneuron::ExecutableContainer c;
  c.engine_version = torchneuron::kEngineVersion;
  c.key_material = std::to_string(i);
  c.kernels = {{"k", "slots-v1"}};
  c.object.resize(kEntryBytes);
  for (char& byte : c.object)
    byte = static_cast<char>(random());
  return c.serialize();
}

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
    for (int64_t i = 0; i < entries; ++i)
      store.putLater(keyOf(i), entryBytes(i, random), nullptr);
    store.flushWrites();
    return directories_[entries] = pattern;
  }

private:
  std::map<int64_t, std::string> directories_;
};

// The directory holding `entries` entries, or null when none could be made (`state` skipped
// with the error).
const std::string* filledDirectory(benchmark::State& state, int64_t entries) {
  static FilledStores stores;
  const std::string& directory = stores.directoryWith(entries);
  if (!directory.empty()) return &directory;
  state.SkipWithError("cannot make a temporary directory");
  return nullptr;
}

// args: the number of entries stored.
void BM_StoreFirstLookups(benchmark::State& state) {
  const int64_t entries = state.range(0);
  const std::string* directory = filledDirectory(state, entries);
  if (directory == nullptr) return;
  int64_t next = 0;
  for (auto _ : state) {
    PersistentStore store(*directory, 0);
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

// args: the number of entries stored, the size cap in bytes (0: none; a cap the store stays
// under still totals it at every write). Each iteration adds one entry (keys no lookup uses).
void BM_StoreWrite(benchmark::State& state) {
  const int64_t entries = state.range(0);
  const std::string* directory = filledDirectory(state, entries);
  if (directory == nullptr) return;
  PersistentStore store(*directory, state.range(1));
  std::mt19937_64 random(7);
  static int64_t next = int64_t{1} << 40; // across repetitions, never a key stored before
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<char> entry = entryBytes(next, random);
    state.ResumeTiming();
    if (!store.put(keyOf(next++), entry)) state.SkipWithError("the write failed");
  }
}
BENCHMARK(BM_StoreWrite)
    ->ArgNames({"entries", "cap"})
    ->Args({10000, 0})
    ->Args({10000, int64_t{1} << 30})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

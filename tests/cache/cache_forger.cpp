// Forges cache entries the way an attacker who can write the cache directory (or hand over an
// export) would, for tests/cache/test_cache_trust.py:
//   neuron_cache_forger <cache dir> plant          every entry whose kernel adds (arith.addf) gets
//                                                  object code that subtracts, compiled under the
//                                                  entry's own symbol: real header, real key
//                                                  material, a valid checksum, the old MAC slot
//   neuron_cache_forger <cache dir> plant-signed   the same, sealed with the cache's own key (what
//                                                  only a holder of the key can do: the control)
//   neuron_cache_forger <cache dir> export FILE    the forged entries, unplanted, as an export file
// Prints the number of entries forged; exit status 0 when at least one was.

#include <cstdio>
#include <string>

#include "cache/cache_archive.h"
#include "cache/executable_container.h"
#include "cache/persistent_store.h"
#include "fusion/compiler.h"

using namespace torchneuron;

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[2];
  PersistentStore store(argv[1], 0);
  if (!store.problem().empty()) {
    std::fprintf(stderr, "%s\n", store.problem().c_str());
    return 1;
  }
  std::unique_ptr<ArchiveWriter> archive;
  if (mode == "export") archive = std::make_unique<ArchiveWriter>(argc > 3 ? argv[3] : "");
  int forged = 0;
  for (const StoredEntryInfo& info : store.list()) {
    const std::optional<std::vector<char>> bytes = store.get(info.key);
    std::optional<ExecutableContainer> entry =
        bytes ? parseContainer(*bytes, nullptr) : std::nullopt;
    if (!entry) continue;
    // The key material is "<entry symbol>\n<MLIR module>".
    std::string mlir = entry->key_material.substr(entry->key_material.find('\n') + 1);
    const size_t add = mlir.find("arith.addf");
    if (add == std::string::npos) continue;
    mlir.replace(add, 10, "arith.subf");
    entry->object = fusion::compileKernel(mlir, entry->kernels.front().symbol).bytes;
    std::vector<char> forgery = entry->serialize(); // a fresh checksum, the old key id and MAC
    bool ok = true;
    if (mode == "plant")
      ok = store.putVerbatim(info.key, forgery);
    else if (mode == "plant-signed")
      ok = store.put(info.key, forgery);
    else if (archive)
      archive->add(info.key, forgery.data(), forgery.size());
    else
      return 2;
    if (!ok) return 1;
    ++forged;
  }
  if (archive && !archive->finish()) {
    std::fprintf(stderr, "%s\n", archive->problem().c_str());
    return 1;
  }
  std::printf("%d\n", forged);
  return forged > 0 ? 0 : 1;
}

// Forges cache entries the way an attacker who can write the cache directory (or hand over an
// export) would, for tests/cache/test_cache_trust.py:
//   neuron_cache_forger <cache dir> plant          every entry whose kernel adds (math.fma) gets
//                                                  object code that subtracts, compiled under the
//                                                  entry's own symbol: real header, real key
//                                                  material, a valid checksum, the old MAC slot
//   neuron_cache_forger <cache dir> plant-signed   the same, sealed with the cache's own key (what
//                                                  only a holder of the key can do: the control)
//   neuron_cache_forger <cache dir> export FILE    the forged entries, unplanted, as an export file
//   neuron_cache_forger <cache dir> misfile        a copy of every entry, bytes and MAC intact,
//                                                  under another key (its last hex digit changed):
//                                                  what anyone who can write the directory can do
//   neuron_cache_forger <cache dir> export-misfiled FILE   those copies as an export file
//   neuron_cache_forger forge-file IN OUT          the same forgery of the one container in file IN
//                                                  (an entry read from a remote tier), to OUT
//   neuron_cache_forger sign-file IN OUT           IN sealed with NEURON_CACHE_KEY_FILE's key, to
//                                                  OUT (the control: what only a key holder can do)
// Prints the number of entries forged; exit status 0 when at least one was.

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "cache/cache_archive.h"
#include "cache/executable_container.h"
#include "cache/persistent_store.h"
#include "fusion/compiler.h"

using namespace torchneuron;

namespace {

// Rewrites a float add of the kernel into a subtraction: `math.fma %b, %alpha, %a : T` (how
// add kernels compute a + alpha * b) becomes `arith.subf %a, %b : T` (x - y for x + y's kernel),
// an `arith.addf` an `arith.subf`. False when the kernel has neither.
bool subtractInsteadOfAdd(std::string& mlir) {
  const size_t fma = mlir.find("math.fma ");
  if (fma != std::string::npos) {
    const size_t end = mlir.find(" : ", fma);
    const size_t first = fma + 9, second = mlir.find(", ", first) + 2;
    const size_t third = mlir.find(", ", second) + 2;
    const std::string b = mlir.substr(first, second - 2 - first);
    const std::string a = mlir.substr(third, end - third);
    mlir.replace(fma, end - fma, "arith.subf " + a + ", " + b);
    return true;
  }
  const size_t add = mlir.find("arith.addf");
  if (add == std::string::npos) return false;
  mlir.replace(add, 10, "arith.subf");
  return true;
}

// Object code that subtracts where the entry's kernel adds, under the entry's own symbol; false
// when its kernel does not add.
bool forgeSubtraction(ExecutableContainer& entry) {
  // The key material is "<entry symbol>\n<MLIR module>".
  std::string mlir = entry.key_material.substr(entry.key_material.find('\n') + 1);
  if (!subtractInsteadOfAdd(mlir)) return false;
  entry.object = fusion::compileKernel(mlir, entry.kernels.front().symbol).bytes;
  return true;
}

// forge-file and sign-file: one container from a file to a file.
int rewriteFile(const std::string& mode, const char* in, const char* out) {
  std::ifstream input(in, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(input)),
                          std::istreambuf_iterator<char>());
  std::string why;
  if (mode == "sign-file") {
    const char* key_file = std::getenv("NEURON_CACHE_KEY_FILE");
    if (key_file == nullptr || *key_file == '\0') return 2;
    std::unique_ptr<EntryAuthenticator> key = EntryAuthenticator::fromKeyFile(key_file, &why);
    if (!key || !sealContainer(bytes, *key)) return 1;
  } else {
    std::optional<ExecutableContainer> entry = parseContainer(bytes, &why);
    if (!entry || !forgeSubtraction(*entry)) return 1;
    bytes = entry->serialize(); // a fresh checksum, the old key id and MAC
  }
  std::ofstream(out, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::printf("1\n");
  return 0;
}

// `key` with its last hex digit changed: another entry's key.
std::string anotherKey(std::string key) {
  key.back() = key.back() == '0' ? '1' : '0';
  return key;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  if ((std::string(argv[1]) == "forge-file" || std::string(argv[1]) == "sign-file") && argc == 4)
    return rewriteFile(argv[1], argv[2], argv[3]);
  const std::string mode = argv[2];
  PersistentStore store(argv[1], 0);
  if (!store.problem().empty()) {
    std::fprintf(stderr, "%s\n", store.problem().c_str());
    return 1;
  }
  std::unique_ptr<ArchiveWriter> archive;
  const bool misfile = mode == "misfile" || mode == "export-misfiled";
  if (mode == "export" || mode == "export-misfiled")
    archive = std::make_unique<ArchiveWriter>(argc > 3 ? argv[3] : "");
  int forged = 0;
  for (const StoredEntryInfo& info : store.list()) {
    const std::optional<std::vector<char>> bytes = store.get(info.key);
    if (misfile && bytes) {
      if (archive)
        archive->add(anotherKey(info.key), bytes->data(), bytes->size());
      else if (!store.putVerbatim(anotherKey(info.key), *bytes))
        return 1;
      ++forged;
      continue;
    }
    std::optional<ExecutableContainer> entry =
        bytes ? parseContainer(*bytes, nullptr) : std::nullopt;
    if (!entry) continue;
    if (!forgeSubtraction(*entry)) continue;
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

// A separate process that writes to a persistent store (tests/cache/persistent_store_test.cpp
// starts several at once, or kills one mid-write):
//   neuron_store_writer <dir> <key> <rounds, 0 = until killed> <value bytes> <fill char>
// Exit status 0 when every write succeeded. After each write it prints "wrote" on its own line
// (flushed), so a test can kill it while it writes without guessing at timing.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cache/executable_container.h"
#include "cache/persistent_store.h"

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  torchneuron::PersistentStore store(argv[1], 0);
  const int rounds = std::atoi(argv[3]);
  torchneuron::ExecutableContainer c;
  c.engine_version = torchneuron::kEngineVersion;
  c.kernels = {{"k", "slots-v1"}};
  bool ok = true;
  for (int i = 0; rounds == 0 || i < rounds; ++i) {
    const char fill = rounds == 0 ? static_cast<char>('a' + i % 26) : argv[5][0];
    c.key_material = std::string(1, fill);
    c.object.assign(static_cast<size_t>(std::atol(argv[4])), fill);
    ok &= store.put(argv[2], c.serialize());
    std::printf("wrote\n");
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

#pragma once
// The project's one hashing API (STYLE.md rule 3): every key, signature and checksum is built
// here. The algorithm (xxHash XXH3) lives in hash.cpp alone.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace torchneuron {

// A 64-bit hash value. Stable across processes, machines and runs (no seed, no pointers).
using Hash64 = uint64_t;

struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Hash128& other) const { return low == other.low && high == other.high; }
  bool operator!=(const Hash128& other) const { return !(*this == other); }
  std::string hex() const;
};

Hash64 hashBytes(const void* data, size_t size);
Hash128 hashBytes128(const void* data, size_t size);

// Streams values into one hash; feeding the same sequence always gives the same value.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& bytes(const void* data, size_t size);
  Hasher& u64(uint64_t value) { return bytes(&value, sizeof value); }
  Hasher& i64(int64_t value) { return bytes(&value, sizeof value); }
  // Length-prefixed, so ("ab","c") and ("a","bc") differ.
  Hasher& str(std::string_view value);

  Hash64 digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

std::string hexOf(Hash64 value);

}  // namespace torchneuron

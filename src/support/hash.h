#pragma once
// The project's one hashing API (STYLE.md rule 3): every key, signature and checksum is built
// here. The algorithm (xxHash XXH3) lives in hash.cpp alone.

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Streams values into one hash; feeding the same sequence always gives the same value. Keys
// are short, so the bytes gather in an inline buffer and are hashed once by digest(): building
// a kernel key costs no allocation on the dispatch path.
class Hasher {
public:
  Hasher() = default;
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& bytes(const void* data, size_t size) {
    if (overflow_.empty() && size_ + size <= kInline) {
      std::memcpy(inline_ + size_, data, size);
      size_ += size;
      return *this;
    }
    return spill(data, size);
  }
  Hasher& u64(uint64_t value) { return bytes(&value, sizeof value); }
  Hasher& i64(int64_t value) { return bytes(&value, sizeof value); }
  // Length-prefixed, so ("ab","c") and ("a","bc") differ.
  Hasher& str(std::string_view value);

  Hash64 digest() const;

private:
  Hasher& spill(const void* data, size_t size);

  static constexpr size_t kInline = 256;
  unsigned char inline_[kInline];
  size_t size_ = 0;
  std::string overflow_; // used once a key outgrows the inline buffer
};

std::string hexOf(Hash64 value);

} // namespace torchneuron

#include "support/hash.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

namespace torchneuron {

Hash64 hashBytes(const void* data, size_t size) { return XXH3_64bits(data, size); }

Hash128 hashBytes128(const void* data, size_t size) {
  const XXH128_hash_t value = XXH3_128bits(data, size);
  return Hash128{value.low64, value.high64};
}

std::string Hash128::hex() const { return hexOf(high) + hexOf(low); }

std::string hexOf(Hash64 value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

Hasher& Hasher::spill(const void* data, size_t size) {
  if (overflow_.empty()) overflow_.assign(reinterpret_cast<const char*>(inline_), size_);
  overflow_.append(static_cast<const char*>(data), size);
  return *this;
}

Hasher& Hasher::str(std::string_view value) {
  u64(value.size());
  return bytes(value.data(), value.size());
}

Hash64 Hasher::digest() const {
  return overflow_.empty() ? XXH3_64bits(inline_, size_)
                           : XXH3_64bits(overflow_.data(), overflow_.size());
}

} // namespace torchneuron

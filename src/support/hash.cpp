#include "support/hash.h"

#include <xxhash.h>

#include <cstdio>
#include <new>

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

Hasher::Hasher() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Hasher::~Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

Hasher& Hasher::bytes(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
  return *this;
}

Hasher& Hasher::str(std::string_view value) {
  u64(value.size());
  return bytes(value.data(), value.size());
}

Hash64 Hasher::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

}  // namespace torchneuron

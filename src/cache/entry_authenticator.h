#pragma once
// Keyed MACs over cache entries: HMAC-SHA512-256 (libsodium crypto_auth) under one 32-byte secret,
// named by a key id (the first 8 bytes of a keyed BLAKE2b hash of the key: it tells keys apart
// and reveals nothing of them). The key comes from NEURON_CACHE_KEY_FILE, or is a per-user secret
// created at first use in the cache directory. Trust model: docs/persistent-cache.md.

#include <array>
#include <cstddef>
#include <memory>
#include <string>

namespace torchneuron {

// The per-user key's file name inside the cache directory.
constexpr const char* kUserKeyFileName = "mac.key";

class EntryAuthenticator {
public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kMacBytes = 32;
  static constexpr size_t kKeyIdBytes = 8;
  using Key = std::array<unsigned char, kKeyBytes>;
  using Mac = std::array<unsigned char, kMacBytes>;
  using KeyId = std::array<unsigned char, kKeyIdBytes>;

  explicit EntryAuthenticator(const Key& key);
  ~EntryAuthenticator(); // wipes the key
  EntryAuthenticator(const EntryAuthenticator&) = delete;
  EntryAuthenticator& operator=(const EntryAuthenticator&) = delete;

  // The key in NEURON_CACHE_KEY_FILE when set, else the per-user key of `cache_directory`
  // (created there at first use). Null, with `why` naming the path and the problem, when the key
  // file is not a regular file owned by this user with mode 0600 or stricter, sits in a directory
  // others can write, does not hold a key, or cannot be created.
  static std::unique_ptr<EntryAuthenticator> forCacheDirectory(const std::string& cache_directory,
                                                               std::string* why);
  // The key in `path` (the checks above); null with `why` otherwise.
  static std::unique_ptr<EntryAuthenticator> fromKeyFile(const std::string& path, std::string* why);

  const KeyId& keyId() const { return key_id_; }
  Mac mac(const void* data, size_t size) const;
  bool verify(const void* data, size_t size, const unsigned char* mac) const; // constant time

private:
  Key key_;
  KeyId key_id_;
};

std::string keyIdHex(const EntryAuthenticator::KeyId& id);

// Writes a new random key to `path` (created O_EXCL|O_NOFOLLOW, mode 0600: never overwrites or
// follows a link). "" on success, else the problem, naming the path.
std::string writeNewKeyFile(const std::string& path);

} // namespace torchneuron

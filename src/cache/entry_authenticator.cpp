#include "cache/entry_authenticator.h"

#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cache/directory_trust.h"
#include "support/made_once.h"

namespace torchneuron {
namespace {

static_assert(EntryAuthenticator::kKeyBytes == crypto_auth_KEYBYTES, "crypto_auth key size");
static_assert(EntryAuthenticator::kMacBytes == crypto_auth_BYTES, "crypto_auth tag size");

// A key file holds the key as 64 hex digits and an optional newline.
constexpr size_t kKeyFileTextBytes = 2 * EntryAuthenticator::kKeyBytes;

// False when libsodium cannot start (no randomness source): then no key can be made, and the
// persistent tier stays off rather than the process stopping.
bool initializeSodium() {
  static MadeOnce<const bool> ready; // fork-safe (made_once.h)
  return ready.get([] { return new bool(sodium_init() >= 0); });
}

const char* const kNoSodium = "libsodium cannot initialize (no randomness source)";

std::string hexOf(const unsigned char* bytes, size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < size; ++i) {
    text.push_back(digits[bytes[i] >> 4]);
    text.push_back(digits[bytes[i] & 15]);
  }
  return text;
}

// Reads the key from an open key file after checking what it is: "" or the problem.
std::string readKey(int fd, const std::string& path, EntryAuthenticator::Key* key) {
  struct stat info;
  if (fstat(fd, &info) != 0) return path + ": " + std::strerror(errno);
  if (!S_ISREG(info.st_mode)) return path + " is not a regular file";
  if (info.st_uid != geteuid())
    return path + " is owned by uid " + std::to_string(info.st_uid) + ", not by this user";
  if ((info.st_mode & 07177) != 0)
    return path + " has mode " + octalMode(info.st_mode) + " (a key must be mode 0600 or stricter)";
  char text[kKeyFileTextBytes + 2];
  ssize_t got = 0, n = 0;
  while ((n = read(fd, text + got, sizeof text - got)) > 0)
    got += n;
  std::string problem;
  if (n < 0) return path + ": " + std::strerror(errno);
  const bool framed = (got == static_cast<ssize_t>(kKeyFileTextBytes)) ||
                      (got == static_cast<ssize_t>(kKeyFileTextBytes) + 1 && text[got - 1] == '\n');
  if (!framed || sodium_hex2bin(key->data(), key->size(), text, kKeyFileTextBytes, nullptr, nullptr,
                                nullptr) != 0)
    problem =
        path + " does not hold a key (64 hex digits; `torchneuron-cache keygen FILE` makes one)";
  sodium_memzero(text, sizeof text);
  return problem;
}

// The key in `path`, whose directory chain was checked: "" or the problem. Opened O_NONBLOCK
// (no effect on a regular file's reads): a FIFO there is refused by readKey instead of hanging.
std::string loadKeyFile(const std::string& path, EntryAuthenticator::Key* key) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errno == ELOOP ? path + " is a symbolic link"
                          : "cannot read " + path + " (" + std::strerror(errno) + ")";
  std::string problem = readKey(fd, path, key);
  close(fd);
  return problem;
}

// The per-user key in `directory` (checked already), created at first use: written whole to a
// temporary file, then linked to its name, which fails rather than replaces when another process
// got there first (then its key is read).
std::string loadOrCreateUserKey(const std::string& directory, EntryAuthenticator::Key* key) {
  const std::string path = directory + "/" + kUserKeyFileName;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      std::string problem = readKey(fd, path, key);
      close(fd);
      return problem;
    }
    if (errno != ENOENT) return loadKeyFile(path, key); // names the problem
    std::string temporary;
    const int out = createTemporaryFile(path, &temporary);
    if (out < 0) return "cannot create the cache key " + path + " (" + std::strerror(errno) + ")";
    randombytes_buf(key->data(), key->size());
    std::string text = hexOf(key->data(), key->size()) + "\n";
    const bool written =
        write(out, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
        fsync(out) == 0;
    sodium_memzero(text.data(), text.size());
    close(out);
    const bool linked = written && link(temporary.c_str(), path.c_str()) == 0;
    const int link_errno = errno;
    unlink(temporary.c_str());
    if (linked) return "";
    if (!written || link_errno != EEXIST)
      return "cannot create the cache key " + path + " (" + std::strerror(link_errno) + ")";
  }
  return "cannot create the cache key " + path + " (it keeps changing)";
}

} // namespace

EntryAuthenticator::EntryAuthenticator(const Key& key) : key_(key) {
  initializeSodium(); // the hash and the MAC work either way
  static const unsigned char kIdContext[] = "torchneuron cache key id";
  unsigned char digest[crypto_generichash_BYTES];
  crypto_generichash(digest, sizeof digest, key_.data(), key_.size(), kIdContext,
                     sizeof kIdContext - 1);
  std::memcpy(key_id_.data(), digest, key_id_.size());
}

EntryAuthenticator::~EntryAuthenticator() { sodium_memzero(key_.data(), key_.size()); }

std::unique_ptr<EntryAuthenticator> EntryAuthenticator::fromKeyFile(const std::string& path,
                                                                    std::string* why) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    *why = "cannot read the cache key " + path + " (" + std::strerror(errno) + ")";
    return nullptr;
  }
  const std::string real = resolved;
  const size_t slash = real.rfind('/');
  std::string problem = directoryChainProblem(slash == 0 ? "/" : real.substr(0, slash), false);
  Key key{};
  if (problem.empty()) problem = loadKeyFile(real, &key);
  if (!problem.empty()) {
    *why = (real != path ? path + " resolves to " + real + ": " : std::string()) + problem;
    return nullptr;
  }
  auto authenticator = std::make_unique<EntryAuthenticator>(key);
  sodium_memzero(key.data(), key.size());
  return authenticator;
}

std::unique_ptr<EntryAuthenticator>
EntryAuthenticator::forCacheDirectory(const std::string& cache_directory, std::string* why) {
  if (const char* file = std::getenv("NEURON_CACHE_KEY_FILE"); file != nullptr && *file) {
    std::unique_ptr<EntryAuthenticator> authenticator = fromKeyFile(file, why);
    if (!authenticator) *why = "NEURON_CACHE_KEY_FILE: " + *why;
    return authenticator;
  }
  Key key{};
  *why = initializeSodium() ? loadOrCreateUserKey(cache_directory, &key) : kNoSodium;
  if (!why->empty()) return nullptr;
  auto authenticator = std::make_unique<EntryAuthenticator>(key);
  sodium_memzero(key.data(), key.size());
  return authenticator;
}

EntryAuthenticator::Mac EntryAuthenticator::mac(const void* data, size_t size) const {
  Mac tag;
  crypto_auth(tag.data(), static_cast<const unsigned char*>(data), size, key_.data());
  return tag;
}

bool EntryAuthenticator::verify(const void* data, size_t size, const unsigned char* tag) const {
  return crypto_auth_verify(tag, static_cast<const unsigned char*>(data), size, key_.data()) == 0;
}

std::string keyIdHex(const EntryAuthenticator::KeyId& id) { return hexOf(id.data(), id.size()); }

std::string writeNewKeyFile(const std::string& path) {
  if (!initializeSodium()) return kNoSodium;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return errno == EEXIST ? path + " exists already (a key is never overwritten)"
                           : "cannot create " + path + " (" + std::strerror(errno) + ")";
  EntryAuthenticator::Key key;
  randombytes_buf(key.data(), key.size());
  std::string text = hexOf(key.data(), key.size()) + "\n";
  sodium_memzero(key.data(), key.size());
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       fchmod(fd, 0600) == 0 && fsync(fd) == 0;
  const int saved = errno;
  sodium_memzero(text.data(), text.size());
  close(fd);
  if (written) return "";
  unlink(path.c_str());
  return "cannot write " + path + " (" + std::strerror(saved) + ")";
}

} // namespace torchneuron

#include "cache/warm_start_profile.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <limits.h>
#include <sstream>

#include "cache/directory_trust.h"
#include "cache/executable_container.h"
#include "support/hash.h"

namespace torchneuron {
namespace {

const char* const kHeader = "torchneuron warm-start profile 1";
const char* const kProfileDirectory = "/profiles";
const char* const kProfileSuffix = ".profile";
// Far above what the bounds below allow a profile to hold (about 3 MB).
constexpr off_t kMaxProfileFileBytes = 16 << 20;

// A file this module writes: "<32 hex>.profile", or its temporary "<32 hex>.profile.tmp.<...>".
bool isProfileFileName(const std::string& name) {
  const std::string suffix = kProfileSuffix;
  if (name.size() < 32 + suffix.size() || name.compare(32, suffix.size(), suffix) != 0)
    return false;
  for (size_t i = 0; i < 32; ++i)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  const std::string rest = name.substr(32 + suffix.size());
  return rest.empty() || rest.compare(0, 5, ".tmp.") == 0;
}

bool isStoreKey(const std::string& line) {
  if (line.size() != 32) return false;
  for (char c : line)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A decimal number in [0, limit], digits only.
bool parseNumber(const std::string& digits, size_t limit, size_t* value) {
  if (digits.empty() || digits.size() > 12 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *value = std::stoull(digits);
  return *value <= limit;
}

// "<name> <count>" with a count in [0, limit].
bool parseCountLine(const std::string& line, const std::string& name, size_t limit, size_t* count) {
  const std::string prefix = name + " ";
  return line.compare(0, prefix.size(), prefix) == 0 &&
         parseNumber(line.substr(prefix.size()), limit, count);
}

std::string checksumOf(const std::string& text) {
  return hashBytes128(text.data(), text.size()).hex();
}

} // namespace

std::string serializeProfile(const WarmStartProfile& profile) {
  const size_t kernels = std::min(profile.kernel_keys.size(), kMaxProfileKernels);
  const size_t blocks = std::min(profile.block_bytes.size(), kMaxProfileBlocks);
  std::string text = std::string(kHeader) + "\nengine " + kEngineVersion + "\n";
  text += "kernels " + std::to_string(kernels) + "\n";
  for (size_t i = 0; i < kernels; ++i)
    text += profile.kernel_keys[i] + "\n";
  text += "blocks " + std::to_string(blocks) + "\n";
  for (size_t i = 0; i < blocks; ++i)
    text += std::to_string(profile.block_bytes[i]) + "\n";
  return sealedProfile(text);
}

std::string sealedProfile(const std::string& body) {
  return body + "checksum " + checksumOf(body) + "\n";
}

std::optional<WarmStartProfile> parseProfile(const std::string& text, std::string* why,
                                             bool* other_engine) {
  if (other_engine) *other_engine = false;
  auto fail = [&](const std::string& problem) -> std::optional<WarmStartProfile> {
    *why = problem;
    return std::nullopt;
  };
  const size_t checksum_at = text.rfind("checksum ");
  if (checksum_at == std::string::npos || (checksum_at > 0 && text[checksum_at - 1] != '\n'))
    return fail("no checksum line (truncated?)");
  const std::string body = text.substr(0, checksum_at);
  if (text.substr(checksum_at) != "checksum " + checksumOf(body) + "\n")
    return fail("checksum mismatch");
  std::istringstream lines(body);
  std::string line;
  if (!std::getline(lines, line) || line != kHeader)
    return fail("not a warm-start profile (header '" + line.substr(0, 64) + "')");
  if (!std::getline(lines, line) || line != std::string("engine ") + kEngineVersion) {
    if (other_engine) *other_engine = line.compare(0, 7, "engine ") == 0;
    return fail("written by another engine version ('" + line.substr(0, 64) + "')");
  }
  WarmStartProfile profile;
  size_t count = 0;
  if (!std::getline(lines, line) || !parseCountLine(line, "kernels", kMaxProfileKernels, &count))
    return fail("bad kernel count line '" + line.substr(0, 64) + "'");
  for (size_t i = 0; i < count; ++i) {
    if (!std::getline(lines, line) || !isStoreKey(line))
      return fail("bad kernel key '" + line.substr(0, 64) + "' at position " + std::to_string(i));
    profile.kernel_keys.push_back(line);
  }
  if (!std::getline(lines, line) || !parseCountLine(line, "blocks", kMaxProfileBlocks, &count))
    return fail("bad block count line '" + line.substr(0, 64) + "'");
  for (size_t i = 0; i < count; ++i) {
    size_t bytes = 0;
    if (!std::getline(lines, line) || !parseNumber(line, kMaxProfileBlockBytes, &bytes) ||
        bytes == 0)
      return fail("bad block size '" + line.substr(0, 64) + "' at position " + std::to_string(i));
    profile.block_bytes.push_back(bytes);
  }
  if (std::getline(lines, line)) return fail("unexpected line '" + line.substr(0, 64) + "'");
  return profile;
}

std::string currentProgramIdentity() {
  std::string material;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) != nullptr) material = cwd;
  material.push_back('\0');
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  material.append(std::istreambuf_iterator<char>(cmdline), std::istreambuf_iterator<char>());
  return hashBytes128(material.data(), material.size()).hex();
}

std::string profilePath(const std::string& cache_dir, const std::string& program) {
  return cache_dir + kProfileDirectory + "/" + program + kProfileSuffix;
}

std::optional<std::string> readProfileFile(const std::string& path) {
  // Never through a link, never a device or a pipe, never more than a profile can hold.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat info;
  std::optional<std::string> text;
  if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size <= kMaxProfileFileBytes) {
    text.emplace(static_cast<size_t>(info.st_size), '\0');
    size_t got = 0;
    ssize_t n = 0;
    while (got < text->size() && (n = read(fd, text->data() + got, text->size() - got)) > 0)
      got += n;
    if (got != text->size()) text.reset();
  }
  close(fd);
  return text;
}

bool writeProfileFile(const std::string& path, const std::string& text) {
  if (!preparePrivateSubdirectory(path.substr(0, path.rfind('/'))).empty()) return false;
  std::string temporary;
  const int fd = createTemporaryFile(path, &temporary);
  if (fd < 0) return false;
  size_t written = 0;
  ssize_t n = 0;
  while (written < text.size() && (n = write(fd, text.data() + written, text.size() - written)) > 0)
    written += n;
  if (close(fd) != 0 || written != text.size()) {
    std::remove(temporary.c_str());
    return false;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

int64_t removeProfiles(const std::string& cache_dir) {
  const std::string directory = cache_dir + kProfileDirectory;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return 0;
  int64_t removed = 0;
  while (dirent* item = readdir(dir)) {
    const std::string name = item->d_name;
    if (!isProfileFileName(name)) continue; // not written here: left alone
    if (std::remove((directory + "/" + name).c_str()) == 0 &&
        name.find(".tmp.") == std::string::npos)
      ++removed;
  }
  closedir(dir);
  return removed;
}

} // namespace torchneuron

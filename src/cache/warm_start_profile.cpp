#include "cache/warm_start_profile.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <limits.h>
#include <sstream>

#include "cache/executable_container.h"
#include "support/hash.h"

namespace torchneuron {
namespace {

const char* const kHeader = "torchneuron warm-start profile 1";
const char* const kProfileDirectory = "/profiles";
const char* const kProfileSuffix = ".profile";

bool isStoreKey(const std::string& line) {
  if (line.size() != 32) return false;
  for (char c : line)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A decimal number in [0, limit], digits only.
bool parseNumber(const std::string& digits, size_t limit, size_t* value) {
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos)
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

}  // namespace

std::string serializeProfile(const WarmStartProfile& profile) {
  const size_t kernels = std::min(profile.kernel_keys.size(), kMaxProfileKernels);
  const size_t blocks = std::min(profile.block_bytes.size(), kMaxProfileBlocks);
  std::string text = std::string(kHeader) + "\nengine " + kEngineVersion + "\n";
  text += "kernels " + std::to_string(kernels) + "\n";
  for (size_t i = 0; i < kernels; ++i) text += profile.kernel_keys[i] + "\n";
  text += "blocks " + std::to_string(blocks) + "\n";
  for (size_t i = 0; i < blocks; ++i) text += std::to_string(profile.block_bytes[i]) + "\n";
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
    if (!std::getline(lines, line) || !parseNumber(line, kMaxProfileBlockBytes, &bytes) || bytes == 0)
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
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) return std::nullopt;
  return text;
}

bool writeProfileFile(const std::string& path, const std::string& text) {
  const std::string directory = path.substr(0, path.rfind('/'));
  if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) return false;
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << text;
    file.flush();
    if (!file) {
      std::remove(temporary.c_str());
      return false;
    }
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
    if (name == "." || name == "..") continue;
    if (std::remove((directory + "/" + name).c_str()) == 0 &&
        name.find(kProfileSuffix) != std::string::npos)
      ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace torchneuron

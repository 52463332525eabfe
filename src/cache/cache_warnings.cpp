#include "cache/cache_warnings.h"

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>

namespace torchneuron {
namespace {

std::mutex warning_mutex;

std::function<void(const std::string&)>& warningHandler() {
  static auto* handler = new std::function<void(const std::string&)>(
      [](const std::string& text) { std::cerr << "torchneuron: " << text << "\n"; });
  return *handler;
}

std::set<std::string>& warnedKinds() {
  static auto* warned = new std::set<std::string>();
  return *warned;
}

void send(const std::string& text, const std::function<bool(std::set<std::string>&)>& admit) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard<std::mutex> lock(warning_mutex);
    if (!admit(warnedKinds())) return;
    handler = warningHandler();
  }
  handler("[cache] " + text);
}

}  // namespace

void setCacheWarningHandler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(warning_mutex);
  warningHandler() = std::move(handler);
}

void warnCacheOnce(const std::string& kind, const std::string& text) {
  send(text, [&](std::set<std::string>& warned) { return warned.insert(kind).second; });
}

void warnCacheIfFirst(const std::string& kind, const std::string& text) {
  send(text, [&](std::set<std::string>& warned) {
    if (!warned.empty()) return false;
    warned.insert(kind);
    return true;
  });
}

int64_t byteCountSetting(const char* name, int64_t fallback,
                         const std::string& meaning_of_fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 0) {
    warnCacheOnce(name, std::string(name) + "=" + value + " is not a byte count; " +
                            meaning_of_fallback);
    return fallback;
  }
  return parsed;
}

}  // namespace torchneuron

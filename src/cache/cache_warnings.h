#pragma once
// The cache's warning channel: faults of the cache never stop the program, they warn, at most
// once per kind of fault per process.

#include <cstdint>
#include <functional>
#include <string>

namespace torchneuron {

// Warnings from the cache go through this hook (the device library routes them to PyTorch's
// warning machinery); the default prints to stderr.
void setCacheWarningHandler(std::function<void(const std::string&)> handler);

// Sends "[cache] <text>" to the handler unless a warning of `kind` was sent already.
void warnCacheOnce(const std::string& kind, const std::string& text);

// As warnCacheOnce, but only when the cache has not warned at all yet: for a fault that is
// usually a consequence of one already reported (a profile that cannot be written to a cache
// directory that could not be created).
void warnCacheIfFirst(const std::string& kind, const std::string& text);

// The byte count in environment variable `name`: `fallback` when unset or empty; a value that
// is not a non-negative integer warns (naming the variable and the value) and gives `fallback`.
int64_t byteCountSetting(const char* name, int64_t fallback, const std::string& meaning_of_fallback);

}  // namespace torchneuron

#pragma once
// The cache's warning channel: faults of the cache never stop the program, they warn, at most
// once per kind of fault per process, and reach Python as UserWarnings (docs/persistent-cache.md,
// "Warnings").
//
// A warning is delivered on the thread that raised it when that thread can show it to the user
// (the device library's delivery says so: a thread inside a Python call); otherwise, and always
// on threads marked with QueueCacheWarningsHere (the warm-start thread), it is queued and
// delivered by the next flushCacheWarnings() that can deliver it (every kernel lookup flushes),
// or handed to Python by takeQueuedCacheWarnings().

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/settings.h"

namespace torchneuron {

// Where warnings go: `deliver` shows "[cache] ..." text to the user from the calling thread and
// returns true, or returns false when this thread cannot (the text then stays queued). The
// default prints to stderr.
void setCacheWarningDelivery(std::function<bool(const std::string&)> deliver);
// A delivery that always succeeds (tests, tools).
void setCacheWarningHandler(std::function<void(const std::string&)> handler);

// Sends "[cache] <text>" unless a warning of `kind` was sent already.
void warnCacheOnce(const std::string& kind, const std::string& text);

// As warnCacheOnce, but only when the cache has not warned at all yet: for a fault that is
// usually a consequence of one already reported (a profile that cannot be written to a cache
// directory that could not be created).
void warnCacheIfFirst(const std::string& kind, const std::string& text);

// The one warning for a refused NEURON_CACHE_KEY_FILE (`problem` names the path and what is wrong
// with it): the local and the remote tiers both need the key, and both say the same, once.
void warnKeyFileRefused(const std::string& problem);

// While one lives, warnings raised on the constructing thread are queued, never delivered there.
class QueueCacheWarningsHere {
public:
  QueueCacheWarningsHere();
  ~QueueCacheWarningsHere();
  QueueCacheWarningsHere(const QueueCacheWarningsHere&) = delete;
  QueueCacheWarningsHere& operator=(const QueueCacheWarningsHere&) = delete;
};

// Delivers queued warnings, oldest first, as far as the calling thread can. Cheap when the queue
// is empty (one atomic load).
void flushCacheWarnings();
// Removes and returns the queued warnings ("[cache] ..." texts), for a caller that shows them
// itself (the Python bindings).
std::vector<std::string> takeQueuedCacheWarnings();

// settings() (support/settings.h); its warnings (cache knobs set to values outside their type)
// are sent through this channel, once each, at the first call.
const Settings& cacheSettings();

} // namespace torchneuron

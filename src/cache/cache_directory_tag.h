#pragma once
// Which directory is a torchneuron cache: the cache opens <dir>/db as its RocksDB database and
// `torchneuron-cache clear` deletes it, so a directory that holds anything else (a project with a
// `db` folder, another program's database, $HOME) must never be taken for one. A cache directory
// carries a CACHEDIR.TAG (https://bford.info/cachedir/: backup tools skip it) that names it.

#include <string>

namespace torchneuron {

// The tag's file name and first line (the CACHEDIR.TAG convention), and the line naming us.
constexpr const char* kCacheDirectoryTagName = "CACHEDIR.TAG";
constexpr const char* kCacheDirectoryTagSignature = "Signature: 8a477f597d28d172789f06886806bc55";
constexpr const char* kCacheDirectoryTagOwner = "# This directory is a torchneuron compile cache.";

// Checks that `resolved` (an existing, trusted directory) is a torchneuron cache directory or may
// become one, and tags it: "" when it carries our tag, or holds only names the cache writes (db,
// locks, profiles, store.lock, mac.key, their temporary files; none at all) and not db without
// locks (a cache made before the tag, or being made by another process, which is tagged now);
// otherwise the problem, naming what it holds. Tagging is best effort (a read-only cache stays
// readable untagged).
std::string claimCacheDirectory(const std::string& resolved);

} // namespace torchneuron

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

// Whether `resolved` (an existing directory) is a torchneuron cache directory or may become one,
// changing nothing: "" when it carries our tag, or holds only names the cache writes (db,
// locks, profiles, store.lock, mac.key, their temporary files; none at all) and not db without
// locks (a cache made before the tag, or being made by another process); otherwise the problem,
// naming what it holds. `*tagged` (when given) says whether it carries our tag. The CLI asks
// this before it opens anything, so its rule and the library's are one.
std::string cacheDirectoryProblem(const std::string& resolved, bool* tagged = nullptr);

// cacheDirectoryProblem for `resolved` (an existing, trusted directory), and a directory found
// fit is tagged. Tagging is best effort (a read-only cache stays readable untagged).
std::string claimCacheDirectory(const std::string& resolved);

} // namespace torchneuron

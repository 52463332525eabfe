#pragma once
// Which directories and files the compile cache trusts: the cache holds machine code, so its
// directory must be this user's own and private, checked the way OpenSSH checks key paths
// (secure_path): resolve links, then every component up to / must be owned by root or this user
// and not writable by group or others, except a root-owned sticky directory such as /tmp among
// the parents. The rule and its reasons: docs/persistent-cache.md.

#include <string>

namespace torchneuron {

// NEURON_CACHE_DIR, else <home>/.cache/torchneuron with <home> from HOME or, when HOME is unset
// or empty, from this user's passwd entry; "" when there is no home. Never a shared path.
std::string defaultCacheDirectory();

// Creates `path` (missing components mode 0700) unless it exists, resolves it (realpath) and
// checks the resolved chain: the directory itself owned by this user and not writable by group or
// others; each parent owned by root or this user and not writable by group or others unless it is
// root-owned and sticky. "" with `resolved` set when trusted, else the problem (path and reason).
std::string preparePrivateDirectory(const std::string& path, std::string* resolved);

// The chain check alone, on an existing resolved directory; `final_is_users`: the directory itself
// must be this user's (a cache directory) rather than root's or this user's (a key's directory).
std::string directoryChainProblem(const std::string& resolved, bool final_is_users);

// A directory the cache keeps inside its own (db, locks, profiles): created mode 0700 when
// missing; must be a real directory (no link), owned by this user, not writable by group or
// others. "" or the problem.
std::string preparePrivateSubdirectory(const std::string& path);

// A new file `<prefix>.tmp.<pid>.<n>` created O_CREAT|O_EXCL|O_NOFOLLOW with mode 0600 (never an
// existing file or a link's target): its descriptor, or -1 (errno set). `path` gets its name.
int createTemporaryFile(const std::string& prefix, std::string* path);

// True when `path` (existing or not) resolves to `resolved_directory` or to a place inside it.
bool resolvesInside(const std::string& path, const std::string& resolved_directory);

// The network filesystem `path` lies on ("nfs", "cifs", "lustre", ...), or "" when it is local or
// cannot be told: RocksDB's locking is not meant for a network filesystem (a shared tier is
// NEURON_CACHE_REMOTE=file:///...).
std::string networkFilesystemOf(const std::string& path);
// The name of a network (or cluster) filesystem by statfs()'s f_type, or nullptr.
const char* networkFilesystemName(long type);

// "0644": a mode's permission bits as ls and chmod write them.
std::string octalMode(unsigned mode);

} // namespace torchneuron

#pragma once
// flock() with a bound on the wait. A blocking flock() waits for as long as the holder keeps the
// lock, and the cache's lock files can be held by a process stopped in a debugger (store.lock) or
// by anyone who can read a shared directory (a usage lock): every wait of the cache is bounded.

#include <chrono>

namespace torchneuron {

// Takes `operation` (LOCK_SH or LOCK_EX) on `fd`, polling without blocking (100 us, doubling to
// 1 ms between tries) for at most `wait` (zero: one try). True when held; false with errno set:
// EWOULDBLOCK when the wait ran out, else flock()'s own error.
bool flockWithin(int fd, int operation, std::chrono::steady_clock::duration wait);

} // namespace torchneuron

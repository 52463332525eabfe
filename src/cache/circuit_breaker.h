#pragma once
// The remote tier's circuit breaker: after `threshold` faults in a row (a refused connection, a
// timeout) the tier is skipped for `cooldown`, so an unreachable or hung server costs a few
// timeouts per process, not one per kernel. When the cooldown has passed one call goes through
// (the probe): a success closes the breaker, a fault opens it for another cooldown.
//
// Locking: none; the owner serializes every call (remote_cache.cpp holds its mutex).

#include <chrono>
#include <cstdint>

namespace torchneuron {

class CircuitBreaker {
public:
  using Clock = std::chrono::steady_clock;

  CircuitBreaker(int threshold, std::chrono::milliseconds cooldown)
      : threshold_(threshold), cooldown_(cooldown) {}

  // True when a call may go to the tier at `now`: the breaker is closed, or this call is the
  // probe after the cooldown (one at a time).
  bool allow(Clock::time_point now);
  void succeeded();
  // Counts a fault at `now`; true when it opened the breaker.
  bool failed(Clock::time_point now);

  bool isOpen(Clock::time_point now) const { return open_ && now < open_until_; }
  int64_t trips() const { return trips_; }

private:
  const int threshold_;
  const std::chrono::milliseconds cooldown_;
  int faults_in_a_row_ = 0;
  bool open_ = false;
  bool probing_ = false;
  Clock::time_point open_until_{};
  int64_t trips_ = 0;
};

} // namespace torchneuron

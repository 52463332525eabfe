#include "cache/circuit_breaker.h"

namespace torchneuron {

bool CircuitBreaker::allow(Clock::time_point now) {
  if (!open_) return true;
  if (now < open_until_ || probing_) return false;
  probing_ = true;
  return true;
}

void CircuitBreaker::succeeded() {
  faults_in_a_row_ = 0;
  open_ = probing_ = false;
}

bool CircuitBreaker::failed(Clock::time_point now) {
  if (open_) { // the probe failed (or a call that started before the breaker opened)
    probing_ = false;
    open_until_ = now + cooldown_;
    return false;
  }
  if (++faults_in_a_row_ < threshold_) return false;
  open_ = true;
  open_until_ = now + cooldown_;
  ++trips_;
  return true;
}

} // namespace torchneuron

#pragma once
// Deterministic mode: torch.use_deterministic_algorithms(True) or NEURON_DETERMINISTIC=1. In it
// no result depends on when a background compile finishes: eager ops wait for their kernels
// (device/interim_launch.h) and hot windows for their fused kernels (tracer/fused_kernels.h), so
// a run is bitwise reproducible. Header-only: support/ itself does not link ATen.

#include <ATen/Context.h>

#include "support/settings.h"

namespace torchneuron {

inline bool deterministicMode() {
  return settings().deterministic || at::globalContext().deterministicAlgorithms();
}

} // namespace torchneuron

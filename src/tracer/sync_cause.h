#pragma once
// Why a window ended: the sync points of the adaptive tracer (metrics()["adaptive"]).

#include <cstdint>

namespace torchneuron::tracer {

enum class SyncCause : uint8_t {
  kSynchronize, // torchneuron.synchronize()
  kItem,        // .item() and other scalar reads
  kCopy,        // a copy to or from the host, or between device tensors outside a window
  kHostAccess,  // any other host view of device memory (printing, serialization, ...)
  kFallback,    // an op that ran on the CPU fallback
  kInterim,     // an op that ran on the CPU while its kernel compiles (device/interim_launch.h)
  kResize,      // a device storage resized or replaced
  kAdaptiveOff, // leaving adaptive mode
  kOpLimit,     // NEURON_ADAPTIVE_WINDOW ops recorded
  kByteLimit,   // NEURON_ADAPTIVE_WINDOW_BYTES of pending results
  kBackward,    // the end of a backward pass that traced ops
  kEagerRegion, // device code that launches on memory directly (EagerRegion, tracer.h)
  kCount,
};

constexpr const char* syncCauseName(SyncCause cause) {
  switch (cause) {
  case SyncCause::kSynchronize:
    return "synchronize";
  case SyncCause::kItem:
    return "item";
  case SyncCause::kCopy:
    return "copy";
  case SyncCause::kHostAccess:
    return "host_access";
  case SyncCause::kFallback:
    return "fallback";
  case SyncCause::kInterim:
    return "interim";
  case SyncCause::kResize:
    return "resize";
  case SyncCause::kAdaptiveOff:
    return "adaptive_off";
  case SyncCause::kOpLimit:
    return "op_limit";
  case SyncCause::kByteLimit:
    return "byte_limit";
  case SyncCause::kBackward:
    return "backward";
  case SyncCause::kEagerRegion:
    return "eager_region";
  case SyncCause::kCount:
    break;
  }
  return "unknown";
}

} // namespace torchneuron::tracer

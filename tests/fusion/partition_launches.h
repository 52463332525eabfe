#pragma once
// The partitioner's view of recorded launches (fusion/window_partition.h), for its tests.

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <initializer_list>

#include "fusion/window_partition.h"

namespace torchneuron::fusion {

// An elementwise launch of `signature` over `slots`, writing `output` (escaping the window or
// not) and touching the storages `touched`.
inline PartitionLaunch elementwiseLaunch(const ElementwiseSignature& signature,
                                         const int64_t* slots, const void* output, bool escapes,
                                         c10::ArrayRef<const void*> touched) {
  PartitionLaunch launch;
  launch.elementwise = &signature;
  launch.slots = slots;
  launch.output_storage = output;
  launch.output_escapes = escapes;
  launch.storages = touched;
  return launch;
}

// A reduction launch of `signature` over `slots`, touching `touched`, its outputs in `outputs`
// (storages in output order; none given: unknown) with bit o of `escaping` set when output o
// escapes the window.
inline PartitionLaunch reductionLaunch(const ReductionSignature& signature, const int64_t* slots,
                                       c10::ArrayRef<const void*> touched,
                                       std::initializer_list<const void*> outputs = {},
                                       uint32_t escaping = ~0u) {
  PartitionLaunch launch;
  launch.reduction = &signature;
  launch.slots = slots;
  launch.storages = touched;
  launch.output_storages.assign(outputs.begin(), outputs.end());
  launch.escaping_outputs = escaping;
  return launch;
}

} // namespace torchneuron::fusion

#pragma once
// One member of a fused kernel (fused_kernel.h) lowered at one element: shared by the fused
// elementwise kernel's linalg body and a prologue fusion's reduction loops
// (reduction_kernel_builder.cpp).

#include <vector>

#include "fusion/fused_kernel.h"
#include "fusion/scalar_emitter.h"

namespace torchneuron::fusion {

// The member's value at the element, as its eager kernel would store it (converted to its
// output dtype's storage type, so a later member reads exactly what the eager op would have
// read back: a bfloat16 result rounded, a bool as 0 or 1). `params`: its run-time scalars in
// its compute type; `stored`: the earlier members' values; `externals`: the externals' values
// as loaded.
Value lowerFusedMember(ScalarEmitter& emit, const FusedMember& member,
                       const std::vector<Value>& params, const std::vector<Value>& stored,
                       const std::vector<Value>& externals);

} // namespace torchneuron::fusion

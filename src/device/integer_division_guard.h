#pragma once
// ATen's CPU kernels for integer division (div with a rounding mode, floor_divide, remainder,
// fmod) divide with the machine's instruction, which traps on the minimum of int32 or int64
// divided by -1: the process dies of SIGFPE, on stock PyTorch's CPU as on the host path here.
// The host path checks its calls for that pair first and raises a clear error instead.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchneuron {

// True when `op`, called with the arguments on top of `stack`, is an integer division: div with a
// rounding mode, floor_divide, remainder or fmod whose computation dtype (ATen's result type) is
// integral or bool. The compiled kernels leave those calls to ATen's CPU kernel, which raises
// ZeroDivisionError for a zero divisor; op_routing.cpp runs them as library calls.
bool isIntegerDivisionCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

// Raises when `op`, called with the host arguments at stack[arguments_begin...], is an integer
// division whose computation dtype (ATen's result type) is int32 or int64 and whose dividend is
// that dtype's minimum where, broadcast, its divisor is -1. Other calls return at once; a Python
// number divisor other than -1 costs no tensor work.
void checkIntegerDivisionOverflow(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                  size_t arguments_begin);

} // namespace torchneuron

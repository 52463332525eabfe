#pragma once
// Captured calls (DESIGN.md decision 10: plans are values). A compiled call is captured once:
// the plans it ran, their kernels, and where each of their tensors comes from (an argument of
// the call, or an output of an earlier plan of the call), with a fingerprint of everything
// planning read (dtypes, sizes, strides, offsets, storage and tensor sharing among the
// arguments, number values, the default dtype). A later call with an equal fingerprint replays
// the capture: its outputs are allocated and its kernels launched (or, in a window, recorded)
// without binding or planning again. A call whose tensors cannot all be traced back to its
// arguments, or that made a routed call a replay would skip (a library or fallback op inside
// it), is not captured: it is planned every time.
//
// Three caches keep captures: the adaptive tracer's trie nodes (tracer/tracer.h, CallCacheHooks,
// deferred replays) with deferred_call_cache.h behind them, and, in eager mode,
// eager_call_cache.h (launches at once).
//
// Locking: none here. The capture under way is per thread; a capture is immutable once made.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <memory>

#include "device/plan_executor.h"
#include "support/hash.h"

namespace torchneuron {

using CallFingerprint = c10::SmallVector<int64_t, 48>;

struct CapturedCall;

// The fingerprint of a call's arguments; false for an argument kind captures do not describe.
bool fingerprintCall(c10::ArrayRef<c10::IValue> args, CallFingerprint& out);
const CallFingerprint& fingerprintOf(const CapturedCall& call);
// The hash the caches of captures key a fingerprint by, and the place of (op, hash) in a table
// of `size` entries (a power of two).
Hash64 fingerprintHash(const CallFingerprint& fingerprint);
size_t captureTableIndex(const c10::FunctionSchema* schema, Hash64 hash, size_t size);

// Starts capturing the call on top of `stack` (this thread; a capture left unfinished by an
// exception is dropped by the next begin).
void beginCallCapture(const c10::OperatorHandle& op, const torch::jit::Stack& stack);
// Ends it: the capture, or null when the call did not run (`ran` false) or cannot be replayed.
std::shared_ptr<const CapturedCall> endCallCapture(const c10::OperatorHandle& op,
                                                   const torch::jit::Stack& stack, bool ran);
// Whether a capture is under way on this thread.
bool callCaptureActive();
// A wrapped CPU number the call's kernel made from one of its number arguments (a Scalar
// operand: pow(x, 2), clamp(min=0), fill_(v)) and passes to its plans: the capture under way
// keeps it, and every replay reads it as it is. Only for numbers the fingerprinted arguments
// decide (the fingerprint holds each number argument's value), never for one read from a
// tensor's data.
void captureNumberOperand(const at::Tensor& wrapped);
// A routed call the capture under way cannot replay (a library kernel, the fallback, an interim
// launch) ran inside it: the capture is dropped.
void invalidateCallCapture();

// Replays `call` for the call on top of `stack`, whose fingerprint the caller found equal to
// the capture's: replaces the arguments with the results. `deferred`: records the launches in
// the tracer's window instead of launching them.
void replayMatchedCall(const CapturedCall& call, torch::jit::Stack* stack, bool deferred);

// The tracer's hooks, installed when the device library loads.
void installPlanReplay();

// executePlan's last step: adds the plan it ran to the capture under way, if any.
void capturePlan(const LaunchPlan& plan, c10::ArrayRef<KernelHandle> kernels,
                 at::ArrayRef<at::Tensor> inputs, at::ArrayRef<at::Tensor> given_outputs,
                 at::ArrayRef<at::Tensor> outputs, LaunchCounter* launches);

} // namespace torchneuron

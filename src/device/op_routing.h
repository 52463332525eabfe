#pragma once
// The one routing point. op_routing.cpp is the only file that registers device kernels with the
// dispatcher, and every boxed device kernel it registers is routeOp<route, kernel>: the one entry
// that decides, per call, how an op on device tensors runs. docs/architecture.md ("Routing")
// gives the registration order and the autograd policy.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device/cpu_fallback.h"
#include "device/eager_call_cache.h"
#include "device/interim_launch.h"
#include "device/library_ops.h"
#include "device/plan_replay.h"
#include "tracer/tracer.h"

namespace torchneuron {

// How a boxed device op call runs. Runtime ops (allocation, views, resizing, transfers) are
// registered unboxed and take no route: they change metadata, or reach memory through host
// views, which materialize pending storages themselves.
enum class Route : uint8_t {
  kCompiled, // compiled kernels; a call they decline takes the fallback, or runs interim while
             // its kernel compiles
  kLibrary,  // ATen's CPU library kernel on device memory; runs every call
  kFallback, // ATen's CPU kernel on host views, under NEURON_FALLBACK
};

// A compiled route's kernel: runs the call and returns true, or returns false with the stack
// untouched (a dtype, layout or device mix the kernels do not cover, or a compile failure).
using CompiledKernel = bool (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A library route's kernel: runs every call it gets, raising ATen's errors as the CPU does.
using LibraryKernel = void (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A compiled route's choice for a call its kernel declined: true runs it as a library call (ATen's
// CPU kernel on device memory, runLibraryKernelOnHost), false on the fallback. For ops whose
// kernels leave a deliberate part of their calls to ATen (integer division, half and bfloat16
// calls that ATen rounds step by step), while the calls they do not cover at all (complex dtypes)
// keep the fallback and its warning.
using DeclinedCallFilter = bool (*)(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

// PyTorch 1.13 has no autocast key for PrivateUse1: autocast never casts device ops. The first
// device op run while autocast is on (torch.autocast("cpu"), torch.cpu.amp.autocast) warns once,
// saying so; op_routing.cpp.
void warnAutocastDoesNotApply();

// routeOp's call of its route, once autocast is handled.
template <Route route, auto kernel = nullptr, auto declined = nullptr>
void routeCall(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The per-call decision for every boxed device op. The route and its kernel are fixed when the
// op is registered, so a call costs one direct call: no lookup, no allocation. In adaptive mode
// (tracer/tracer.h) compiled and library calls go through the tracer, which runs them eagerly or
// records them into the op window; the fallback is a sync point (runCpuFallback): the window
// runs before it touches device memory. A compiled route given a library kernel as `declined`
// runs the calls its kernel declines on that library route instead of the fallback (an op whose
// compiled kernel covers only some calls, max_pool2d_with_indices: the rest keep ATen's kernel
// on device memory, without the fallback's warning and sync); given a DeclinedCallFilter, it runs
// the declined calls the filter accepts as generic library calls.
template <Route route, auto kernel = nullptr, auto declined = nullptr>
void routeOp(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Autocast is on when one of its keys is not excluded (they are by default); a thread-local read.
  if (C10_UNLIKELY(!c10::impl::tls_local_dispatch_key_set().excluded_.isSupersetOf(
          c10::autocast_dispatch_keyset))) {
    warnAutocastDoesNotApply();
    // The op runs in its tensors' own dtypes, as the warning says, also where it runs a CPU
    // kernel on host views (which CPU autocast would otherwise cast).
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    routeCall<route, kernel, declined>(op, stack);
    return;
  }
  routeCall<route, kernel, declined>(op, stack);
}

template <Route route, auto kernel, auto declined>
void routeCall(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if constexpr (route == Route::kCompiled) {
    static_assert(std::is_same_v<decltype(kernel), CompiledKernel>);
    bool interim;
    {
      InterimLaunchScope scope; // a kernel still compiling declines the call (interim_launch.h)
      // Eager calls run after any launches still recorded: another thread may have turned
      // adaptive mode on and recorded what this call reads since this thread read the flag.
      bool ran;
      if (!tracer::adaptiveEnabled()) {
        tracer::runRecordedLaunches();
        ran = runWithEagerCallCache(op, stack, kernel);
      } else if (tracer::runsBesideTracer(op, *stack)) {
        tracer::UntracedCall untraced;
        ran = runWithEagerCallCache(op, stack, kernel);
      } else {
        ran = tracer::traceCompiledCall(op, stack, kernel);
      }
      if (ran) return;
      interim = scope.requested();
    }
    // A capture under way (plan_replay.h) cannot replay a CPU kernel run inside its call.
    if constexpr (std::is_same_v<decltype(declined), DeclinedCallFilter>) {
      if (!interim && declined(op, *stack)) {
        routeCall<Route::kLibrary, &runLibraryKernelOnHost>(op, stack);
        return;
      }
    } else if constexpr (!std::is_same_v<decltype(declined), std::nullptr_t>) {
      static_assert(std::is_same_v<decltype(declined), LibraryKernel>);
      if (!interim) {
        routeCall<Route::kLibrary, declined>(op, stack);
        return;
      }
    }
    invalidateCallCapture();
    if (interim)
      runInterimOnHost(op, stack);
    else
      runCpuFallback(op, stack);
  } else if constexpr (route == Route::kLibrary) {
    static_assert(std::is_same_v<decltype(kernel), LibraryKernel> &&
                  std::is_same_v<decltype(declined), std::nullptr_t>);
    invalidateCallCapture();
    if (tracer::adaptiveEnabled()) {
      if (tracer::runsBesideTracer(op, *stack)) {
        tracer::UntracedCall untraced;
        kernel(op, stack);
      } else {
        tracer::traceLibraryCall(op, stack, kernel);
      }
    } else {
      tracer::runRecordedLaunches(); // as for a compiled call above
      kernel(op, stack);
    }
  } else {
    static_assert(route == Route::kFallback && std::is_same_v<decltype(kernel), std::nullptr_t> &&
                  std::is_same_v<decltype(declined), std::nullptr_t>);
    invalidateCallCapture();
    runCpuFallback(op, stack);
  }
}

} // namespace torchneuron

#pragma once
// Running an ATen CPU kernel on device tensors in place: the shared mechanism behind library
// kernels and the CPU fallback.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchneuron {

// Checks that the call's tensors are on one device, replaces each device tensor argument by a
// host view of its memory (and a neuron Device argument by the CPU), calls the op's CPU kernel,
// applies resizes of written arguments to their device tensors, and leaves device tensors as
// results: aliases where the CPU result aliases an argument, copies otherwise.
void runBoxedOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// runBoxedOnHost, counted as a library launch of the op (library_ops.cpp).
void runLibraryKernelOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace torchneuron

#pragma once
// What PyTorch itself leaves unsafe across fork(), made safe for the processes that load the
// device. Two hazards, both caught by tests/device/test_fork_safety.py (a thread drawing random
// CPU tensors while another thread forks; the child draws too):
//
// - PyTorch's default CPU generator. Every random op, on the CPU and on the device (whose random
//   ops run ATen's CPU kernels on device memory and draw from the same generator), holds the
//   generator's mutex while it draws, and PyTorch registers no fork handler for it: a thread
//   inside `torch.rand` when another thread forks leaves the mutex locked in the child for ever.
//   The mutex is held across fork() (ForkRank::kCpuGenerator): fork() waits for the draw in
//   progress. Only the default generator: a thread drawing from a torch.Generator of its own when
//   another thread forks can still leave that one locked in the child, as in stock PyTorch.
// - ATen's CPU capability (which vector width its kernels use), a function-local static made at
//   the first CPU kernel a process runs through ATen's DispatchStub. A thread inside its
//   initialization when another thread forks leaves the static's guard taken in the child, whose
//   first CPU kernel then waits for ever. A process that only ever ran device ops has not made
//   it yet when its threads start; it is made here, before.

namespace torchneuron {

// Registers the generator's fork handlers and makes the CPU capability; later calls do nothing.
// Called when the Python module loads (bindings/module.cpp), before the program starts threads;
// a C++ program that forks while its threads use PyTorch calls it once before. Never from a
// static initializer.
void makeTorchForkSafe();

} // namespace torchneuron

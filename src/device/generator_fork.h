#pragma once
// PyTorch's default CPU generator across fork().
//
// Every random op, on the CPU and on the device (whose random ops run ATen's CPU kernels on
// device memory and draw from the same generator), holds the generator's mutex while it draws.
// PyTorch registers no fork handler for it: a thread inside `torch.rand` when another thread
// forks (a DataLoader starting its workers while a second thread initializes weights) leaves the
// mutex locked in the child for ever, and the child's first random op hangs. This holds the mutex
// across fork() (ForkRank::kCpuGenerator): fork() waits for the draw in progress. Only the default
// generator: a thread drawing from a torch.Generator of its own when another thread forks can
// still leave that one locked in the child, as in stock PyTorch.

namespace torchneuron {

// Registers the fork handlers for the default CPU generator's mutex; later calls do nothing.
// Called when the Python module loads (bindings/module.cpp); a C++ program that forks while its
// threads draw random numbers calls it once before. Never from a static initializer.
void holdCpuGeneratorAcrossFork();

} // namespace torchneuron

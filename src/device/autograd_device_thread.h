#pragma once
// PyTorch 1.13's autograd engine runs the backward ops of each non-CPU device on a worker thread
// of its own, and counts the devices once, at the process's first backward pass
// (Engine::start_device_threads: one queue and worker per device index, sized by the registered
// device guards). A backward pass that ran before this library was loaded (a model trained on
// the CPU before `import torchneuron`) counted no device: the engine then had no queue for the
// device's index, and every later backward pass through device tensors failed inside PyTorch
// ("device_ready_queues_.size() INTERNAL ASSERT FAILED", engine.cpp).

namespace torchneuron {

// When the engine started without the device, runs the engine's own start of device threads
// again, now that it counts the device: the device's queue and worker, and PyTorch's fork guard
// (a child forked afterwards refuses backward passes with PyTorch's "Unable to handle autograd's
// threading in combination with fork-based multiprocessing", as after any first backward pass
// of a process that has the device). Otherwise does nothing. Returns whether it started the
// worker. Called when the Python module loads (bindings/module.cpp), outside the dynamic
// loader's lock (never from a static initializer); a first backward pass still under way in
// another thread is waited for.
bool startMissingAutogradDeviceThread();

} // namespace torchneuron

#pragma once
// PyTorch 1.13's autograd engine runs the backward ops of each non-CPU device on a worker thread
// of its own, and counts the devices once, at the process's first backward pass
// (Engine::start_device_threads: one queue and worker per device index, sized by the registered
// device guards). A backward pass that ran before this library was loaded (a model trained on
// the CPU before `import torchneuron`) counted no device: the engine then had no queue for the
// device's index, and every later backward pass through device tensors failed inside PyTorch
// ("device_ready_queues_.size() INTERNAL ASSERT FAILED", engine.cpp).

namespace torchneuron {

// When the engine started without the device, gives it the device's queue and worker thread, as
// its first backward pass would have (the worker runs the engine's own thread_init, Python's
// engine's where Python drives it); otherwise does nothing. Returns whether it started one.
// Called when the Python module loads (bindings/module.cpp), before any device tensor exists
// (no backward pass can read the engine's queues for the device meanwhile), outside the dynamic
// loader's lock (never from a static initializer). A process forked afterwards gets a fresh
// engine in the child (PyTorch's Python engine re-creates itself there), which counts the device
// at the child's first backward pass.
bool startMissingAutogradDeviceThread();

} // namespace torchneuron

#pragma once
// An autograd engine that runs a backward pass on the thread that asked for it, device ops
// included.
//
// Why: PyTorch 1.13's engine runs the ops of every device but the CPU on a worker thread of its
// own per device index (engine.cpp, Engine::ready_queue: only CPU and Meta tasks stay on the
// caller's queue), so every `backward()` of device tensors hands its work to that thread and
// waits for it: two thread wake-ups, about 35 us on this VM, and the pass runs on whichever core
// the scheduler gives the worker, away from the caches the forward pass warmed. On a device whose
// memory is host memory, nothing needs that thread.
//
// How: an Engine of PyTorch's own (all of its scheduling, dependency counting, hooks, reentrant
// passes, callbacks and error handling), whose device queues are the calling thread's CPU queue
// (set per graph task: GraphTask::cpu_ready_queue_), so Engine::ready_queue() routes a device
// node where it routes a CPU node. It starts no device threads. One engine per thread: the
// queues are per thread, and two threads' passes then never share state (each used to wait for
// the one device thread in turn; they now run side by side, as two CPU passes always did).
// PythonEngine's Python error handling (a hook's Python exception kept and re-raised as itself)
// is repeated here; it cannot be subclassed (its constructor is private).
//
// Threads: callerThreadEngine() returns this thread's engine, made at its first call and
// destroyed when the thread exits. A reentrant pass deeper than the engine's recursion limit
// runs on a helper thread of that engine (PyTorch's own pool), which reads the engine's queues
// while their owner waits; they are written only when the thread's CPU queue changes, which it
// does not while a pass of that thread runs.

#include <torch/csrc/autograd/engine.h>

namespace torchneuron {

torch::autograd::Engine& callerThreadEngine();

} // namespace torchneuron

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
// node where it routes a CPU node. It starts no device threads. One engine per thread at a time:
// the queues are per thread, so two threads' passes run side by side (they share only what CPU
// passes of two threads share: graph nodes, AccumulateGrad's lock), where PyTorch's engine ran
// both threads' device ops on its one device thread. PythonEngine's Python error handling (a
// hook's Python exception kept and re-raised as itself) is repeated here; it cannot be
// subclassed (its constructor is private). A failed pass's tasks that never ran (their
// gradients, the nodes and their saved tensors) stay in the thread's queue until its next pass
// drops them, as a failed CPU pass's do in PyTorch; PyTorch's device thread dropped a device
// pass's at once. (ReadyQueue's members are private and not exported: nothing here can empty it.)
//
// Threads: callerThreadEngine() returns this thread's engine, taken at its first call from the
// engines of threads that have exited, or made. Engines are never freed: a pass nested deeper
// than the engine's recursion limit (60) runs on reentrant helper threads the engine starts
// (PyTorch's add_thread_pool_task), which keep using it; the next thread to take the engine
// reuses them, so helpers number at most what the deepest concurrent passes needed. Starting a
// helper arms PyTorch's fork guard: a child forked afterwards refuses backward passes, as after
// PyTorch's own engine started its threads.

#include <torch/csrc/autograd/engine.h>

#include <cstdint>

namespace torchneuron {

torch::autograd::Engine& callerThreadEngine();

// How many engines callerThreadEngine() has made in this process (tests: a thread that exits
// leaves its engine to the next).
int64_t callerThreadEnginesMade();

} // namespace torchneuron

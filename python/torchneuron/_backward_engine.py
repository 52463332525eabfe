"""Backward passes on the calling thread (``NEURON_BACKWARD_ON_CALLER``).

PyTorch 1.13 runs the backward ops of every device but the CPU on a worker thread of its own, so
each ``backward()`` of device tensors handed its work to that thread and waited for it: about 35
us per pass on this VM, most of a small model's step, and the pass ran on whichever core the
worker was given. ``torch.autograd.backward`` and ``torch.autograd.grad`` call
``torch.autograd.Variable._execution_engine.run_backward``; install() puts an engine there whose
``run_backward`` is PyTorch's own (same arguments, checks, errors and results) run by an autograd
engine of the caller's thread (bindings/caller_thread_engine.h): the whole pass, device ops
included, runs on the thread that called ``backward()``, as a CPU pass does.
``queue_callback`` and ``is_checkpoint_valid`` are PyTorch's engine's: they act on the pass the
calling thread is running, whichever engine runs it.

When: ``auto`` (the default) runs a pass on the caller's thread unless PyTorch's idle OpenMP
workers spin long and PyTorch runs more than one intra-op thread: then on PyTorch's engine. On
this 2-vCPU VM, at 2 threads with libgomp's default spin, passes on the caller's thread made
whole training steps 1.3x-3x slower (stock's CPU steps in the same process too): the caller's
OpenMP workers spin-wait after each compiled kernel while OpenBLAS's threads need the cores.
The import's OpenMP wait rule (``NEURON_OPENMP_WAIT``, device/openmp_wait.h) makes them spin
briefly, as ``OMP_WAIT_POLICY=passive`` does, and then the caller's thread is as fast at 2
threads as at 1 (docs/benchmarks.md, "Where a step's backward runs"). ``1``: always the
caller's thread; ``0``: always PyTorch's engine.
"""

import contextlib
import os
import warnings

import torch
from torch.autograd.variable import Variable

from . import _C, _autograd

SETTING = "NEURON_BACKWARD_ON_CALLER"
CHOICES = ("auto", "1", "0")


class CallerThreadEngine:
    """Stands in for ``torch._C._ImperativeEngine`` at ``Variable._execution_engine``."""

    def __init__(self, pytorch_engine, always: bool, workers_spin_long: bool):
        self.pytorch_engine = pytorch_engine
        self.always = always
        self.workers_spin_long = workers_spin_long

    def runs_on_caller(self) -> bool:
        """Whether a pass started now on this thread runs on it (the setting's rule)."""
        return self.always or not self.workers_spin_long or torch.get_num_threads() == 1

    def run_backward(self, *args, **kwargs):
        if self.runs_on_caller():
            return _autograd.run_backward(*args, **kwargs)
        return self.pytorch_engine.run_backward(*args, **kwargs)

    def queue_callback(self, callback):
        return self.pytorch_engine.queue_callback(callback)

    def is_checkpoint_valid(self):
        return self.pytorch_engine.is_checkpoint_valid()


def setting() -> str:
    value = os.environ.get(SETTING, "auto")
    if value in CHOICES:
        return value
    warnings.warn(f"[device] {SETTING}={value!r} is not one of auto, 1, 0; using auto")
    return "auto"


def install() -> None:
    chosen = setting()
    if chosen == "0" or isinstance(Variable._execution_engine, CallerThreadEngine):
        return
    Variable._execution_engine = CallerThreadEngine(
        Variable._execution_engine, always=chosen == "1",
        workers_spin_long=_C.idle_openmp_workers_spin_long())


@contextlib.contextmanager
def pytorch_engine():
    """Within: backward passes run by PyTorch's engine (device ops on its device thread), in every
    thread of the process; for comparisons (bench/backward_handoff.py)."""
    saved = Variable._execution_engine
    if isinstance(saved, CallerThreadEngine):
        Variable._execution_engine = saved.pytorch_engine
    try:
        yield
    finally:
        Variable._execution_engine = saved


def on_caller() -> bool:
    """Whether a backward pass started now on this thread runs on it."""
    engine = Variable._execution_engine
    return isinstance(engine, CallerThreadEngine) and engine.runs_on_caller()


__all__ = ["install", "on_caller", "pytorch_engine", "SETTING"]

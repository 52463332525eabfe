"""Backward passes on the calling thread (``NEURON_BACKWARD_ON_CALLER``, on by default).

PyTorch 1.13 runs the backward ops of every device but the CPU on a worker thread of its own, so
each ``backward()`` of device tensors handed its work to that thread and waited for it: about 35
us per pass on this VM, most of a small model's step, and the pass ran on whichever core the
worker was given. ``torch.autograd.backward`` and ``torch.autograd.grad`` call
``torch.autograd.Variable._execution_engine.run_backward``; install() puts an engine there whose
``run_backward`` is PyTorch's own (same arguments, checks, errors and results) run by an autograd
engine of the caller's thread (bindings/caller_thread_engine.h): the whole pass, device ops
included, runs on the thread that called ``backward()``, as a CPU pass does.
``queue_callback`` and ``is_checkpoint_valid`` are PyTorch's engine's: they act on the pass the
calling thread is running, whichever engine runs it. ``NEURON_BACKWARD_ON_CALLER=0`` keeps
PyTorch's engine.
"""

import contextlib
import os
import warnings

from torch.autograd.variable import Variable

from . import _autograd

SETTING = "NEURON_BACKWARD_ON_CALLER"


class CallerThreadEngine:
    """Stands in for ``torch._C._ImperativeEngine`` at ``Variable._execution_engine``."""

    def __init__(self, pytorch_engine):
        self.pytorch_engine = pytorch_engine

    def run_backward(self, *args, **kwargs):
        return _autograd.run_backward(*args, **kwargs)

    def queue_callback(self, callback):
        return self.pytorch_engine.queue_callback(callback)

    def is_checkpoint_valid(self):
        return self.pytorch_engine.is_checkpoint_valid()


def enabled_by_setting() -> bool:
    value = os.environ.get(SETTING, "1")
    if value in ("0", "1"):
        return value == "1"
    warnings.warn(f"[device] {SETTING}={value!r} is not 0 or 1; backward passes run on the "
                  f"calling thread (the default)")
    return True


def install() -> None:
    if not enabled_by_setting() or isinstance(Variable._execution_engine, CallerThreadEngine):
        return
    Variable._execution_engine = CallerThreadEngine(Variable._execution_engine)


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


def active() -> bool:
    """Whether backward passes run on the calling thread."""
    return isinstance(Variable._execution_engine, CallerThreadEngine)


__all__ = ["install", "active", "pytorch_engine", "SETTING"]

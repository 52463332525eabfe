"""torch.autocast and the neuron device on PyTorch 1.13.

PyTorch 1.13 has autocast for the CPU, CUDA and XPU only: no dispatch key casts PrivateUse1 ops.
Autocast that is on around device ops (``torch.autocast("cpu")``, ``torch.cpu.amp.autocast``)
is seen by the device's routing, which warns once that it does not apply and runs the ops in
their tensors' own dtype (op_routing.h). ``torch.autocast("privateuseone")`` would raise
"User specified autocast device_type must be 'cuda' or 'cpu'"; here it warns once in the same
words and is a context that changes nothing, so scripts that pass their device's type through
(``torch.autocast(device_type=x.device.type)``) run, in full precision.
"""

import functools
import warnings

import torch
import torch.amp.autocast_mode

DEVICE_TYPE = "privateuseone"

MESSAGE = ("[autocast] autocast does not apply to the neuron device (PyTorch 1.13 has no "
           "autocast for PrivateUse1): ops on device tensors run in the tensors' own dtype "
           "(float32 stays float32). Cast the model or inputs (model.to(torch.bfloat16)) for lower "
           "precision.")

_warned = False

_autocast = torch.amp.autocast_mode.autocast
_original_init = _autocast.__init__
_original_enter = _autocast.__enter__
_original_exit = _autocast.__exit__


def _on_device(self):
    return getattr(self, "device", None) == DEVICE_TYPE


@functools.wraps(_original_init)
def _init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
    if device_type != DEVICE_TYPE or torch._jit_internal.is_scripting():
        return _original_init(self, device_type, dtype=dtype, enabled=enabled,
                              cache_enabled=cache_enabled)
    global _warned
    if enabled and not _warned:
        _warned = True
        warnings.warn(MESSAGE, UserWarning, stacklevel=2)
    self.device = device_type
    self.fast_dtype = dtype if dtype is not None else torch.get_autocast_cpu_dtype()
    self._cache_enabled = torch.is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
    self._enabled = False


@functools.wraps(_original_enter)
def _enter(self):
    return None if _on_device(self) else _original_enter(self)


@functools.wraps(_original_exit)
def _exit(self, exc_type, exc_val, exc_tb):
    return False if _on_device(self) else _original_exit(self, exc_type, exc_val, exc_tb)


def install():
    _autocast.__init__ = _init
    _autocast.__enter__ = _enter
    _autocast.__exit__ = _exit

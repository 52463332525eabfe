"""``Tensor.new(...)`` for device tensors on PyTorch 1.13.

PyTorch 1.13's legacy constructor (``torch/csrc/utils/tensor_new.cpp``) accepts only the dispatch
keys of its built-in devices, so ``x.new(...)`` of a device tensor raised "new(): expected key in
DispatchKeySet(CPU, CUDA, ...) but got: PrivateUse1", and so did the PyTorch code built on it:
``nn.init.orthogonal_``, ``optim.Rprop``, ``optim.Adamax(foreach=True)``, ``sample()`` and
``rsample()`` of the ``Exponential``, ``Laplace``, ``Cauchy``, ``Geometric`` and ``Multinomial``
distributions, ``nn.CrossMapLRN2d``. A device tensor's ``new`` now means what it means for a CPU
tensor, on the device:

- arguments are parsed by PyTorch's own CPU ``new`` (sizes as ints or a ``torch.Size``, data as a
  sequence or array: a tuple or list is data, as on the CPU) in the tensor's dtype, and the
  result is made on the tensor's device (uninitialized for sizes, as on the CPU);
- ``x.new(other)`` is an alias of ``other`` (it shares its memory), which must have ``x``'s dtype
  and device type, else the same ``TypeError`` as the CPU's;
- a ``device=`` of another type raises the CPU's "legacy constructor expects device type" error;
- a storage or ``cdata`` argument goes to PyTorch's own ``new``, which raises its error.
"""

import torch

DEVICE_TYPE = "privateuseone"

_original_new = torch.Tensor.new


def _options_text(dtype, device):
    return (f"TensorOptions(dtype={dtype}, device={device}, layout=Strided, requires_grad=false "
            f"(default), pinned_memory=false (default), memory_format=(nullopt))")


def _new(self, *args, **kwargs):
    if self.device.type != DEVICE_TYPE or self.layout != torch.strided:
        return _original_new(self, *args, **kwargs)
    if "cdata" in kwargs or any(isinstance(a, (torch.TypedStorage, torch.UntypedStorage))
                                for a in args):
        return _original_new(self, *args, **kwargs)
    device = kwargs.pop("device", None)
    if device is not None and torch.device(device).type != DEVICE_TYPE:
        raise RuntimeError(f"legacy constructor expects device type: {DEVICE_TYPE} but device "
                           f"type: {torch.device(device).type} was passed")
    if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
        other = args[0]
        if other.dtype != self.dtype or other.device.type != DEVICE_TYPE:
            raise TypeError(f"expected {_options_text(self.dtype, self.device)} "
                            f"(got {_options_text(other.dtype, other.device)})")
        return torch.ops.aten.alias(other)
    made = _original_new(torch.empty(0, dtype=self.dtype), *args, **kwargs)
    return made.to(self.device)


def install() -> None:
    torch.Tensor.new = _new

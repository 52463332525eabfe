"""Python-side storage support for the neuron device on PyTorch 1.13.

PyTorch 1.13's Python layer cannot pass a storage of a PrivateUse1 device through its argument
parser ("Invalid device for storage: privateuseone"), which breaks ``torch.save``,
``torch.load`` and ``copy.deepcopy`` of device tensors. This module routes those three through
CPU storages that carry the device as their location, keeping PyTorch's file format:

- saving: a device tensor pickles as a CPU copy of its whole storage (one copy per storage per
  save, so views stay views) whose location tag is ``privateuseone:N``;
- loading: a storage tagged ``privateuseone:N``, or any storage loaded with
  ``map_location=torchneuron.device()``, is rebuilt on the device (views still share);
  ``map_location="cpu"`` keeps it on the CPU as usual;
- deepcopy: device tensors copy with ``clone()`` like PyTorch's other non-CPU backends;
- ``copy.copy``, which rebuilds from the same reduction as pickling, gets a view of the device
  storage (shared, as a CPU tensor's shallow copy is).
"""

import collections
import weakref

import torch
import torch._utils
import torch.serialization

DEVICE_TYPE = "privateuseone"

# Device storage (data_ptr, nbytes) -> its CPU copy, alive while a pickler holds the copy.
_saved_copies = weakref.WeakValueDictionary()


def _device_storage_as_cpu(tensor):
    """A CPU TypedStorage (uint8) with the bytes of the tensor's whole device storage."""
    # The adaptive tracer's pending results get their memory (and their final address) when
    # their window runs: run it before the address becomes the storage's key.
    from torchneuron import _C
    _C.sync_window()
    device_storage = tensor.storage()
    key = (device_storage.data_ptr(), device_storage.nbytes())
    copy = _saved_copies.get(key)
    if copy is None:
        # The whole storage from its first element: set_(tensor, 0, ...) kept the view's own
        # storage offset (a slice saved before its base copied from its offset on, past the
        # storage's end, and loaded shifted by it once more).
        whole = tensor.as_strided((device_storage.size(),), (1,), 0)
        copy = whole.cpu().storage()
        copy._storage._neuron_location = f"{DEVICE_TYPE}:{tensor.device.index or 0}"
        # copy.copy rebuilds from this very storage object in this process (a pickle writes its
        # bytes and loads a new one): it rebuilds a view of the device storage (_rebuild_tensor).
        copy._storage._neuron_source = whole
        _saved_copies[key] = copy
    if copy.dtype != tensor.dtype:
        # The same bytes seen as another dtype (x.view(torch.int32)): a typed view of the same
        # copy, which torch.save refuses as it does for CPU tensors ("Cannot save multiple
        # tensors or storages that view the same data as different types"); the copy's own
        # dtype would have loaded this tensor's bytes as that dtype.
        return torch.storage.TypedStorage(wrap_storage=copy._storage, dtype=tensor.dtype)
    return copy


_original_reduce_ex_internal = torch.Tensor._reduce_ex_internal


def _reduce_ex_internal(self, proto):
    if self.device.type != DEVICE_TYPE:
        return _original_reduce_ex_internal(self, proto)
    storage = _device_storage_as_cpu(self)
    args = (storage, self.storage_offset(), tuple(self.size()), self.stride(), self.requires_grad,
            collections.OrderedDict())
    return (torch._utils._rebuild_tensor_v2, args)


def _tag(storage):
    return getattr(storage, "_neuron_location", None)


def _restore(storage, location):
    """Marks a CPU storage as belonging on a neuron device; _rebuild_tensor moves it."""
    if not location.startswith(DEVICE_TYPE):
        return None
    from . import device
    index = int(location.split(":", 1)[1]) if ":" in location else 0
    storage._neuron_target = device(index)
    return storage


_original_rebuild_tensor = torch._utils._rebuild_tensor


def _rebuild_tensor(storage, storage_offset, size, stride):
    untyped = storage.untyped() if hasattr(storage, "untyped") else storage._storage
    target = getattr(untyped, "_neuron_target", None)
    source = getattr(untyped, "_neuron_source", None)
    if target is None and source is not None:  # copy.copy: shares the storage, as on the CPU
        whole = source if source.dtype == storage.dtype else source.view(storage.dtype)
        return torch.empty(0, dtype=storage.dtype, device=whole.device).set_(
            whole, storage_offset, size, stride)
    if target is None:
        return _original_rebuild_tensor(storage, storage_offset, size, stride)
    whole = getattr(untyped, "_neuron_device_copy", None)
    if whole is None or whole.dtype != storage.dtype:
        cpu_whole = torch.tensor([], dtype=storage.dtype).set_(untyped)
        whole = cpu_whole.to(target)
        untyped._neuron_device_copy = whole
    return torch.empty(0, dtype=storage.dtype, device=target).set_(whole, storage_offset, size, stride)


_original_deepcopy = torch.Tensor.__deepcopy__


def _deepcopy(self, memo):
    if self.device.type != DEVICE_TYPE or type(self) is not torch.Tensor:
        return _original_deepcopy(self, memo)
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                           "the deepcopy protocol at the moment")
    with torch.no_grad():
        result = self.clone()
    result.requires_grad_(self.requires_grad)
    if self.grad is not None:
        result.grad = self.grad.__deepcopy__(memo)
    memo[id(self)] = result
    return result


def install() -> None:
    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
    torch._utils._rebuild_tensor = _rebuild_tensor
    torch.Tensor.__deepcopy__ = _deepcopy
    # Before the CPU tagger (priority 10): a CPU copy of a device storage is tagged as device.
    torch.serialization.register_package(5, _tag, _restore)

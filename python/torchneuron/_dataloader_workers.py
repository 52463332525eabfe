"""Device tensors and worker processes on PyTorch 1.13.

A process cannot hand a neuron device tensor to another: PyTorch shares a tensor between
processes through shared CPU memory (or CUDA IPC), which device memory is not. Without this
module a ``Dataset`` that returns device tensors under ``DataLoader(num_workers>0)`` fails in the
worker's collate with ``new(): expected key in DispatchKeySet(CPU, CUDA, ...) but got:
PrivateUse1`` (or, without batching, hangs the loader while the worker's queue thread prints
``_share_fd_: only available on CPU``). Here both become one error that says what to do:

- each DataLoader worker checks what the Dataset and ``collate_fn`` give it, and raises the error
  (the DataLoader re-raises it in the main process, naming the worker);
- pickling a device tensor for another process (``torch.multiprocessing`` queues, pipes) raises
  it too.
"""

import functools
import multiprocessing.reduction

import torch
import torch.multiprocessing.reductions
import torch.utils.data._utils.worker as _worker

DEVICE_TYPE = "privateuseone"

_ADVICE = ("return CPU tensors from the Dataset (and collate_fn) and move each batch to the device "
           "in the main process (batch.to(torchneuron.device())), or use num_workers=0")


def _device_tensor_in(value):
    """The first neuron device tensor in a sample or batch (tensors, sequences, mappings)."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == DEVICE_TYPE else None
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return None
    for item in items:
        found = _device_tensor_in(item)
        if found is not None:
            return found
    return None


def _check_worker_data(value, what):
    found = _device_tensor_in(value)
    if found is not None:
        info = torch.utils.data.get_worker_info()
        worker = f"DataLoader worker {info.id}" if info is not None else "A DataLoader worker"
        raise RuntimeError(f"[torchneuron] {worker} got a tensor on the neuron device ({found.device}) "
                           f"from the {what}: a worker process cannot pass device tensors to the "
                           f"main process; {_ADVICE}")


def _checked_collate(collate_fn, data):
    _check_worker_data(data, "Dataset")
    batch = collate_fn(data)
    _check_worker_data(batch, "collate_fn")
    return batch


@functools.wraps(_worker._worker_loop)
def _worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event, auto_collation,
                 collate_fn, *args, **kwargs):
    return _original_worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event,
                                 auto_collation, functools.partial(_checked_collate, collate_fn),
                                 *args, **kwargs)


def _reduce_tensor(tensor):
    if tensor.device.type == DEVICE_TYPE:
        raise RuntimeError(f"[torchneuron] a tensor on the neuron device ({tensor.device}) cannot be "
                           "sent to another process (device memory is not shared memory): send "
                           "tensor.cpu() and move it to the device in the receiving process")
    return torch.multiprocessing.reductions.reduce_tensor(tensor)


_original_worker_loop = _worker._worker_loop


def install():
    # DataLoader starts its workers with the module's _worker_loop, looked up at each start.
    _worker._worker_loop = _worker_loop
    for cls in (torch.Tensor, torch.nn.parameter.Parameter):
        multiprocessing.reduction.ForkingPickler.register(cls, _reduce_tensor)

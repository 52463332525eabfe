"""torch.distributed on the neuron device: the c10d backend ``"neuron"``.

``import torchneuron`` registers it, so ``torch.distributed.init_process_group(backend="neuron")``
works in any script. It runs PyTorch's gloo collectives on host views of device tensors (device
memory is host memory: nothing is copied), with DDP, ``torchrun`` (or ``python3 -m
torchneuron.run``) and multi-node rendezvous unchanged. See docs/distributed.md.
"""

import torch.distributed as dist

BACKEND = "neuron"


def _new_process_group(store, rank, world_size, timeout):
    """The backend's creator (torch.distributed calls it with the group's prefixed store)."""
    from . import _c10d  # the backend's library loads with the first group, not at import

    # The transport: gloo over TCP, made as torch.distributed makes its own gloo groups
    # (GLOO_SOCKET_IFNAME picks the interface), and owned by the neuron group from now on.
    transport = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return _c10d.new_process_group(transport)


def _register_backend() -> None:
    # Idempotent: a second import (importlib.reload) must not fail on the registry's asserts.
    if dist.is_available() and BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _new_process_group)


_register_backend()

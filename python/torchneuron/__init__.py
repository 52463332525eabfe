"""torchneuron: an out-of-tree PyTorch device with an MLIR/LLVM eager engine.

``import torchneuron`` registers the device with PyTorch. On PyTorch 1.13 the device type
string is ``privateuseone`` (PrivateUse1 cannot be renamed there); use :func:`device` rather
than spelling it.
"""

import atexit
import contextlib
import os
import sys
import warnings

import torch

from . import _C
from . import _autocast
from . import _backward_engine
from . import _dataloader_workers
from . import _legacy_new
from . import _storage_compat
from . import distributed  # registers the c10d backend "neuron" (docs/distributed.md)


def _emit_cache_warnings() -> None:
    """Raises, as UserWarnings, the cache warnings no op could raise yet (those of the warm
    start's thread, and of the settings read at import)."""
    for text in _C.take_cache_warnings():
        warnings.warn(text, UserWarning, stacklevel=3)


# The NEURON_* settings: a bad NEURON_FALLBACK raises here; a bad cache knob warns (README).
_C.check_settings()
_emit_cache_warnings()

# Adaptive eager (docs/adaptive-eager.md): NEURON_ADAPTIVE_EAGER=1 turns the op-window tracer on
# for the process; a bad NEURON_ADAPTIVE_* value raises ValueError here.
_C.configure_adaptive()

# Warm start (docs/warm-start.md): the kernels and memory the previous run of this program used
# are made ready in the background while it starts; at exit this run's profile is written. Its
# thread's warnings are raised by the next device op that needs a kernel, synchronize() or
# metrics().
_C.start_warm_start()
atexit.register(_C.finish_warm_start)
# Compiled kernels still queued for the persistent cache are written before Python goes (its
# warnings can still be shown); the library's own exit handler catches anything later.
atexit.register(_C.flush_store_writes)
# Kernels still compiling in the background (interim launches ran their ops on the CPU
# meanwhile) are finished first, so that they are stored and the next run does not start cold.
atexit.register(_C.wait_for_background_compiles)
# So are the adaptive tracer's fused kernels (registered last, it runs first): a compile still
# under way when the library's own exit handler ran used to store its kernel after Python had
# gone, past flush_store_writes.
atexit.register(_C.wait_for_fused_compiles)

DEVICE_TYPE = "privateuseone"

__all__ = [
    "DEVICE_TYPE", "device", "is_available", "device_count", "synchronize", "manual_seed",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "empty_cache", "metrics", "reset_metrics",
    "set_adaptive", "adaptive_enabled", "adaptive", "explain", "set_adaptive_debug",
    "set_adaptive_fusion", "set_adaptive_min_bytes", "adaptive_min_bytes",
    "set_adaptive_unbacked", "adaptive_unbacked", "set_list_launches", "list_launches_enabled",
    "set_fused_lstm", "fused_lstm_enabled",
    "wait_for_fused_compiles", "wait_for_compiles",
]


def device(index: int = 0) -> torch.device:
    """The torch.device of neuron device ``index`` (``privateuseone:index``)."""
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"[device] device index must be an int, got {type(index).__name__}")
    _C.check_device_index(index)
    return torch.device(DEVICE_TYPE, index)


def is_available() -> bool:
    """Always true: the device target is the host CPU through LLVM."""
    return _C.device_count() > 0


def device_count() -> int:
    return _C.device_count()


def synchronize(device=None) -> None:
    """Waits for all work on the device: runs the adaptive tracer's recorded launches (a sync
    point), waits until the compiled kernels handed to the persistent cache's background writers
    are on disk and published to the remote tier, and raises the cache warnings that background
    work queued."""
    _index_of(device)
    _C.sync_window()
    _C.flush_store_writes()
    _emit_cache_warnings()


def manual_seed(seed: int) -> None:
    """Seeds the device's random ops. They draw from PyTorch's default CPU generator, so
    ``torch.manual_seed`` does the same and device results equal CPU results."""
    torch.manual_seed(seed)


def _index_of(dev) -> int:
    if dev is None:
        return 0
    if isinstance(dev, int) and not isinstance(dev, bool):
        _C.check_device_index(dev)  # before torch.device, whose 8-bit index wraps (256 is 0)
        return dev
    dev = torch.device(dev)
    if dev.type != DEVICE_TYPE:
        raise ValueError(f"[device] expected a {DEVICE_TYPE} device, got {dev}")
    index = 0 if dev.index is None else dev.index
    _C.check_device_index(index)
    return index


def memory_stats(device=None) -> dict:
    """Allocator counters: allocated/reserved bytes (current and peak), allocations, cache
    hits, and blocks obtained from and returned to the OS."""
    _index_of(device)
    return _C.allocator_stats()


def memory_allocated(device=None) -> int:
    """Bytes held by live device tensors (block capacities: requests rounded up to 512 B
    below 1 MiB, to 64 KiB above)."""
    return memory_stats(device)["allocated_bytes"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["peak_allocated_bytes"]


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the OS: live blocks plus cached free ones."""
    return memory_stats(device)["reserved_bytes"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["peak_reserved_bytes"]


def reset_peak_memory_stats(device=None) -> None:
    _index_of(device)
    _C.reset_peak_memory_stats()


def empty_cache() -> None:
    """Returns cached free blocks to the OS. Live tensors are unaffected."""
    _C.empty_cache()


def metrics() -> dict:
    """Counters of the device runtime.

    ``launches``: ops run by kind (``compiled``, ``library``, ``fallback``);
    ``ops``: per kind, counts per op (e.g. ``metrics()["ops"]["fallback"]["aten::add.Tensor"]``);
    ``products_split``: matrix products run over the device's threads instead of OpenBLAS's own
    (at 2+ threads, outside autograd's recording): each mm or addmm call split, each bmm batch
    shared out, and each bmm matrix left over from the shares split on its own;
    ``allocator``: as :func:`memory_stats`;
    ``warm_start``: what this process's warm start found and made ready (docs/warm-start.md).
    Raises the cache warnings that background work queued.
    """
    _emit_cache_warnings()
    return _C.metrics()


def reset_metrics() -> None:
    _C.reset_metrics()


def set_adaptive(enabled: bool) -> None:
    """Turns adaptive eager mode (the op-window tracer) on or off for the whole process, as
    ``NEURON_ADAPTIVE_EAGER`` does at import. Turning it off is a sync point."""
    if not isinstance(enabled, bool):
        raise TypeError(f"[adaptive] set_adaptive expects a bool, got {type(enabled).__name__}")
    _C.set_adaptive(enabled)


def adaptive_enabled() -> bool:
    return _C.adaptive_enabled()


@contextlib.contextmanager
def adaptive(enabled: bool = True):
    """``with torchneuron.adaptive():`` runs the block in adaptive eager mode (or, with
    ``enabled=False``, eagerly) and restores the previous mode after it."""
    previous = adaptive_enabled()
    set_adaptive(enabled)
    try:
        yield
    finally:
        set_adaptive(previous)


def set_adaptive_debug(enabled: bool) -> None:
    """Turns the tracer's debug check on or off, as ``NEURON_ADAPTIVE_DEBUG`` does at import: each
    recorded op remembers its Python file and line (named by errors of its window), and each batch
    of recorded steps also runs eagerly on ATen's CPU kernels, a warning naming the op and its line
    for every result that differs (``metrics()["adaptive"]["debug_mismatches"]``). Slow: for
    finding a wrong result, not for production. Changing it is a sync point."""
    if not isinstance(enabled, bool):
        raise TypeError(
            f"[adaptive] set_adaptive_debug expects a bool, got {type(enabled).__name__}")
    _C.set_adaptive_debug(enabled)


def set_adaptive_fusion(enabled: bool, wait_for_compiles: bool = None) -> None:
    """Whether hot windows run fused kernels (``NEURON_ADAPTIVE_FUSION``, on by default) and
    whether a window waits for its fused kernels' compiles instead of running op by op until they
    are ready (``NEURON_ADAPTIVE_SYNC``; for tests and reproducible timing; None keeps the current
    choice). Changing them is a sync point."""
    for name, value in (("enabled", enabled), ("wait_for_compiles", wait_for_compiles)):
        if value is None and name == "wait_for_compiles":
            continue
        if not isinstance(value, bool):
            raise TypeError(
                f"[adaptive] set_adaptive_fusion expects a bool {name}, got {type(value).__name__}")
    _C.set_adaptive_fusion(enabled, wait_for_compiles)


def set_adaptive_min_bytes(bytes: int) -> None:
    """The size above which the tracer defers a compiled call (``NEURON_ADAPTIVE_MIN_BYTES``,
    32 KiB by default): a call whose tensors all hold at most this many bytes runs eagerly, where
    the eager call cache replays it for less than recording costs. 0 defers every call the tracer
    can (the tests and the adaptive referee use it to exercise recording on small tensors).
    Changing it is a sync point; hot windows stay hot."""
    if isinstance(bytes, bool) or not isinstance(bytes, int):
        raise TypeError(
            f"[adaptive] set_adaptive_min_bytes expects an int, got {type(bytes).__name__}")
    _C.set_adaptive_min_bytes(bytes)


def set_adaptive_unbacked(enabled: bool) -> None:
    """Whether results of hot windows that run fused get memory only when something reads them
    (``NEURON_ADAPTIVE_UNBACKED``, on by default): an intermediate nothing outside the window
    holds is then never allocated. Until its window runs, such a result's ``data_ptr()`` is an
    address with no memory behind it (every access through PyTorch or torchneuron runs the window
    first); turn this off for code that hands pending tensors' raw pointers to C.
    Changing it is a sync point."""
    if not isinstance(enabled, bool):
        raise TypeError(
            f"[adaptive] set_adaptive_unbacked expects a bool, got {type(enabled).__name__}")
    _C.set_adaptive_unbacked(enabled)


def adaptive_unbacked() -> bool:
    """Whether unbacked results are on (``set_adaptive_unbacked``)."""
    return _C.adaptive_unbacked()


def set_list_launches(enabled: bool) -> None:
    """Whether an eager ``_foreach_*`` call on device tensors runs its element ops' compiled kernel
    as one launch over the lists (``NEURON_LIST_LAUNCHES``, on by default) or, off, as one
    library launch of ATen's CPU kernel over host views of the lists."""
    if not isinstance(enabled, bool):
        raise TypeError(
            f"[list launch] set_list_launches expects a bool, got {type(enabled).__name__}")
    _C.set_list_launches(enabled)


def list_launches_enabled() -> bool:
    """Whether eager ``_foreach_*`` calls run as list launches (``set_list_launches``)."""
    return _C.list_launches_enabled()


def set_fused_lstm(enabled: bool) -> None:
    """Whether an LSTM layer's direction on the device runs as one autograd node with fused cell
    kernels (``NEURON_FUSED_LSTM``, on by default) or, off, op by op as ATen's CPU cell (which
    also differentiates twice)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"[lstm] set_fused_lstm expects a bool, got {type(enabled).__name__}")
    _C.set_fused_lstm(enabled)


def fused_lstm_enabled() -> bool:
    """Whether LSTM layers run with fused cells (``set_fused_lstm``)."""
    return _C.fused_lstm_enabled()


def adaptive_min_bytes() -> int:
    """The current ``set_adaptive_min_bytes`` value."""
    return _C.adaptive_min_bytes()


def wait_for_fused_compiles() -> None:
    """Returns once no fused kernel is queued or compiling in the background."""
    _C.wait_for_fused_compiles()


def wait_for_compiles() -> None:
    """Returns once no kernel is compiling in the background: neither an op's own kernel (whose
    calls run on the CPU meanwhile, as ``interim`` launches; ``NEURON_INTERIM_LAUNCHES``) nor a
    hot window's fused kernel. Then every op runs its compiled kernel (benchmarks call it after
    their warm-up)."""
    _C.wait_for_background_compiles()
    _C.wait_for_fused_compiles()


def openmp_wait_rule() -> str:
    """How long PyTorch's idle OpenMP workers spin in this process (``NEURON_OPENMP_WAIT``,
    applied at import): ``short-spin`` (the device parked an idle team so they spin briefly),
    ``passive`` (``OMP_WAIT_POLICY=passive``), ``user-set`` (``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` set otherwise), ``unchanged`` (``NEURON_OPENMP_WAIT=unchanged``),
    ``one-cpu``, ``other-runtime`` (not exactly one libgomp loaded) or ``partial-team`` (libgomp
    gave the parked team fewer threads than asked). docs/architecture.md, "Parallelism"."""
    return _C.apply_openmp_wait_rule()


def explain(windows: int = 10) -> str:
    """What the adaptive tracer saw: the most frequent windows, what ended each (the sync point
    and the op), whether it is hot, and which recording sites were pinned to op-by-op."""
    return _C.explain(windows)


_storage_compat.install()
_dataloader_workers.install()  # device tensors in DataLoader workers: a clear error
_autocast.install()  # torch.autocast("privateuseone"): warns once, changes nothing
_legacy_new.install()  # Tensor.new(...) of device tensors, as on the CPU
_C.apply_openmp_wait_rule()  # PyTorch's idle OpenMP workers spin briefly (NEURON_OPENMP_WAIT)
_backward_engine.install()  # backward passes on the calling thread (NEURON_BACKWARD_ON_CALLER)

if os.environ.get("NEURON_ADAPTIVE_EXPLAIN", "").lower() in ("1", "true", "yes", "on"):
    atexit.register(lambda: print(explain(), file=sys.stderr))

"""PyTorch's OpInfo database and the dtypes the referee runs, loaded the way the harness needs it.
torch is imported where it is used: the referee's parent process (run_conformance.py) checks
dtype names here without it."""
import sys

# The dtypes every OpInfo is refereed in (those of them it supports on the CPU), in this order.
# Complex dtypes are not among them: the op registry has no complex kernels (isKernelDtype in
# src/fusion/element_type.cpp), so complex tensors only ever run on the CPU fallback, and
# `--dtypes complex64,complex128` adds them when wanted.
DEFAULT_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                  "uint8", "bool")
KNOWN_DTYPES = DEFAULT_DTYPES + ("complex64", "complex128")


def check_dtype_name(name):
    """A clear error for a name that is not one of KNOWN_DTYPES."""
    if name not in KNOWN_DTYPES:
        raise ValueError(f"[conformance] unknown dtype {name!r}; known: {', '.join(KNOWN_DTYPES)}")


def dtype_named(name):
    """torch.float32 for "float32"; a clear error for anything else."""
    import torch

    check_dtype_name(name)
    return getattr(torch, name)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def load_op_db():
    """op_db from PyTorch 1.13's testing internals. They parse sys.argv at import time, so
    the harness's own arguments are hidden from them; `expecttest` comes from compat/."""
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    finally:
        sys.argv = saved
    return op_db


def opinfo_name(op):
    """A unique name: OpInfo name plus its variant, e.g. `nn.functional.gelu` or `max.reduction_with_dim`."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def opinfo_dtypes(op, dtypes):
    """The names of `dtypes` (names) this OpInfo supports on the CPU, in the order given."""
    return [name for name in dtypes if op.supports_dtype(dtype_named(name), "cpu")]


def opinfos_by_name():
    return {opinfo_name(op): op for op in load_op_db()}

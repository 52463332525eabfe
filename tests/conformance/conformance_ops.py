"""PyTorch's OpInfo database, loaded the way the conformance harness needs it."""
import sys

import torch


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


def float32_opinfos():
    return [op for op in load_op_db() if op.supports_dtype(torch.float32, "cpu")]


def float32_opinfo_names():
    return [opinfo_name(op) for op in float32_opinfos()]

"""``python3 -m torchneuron.run``: torchrun, with the same arguments, that starts on Debian 12.

Debian 12's ``torchrun`` (PyTorch 1.13 on Python 3.11) fails before it starts a worker with
``AttributeError: 'NoneType' object has no attribute 'get'`` in ``to_map``: it parses
``--redirects`` and ``--tee`` (default ``"0"``) by iterating the ``Std`` flag, and Python 3.11 no
longer yields the zero-valued ``Std.NONE`` when iterating a flag, so ``"0"`` becomes ``None``.
This launcher parses those two options correctly and then runs PyTorch's own torchrun
(``torch.distributed.run``) unchanged: ``--nproc_per_node``, ``--nnodes``, ``--node_rank``,
``--rdzv_backend``, ``--rdzv_endpoint``, ``--standalone``, ``--max_restarts`` and the rest.
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api as _multiprocessing_api


def _std_from_str(vm: str):
    """``Std.from_str`` as PyTorch documents it: "0" -> Std.NONE, "1" -> Std.OUT,
    "0:3,1:0" -> {0: Std.ALL, 1: Std.NONE}."""
    Std = _multiprocessing_api.Std
    if re.match(_multiprocessing_api._VALUE_REGEX, vm):
        return Std(int(vm))
    if re.match(_multiprocessing_api._MAPPING_REGEX, vm):
        return {int(i): Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(
        f"{vm} does not match: <{_multiprocessing_api._VALUE_REGEX}> or "
        f"<{_multiprocessing_api._MAPPING_REGEX}>")


def _fix_std_parsing() -> None:
    Std = _multiprocessing_api.Std
    if Std.from_str("0") is None:  # only where the interpreter breaks PyTorch's parser
        Std.from_str = staticmethod(_std_from_str)


def main(args=None) -> None:
    _fix_std_parsing()
    from torch.distributed import run as torchrun

    torchrun.main(args)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Runs under an address-space limit (RLIMIT_AS, set by test_memory_limit.py): fills the address
space until an allocation fails, then runs ops whose kernels are not compiled yet, with the
memory still taken and after giving it back. Prints one JSON line; any exit but 0 is a failure
of the test (an abort is 134)."""

import json
import sys

import torch
import torchneuron

DEV = torchneuron.device()


def fill_until_failure(chunk_bytes):
    hog = []
    while True:
        try:
            hog.append(torch.empty(chunk_bytes // 4, dtype=torch.float32, device=DEV))
        except (MemoryError, RuntimeError):
            return hog


def new_kernel_ops(round_number):
    """Ops with signatures no earlier op had: each needs a kernel (store, compile, link)."""
    outcomes = []
    for rank in range(1, 4):
        for op in (torch.atan2, torch.hypot, torch.maximum):
            shape = [5] * rank
            a = torch.rand(shape, dtype=torch.float64 if round_number else torch.float32)
            b = torch.rand(shape, dtype=a.dtype) + 1
            try:
                got = op(a.to(DEV)[..., ::2], b.to(DEV)[..., ::2]).cpu()
                correct = torch.allclose(got, op(a[..., ::2], b[..., ::2]))
                outcomes.append("correct" if correct else "WRONG")
            except (MemoryError, RuntimeError) as error:
                outcomes.append("error: " + str(error).splitlines()[0][:200])
    return outcomes


def main():
    (torch.ones(4, device=DEV) + 1).cpu()  # the compiler and the store are in use
    hog = fill_until_failure(int(sys.argv[1]))
    filled = len(hog)
    starved = new_kernel_ops(0)
    del hog[len(hog) // 2:]
    torchneuron.empty_cache()  # half the address space back to the OS
    compiles = torchneuron.metrics()["compiles"]
    relieved = new_kernel_ops(1)
    print(json.dumps({"chunks": filled, "starved": starved, "relieved": relieved,
                      "relieved_compiles": torchneuron.metrics()["compiles"] - compiles}))


if __name__ == "__main__":
    main()

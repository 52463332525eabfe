#!/usr/bin/env python3
"""Multi-tensor (_foreach_*) ops in eager mode, the device against stock CPU in one process. On
the device a list call's element ops launch their compiled kernel as one table launch
(src/device/list_launch.h; `device`), or, with torchneuron.set_list_launches(False), ATen's CPU
kernel runs over host views of the lists as one library launch (`library`, what list calls did
before); stock runs ATen's CPU loop over the lists, one element op at a time. Three lists: many
small tensors (an optimizer's biases and norms), small and medium ones mixed, and large ones
(bandwidth). Blocks alternate the three so that the machine's noise falls on all alike; each
starts after a pause, with one untimed call. Prints one
JSON object: medians over the rounds of the time per call in microseconds, and stock's time over
each device path's (above 1: the device is faster).

    /usr/bin/python3 bench/list_launches.py [--threads 1] [--rounds 9]
"""
import json
import os
import statistics
import sys

import torch
# The device's side times its kernels: an op's first call waits for its compile.
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402
from alternating import per_call_us, threads_and_rounds  # noqa: E402

LISTS = {
    "200x1K": [1000] * 200,
    "50x256+50x64K": [256] * 50 + [65536] * 50,
    "40x500K": [500_000] * 40,
}
# In-place updates, as optimizers make them: repeated calls keep the values bounded.
OPS = {
    "_foreach_add_.List": lambda p, g: torch._foreach_add_(p, g, alpha=1e-3),
    "_foreach_mul_.Scalar": lambda p, g: torch._foreach_mul_(p, 0.9999),
    "_foreach_addcmul_.Scalar": lambda p, g: torch._foreach_addcmul_(p, g, g, 1e-3),
}


def main(argv):
    args = threads_and_rounds(__doc__, argv)
    torchneuron.set_adaptive(False)
    torch.manual_seed(0)
    device = torchneuron.device()
    results = {}
    for list_name, sizes in LISTS.items():
        cpu = ([torch.rand(n) for n in sizes], [torch.rand(n) for n in sizes])
        on_device = tuple([t.to(device) for t in ts] for ts in cpu)
        calls = max(10, (1 << 26) // sum(sizes))
        for op_name, op in OPS.items():
            op(*on_device)  # compiles the element op's kernel
            op(*cpu)
            times = {"stock": [], "device": [], "library": []}
            for _ in range(args.rounds):
                times["stock"].append(per_call_us(op, cpu, calls, lambda: None))
                for path, list_launches in (("device", True), ("library", False)):
                    torchneuron.set_list_launches(list_launches)
                    times[path].append(
                        per_call_us(op, on_device, calls, torchneuron.synchronize))
            torchneuron.set_list_launches(True)
            medians = {path: statistics.median(t) for path, t in times.items()}
            results[f"{op_name} {list_name}"] = {
                **{f"{path}_us": round(us, 1) for path, us in medians.items()},
                "speedup": round(medians["stock"] / medians["device"], 3),
                "library_speedup": round(medians["stock"] / medians["library"], 3)}
    print(json.dumps({"threads": args.threads, "rounds": args.rounds, "results": results},
                     indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])

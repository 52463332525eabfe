#!/usr/bin/env python3
"""torchneuron demo: an unchanged eager training loop on the neuron device, next to the same
loop on stock CPU PyTorch in the same process.

Prints the loss curves (they must agree), the median time per step on each device, how the
device ran its ops (compiled kernels, library kernels, CPU fallback) and what the caching
allocator did.   Run: make demo   (or /usr/bin/python3 demo/train.py --steps 30)
"""
import argparse
import statistics
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchneuron


class SmallConvNet(nn.Module):
    """A compact image classifier: conv, batch norm, layer norm, dropout, two linears."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.norm = nn.LayerNorm(128)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.gelu(self.norm(self.fc1(x.flatten(1)))))
        return self.fc2(x)


def train(device, steps, batch):
    torch.manual_seed(0)
    model = SmallConvNet().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    data = torch.Generator().manual_seed(1)
    images = torch.randn(batch, 3, 32, 32, generator=data)
    labels = torch.randint(0, 10, (batch,), generator=data)
    losses, times = [], []
    torch.manual_seed(2)
    for _ in range(steps):
        start = time.perf_counter()
        x, y = images.to(device), labels.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # a sync point: the step is complete
        times.append(time.perf_counter() - start)
        if len(times) == 1 and device.type == torchneuron.DEVICE_TYPE:
            # On a cold cache the first step ran its ops on the CPU while their kernels compiled
            # in the background; the steady state starts once they are ready (a long run gets
            # there within its first seconds). Not timed.
            torchneuron.wait_for_compiles()
    return losses, times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    dev = torchneuron.device()
    print(f"torchneuron demo: SmallConvNet + AdamW, batch {args.batch}, {args.steps} steps, "
          f"{torch.get_num_threads()} thread(s), device {dev}")
    torchneuron.reset_metrics()
    with warnings.catch_warnings(record=True) as fallback_warnings:
        warnings.simplefilter("always")
        device_losses, device_times = train(dev, args.steps, args.batch)
    metrics = torchneuron.metrics()
    cpu_losses, cpu_times = train(torch.device("cpu"), args.steps, args.batch)
    # The same training on the device in adaptive mode (NEURON_ADAPTIVE_EAGER=1 does this for a
    # whole script): recurring op windows are recorded and replayed (docs/adaptive-eager.md).
    adaptive_before = torchneuron.adaptive_enabled()
    torchneuron.reset_metrics()
    with warnings.catch_warnings(record=True), torchneuron.adaptive():
        warnings.simplefilter("always")
        adaptive_losses, adaptive_times = train(dev, args.steps, args.batch)
    adaptive = torchneuron.metrics()["adaptive"]

    print("\nloss curve (every 5th step)   device      cpu")
    for step in range(0, args.steps, 5):
        print(f"  step {step:3d}                   {device_losses[step]:.5f}   {cpu_losses[step]:.5f}")
    worst = max(abs(a - b) for a, b in zip(device_losses, cpu_losses))
    agree = worst < 1e-3
    print(f"  largest difference: {worst:.2e} ({'curves agree' if agree else 'CURVES DIFFER'})")

    # The first step includes one-time work on both sides; report the steady state.
    steady = slice(1, None) if args.steps > 1 else slice(None)
    dev_ms = statistics.median(device_times[steady]) * 1e3
    cpu_ms = statistics.median(cpu_times[steady]) * 1e3
    print(f"\ntime per step (median of steps 2..{args.steps}):")
    print(f"  neuron device {dev_ms:8.2f} ms")
    print(f"  stock CPU     {cpu_ms:8.2f} ms")
    print(f"  device / CPU  {dev_ms / cpu_ms:8.2f}x  (>1 means the device is slower)")
    print(f"  first step: device {device_times[0] * 1e3:.0f} ms, CPU {cpu_times[0] * 1e3:.0f} ms "
          f"({metrics['launches']['interim']} op calls ran on the CPU while their kernels compiled "
          f"in the background; a rerun loads them from the cache)")
    adaptive_ms = statistics.median(adaptive_times[steady]) * 1e3
    adaptive_worst = max(abs(a - b) for a, b in zip(adaptive_losses, cpu_losses))
    print(f"  adaptive mode {adaptive_ms:8.2f} ms  ({adaptive_ms / cpu_ms:.2f}x the CPU's time, "
          f"{adaptive_ms / dev_ms:.2f}x eager's; loss within {adaptive_worst:.1e} of the CPU's)")
    print(f"  adaptive tracer: {adaptive['windows']} windows, {adaptive['replays']} replayed whole, "
          f"{adaptive['ops_deferred']} of {adaptive['ops_traced']} ops recorded and run at sync "
          f"points; {adaptive['fused_kernel_runs']} fused kernel runs, "
          f"{adaptive['launches_saved']} recorded launches saved")
    if adaptive_before:
        print("  (NEURON_ADAPTIVE_EAGER is set: the device pass above ran in adaptive mode too)")
    agree = agree and adaptive_worst < 1e-3

    launches = metrics["launches"]
    total = sum(launches.values())
    print(f"\nops the device ran: {total} launches")
    for kind in ("compiled", "library", "interim", "fallback"):
        ops = metrics["ops"][kind]
        print(f"  {kind:9s} {launches[kind]:6d} launches, {len(ops):3d} distinct ops")
    top = sorted(metrics["ops"]["fallback"].items(), key=lambda kv: -kv[1])[:8]
    if top:
        print("  most frequent CPU fallbacks: " + ", ".join(f"{n} x{c}" for n, c in top))
    print(f"  fallback warnings shown: {sum('[fallback]' in str(w.message) for w in fallback_warnings)}"
          " (once per op name)")

    alloc = metrics["allocator"]
    print(f"\ncaching allocator: {alloc['allocations']} allocations, {alloc['cache_hits']} served "
          f"from cache ({100.0 * alloc['cache_hits'] / max(1, alloc['allocations']):.1f}%), "
          f"{alloc['system_allocations']} from the OS; peak {alloc['peak_allocated_bytes'] / 2**20:.1f} MiB "
          f"allocated, {alloc['reserved_bytes'] / 2**20:.1f} MiB reserved")
    print(f"\ncompiler: {metrics['compiles']} kernels compiled in this run "
          f"(median {metrics['compile_ms_median']:.1f} ms each, {metrics['compile_ms_total']:.0f} ms "
          f"in all), {metrics['persistent_hits']} loaded from the persistent cache of earlier runs "
          f"(NEURON_CACHE_DIR), {metrics['kernel_cache_hits']} launches served from the kernel cache")
    warm = metrics["warm_start"]
    if warm["profile_found"]:
        print(f"warm start: this script's previous run left a profile; {warm['kernels_prefetched']} "
              f"kernels were linked and {warm['bytes_prefaulted'] / 2**20:.0f} MiB faulted in by a "
              f"background thread during start-up ({warm['background_ms']:.0f} ms)")
    else:
        print("warm start: no profile of an earlier run of this script yet; this run leaves one, so "
              "the next starts with its kernels linked and its memory faulted in")
    print("\nElementwise ops, reductions, softmax, layer norm, batch norm, max pooling and "
          "copies run as compiled MLIR/LLVM kernels; matmul, convolution, pooling's backward and "
          "the loss as library kernels (OpenBLAS/oneDNN/ATen's CPU kernels on device memory). "
          "`make bench` measures each workload against stock PyTorch.")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())

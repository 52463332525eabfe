"""One rank of the 2-rank job that tests/distributed/test_distributed.py checks: the neuron
backend's collectives against gloo on CPU tensors, DDP training against a single process on the
concatenated batch, no_sync, find_unused_parameters, batch-norm buffers, a rank-0 checkpoint, the
errors of a mismatched or mixed collective, and a killed rank (rank 1 kills itself at the end).

    ddp_job.py RANK STORE_FILE OUT_DIR TIMEOUT_S

Each rank writes OUT_DIR/rank<RANK>.json as it goes (rewritten after every phase), so a rank that
fails leaves what it had done.
"""

import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torchneuron

RANK, STORE, OUT, TIMEOUT_S = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
WORLD = 2
STEPS = 20
LOCAL_BATCH = 4
DEV = torchneuron.device()
report = {"rank": RANK}


def save():
    path = os.path.join(OUT, f"rank{RANK}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(path + ".tmp", path)


def mlp():
    # 1.08 MB of parameters: more than DDP's first bucket (1 MB), so there are several.
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 256), torch.nn.Tanh(),
                               torch.nn.Linear(256, 1024), torch.nn.Tanh(),
                               torch.nn.Linear(1024, 4))


TARGET_MAP = torch.randn(8, 4, generator=torch.Generator().manual_seed(99)) / 3


def global_batch(step):
    """Batch `step` of the job (both ranks' halves): a learnable regression."""
    x = torch.randn(WORLD * LOCAL_BATCH, 8, generator=torch.Generator().manual_seed(100 + step))
    return x, x @ TARGET_MAP


def local(t):
    return t[RANK * LOCAL_BATCH:(RANK + 1) * LOCAL_BATCH].to(DEV)


def flat_weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def ddp_training():
    """20 SGD steps of DDP with small buckets, then (rank 0) the same 20 steps in one process on
    the concatenated batches."""
    model = mlp().to(DEV)
    ddp = DDP(model, bucket_cap_mb=0.0005)  # ~500 bytes after the first 1 MB bucket
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        x, y = global_batch(step)
        loss = F.mse_loss(ddp(local(x)), local(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        both = [torch.empty(1, device=DEV) for _ in range(WORLD)]
        dist.all_gather(both, loss.detach().reshape(1))
        losses.append(sum(t.item() for t in both) / WORLD)  # the loss of the global batch
    report["ddp_bucket_sizes"] = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
    report["ddp_losses"] = losses
    mine = flat_weights(model)
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    report["ddp_replicas_identical"] = torch.equal(mine.cpu(), rank0.cpu())
    metrics = torchneuron.metrics()
    report["compiles"] = metrics["compiles"]
    report["persistent_hits"] = metrics["persistent_hits"]
    save()
    if RANK == 0:
        single = mlp().to(DEV)
        opt = torch.optim.SGD(single.parameters(), lr=0.1)
        ref_losses = []
        for step in range(STEPS):
            x, y = global_batch(step)
            loss = F.mse_loss(single(x.to(DEV)), y.to(DEV))
            opt.zero_grad()
            loss.backward()
            opt.step()
            ref_losses.append(loss.item())
        report["single_losses"] = ref_losses
        report["ddp_vs_single_max_weight_diff"] = (mine - flat_weights(single)).abs().max().item()
    dist.barrier()


def collectives_against_gloo():
    """Every op on device tensors through "neuron" and on CPU tensors through gloo: equal."""
    gloo = dist.new_group(backend="gloo")
    results = {}

    def data(dtype):
        g = torch.Generator().manual_seed(7 + RANK)
        if dtype.is_floating_point:
            return torch.randn(1000, generator=g).to(dtype)
        return torch.randint(-5, 6, (1000,), generator=g).to(dtype)

    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "product": dist.ReduceOp.PRODUCT}
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32):
        for name, op in ops.items():
            on_device, on_cpu = data(dtype).to(DEV), data(dtype)
            dist.all_reduce(on_device, op=op)
            dist.all_reduce(on_cpu, op=op, group=gloo)
            results[f"all_reduce.{name}.{dtype}"] = torch.equal(on_device.cpu(), on_cpu)
    for name, op in {"band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
                     "bxor": dist.ReduceOp.BXOR}.items():
        on_device, on_cpu = data(torch.int64).to(DEV), data(torch.int64)
        dist.all_reduce(on_device, op=op)
        dist.all_reduce(on_cpu, op=op, group=gloo)
        results[f"all_reduce.{name}"] = torch.equal(on_device.cpu(), on_cpu)
    # AVG, which gloo refuses: against gloo's sum divided by the group size.
    on_device, on_cpu = data(torch.float32).to(DEV), data(torch.float32)
    work = dist.all_reduce(on_device, op=dist.ReduceOp.AVG, async_op=True)
    future_value = work.get_future().wait()[0]
    work.wait()
    dist.all_reduce(on_cpu, group=gloo)
    results["all_reduce.avg"] = torch.equal(on_device.cpu(), on_cpu / WORLD)
    results["future_hands_back_the_device_tensor"] = (
        future_value.device == DEV and future_value.data_ptr() == on_device.data_ptr())

    on_device, on_cpu = data(torch.float32).to(DEV), data(torch.float32)
    dist.broadcast(on_device, src=1)
    dist.broadcast(on_cpu, src=1, group=gloo)
    results["broadcast"] = torch.equal(on_device.cpu(), on_cpu)

    outs_device = [torch.empty(1000, device=DEV) for _ in range(WORLD)]
    outs_cpu = [torch.empty(1000) for _ in range(WORLD)]
    dist.all_gather(outs_device, data(torch.float32).to(DEV))
    dist.all_gather(outs_cpu, data(torch.float32), group=gloo)
    results["all_gather"] = all(torch.equal(d.cpu(), c) for d, c in zip(outs_device, outs_cpu))

    on_device, on_cpu = data(torch.float32).to(DEV), data(torch.float32)
    dist.reduce(on_device, dst=1, op=dist.ReduceOp.MAX)
    dist.reduce(on_cpu, dst=1, op=dist.ReduceOp.MAX, group=gloo)
    results["reduce"] = RANK != 1 or torch.equal(on_device.cpu(), on_cpu)

    slots_device = [torch.empty(1000, device=DEV) for _ in range(WORLD)] if RANK == 0 else None
    slots_cpu = [torch.empty(1000) for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(data(torch.float32).to(DEV), slots_device, dst=0)
    dist.gather(data(torch.float32), slots_cpu, dst=0, group=gloo)
    results["gather"] = RANK != 0 or all(
        torch.equal(d.cpu(), c) for d, c in zip(slots_device, slots_cpu))

    pieces = [torch.full((10,), float(r)) for r in range(WORLD)]
    got_device, got_cpu = torch.empty(10, device=DEV), torch.empty(10)
    dist.scatter(got_device, [p.to(DEV) for p in pieces] if RANK == 1 else None, src=1)
    dist.scatter(got_cpu, pieces if RANK == 1 else None, src=1, group=gloo)
    results["scatter"] = torch.equal(got_device.cpu(), got_cpu)

    # send/recv both ways, the device receive posted before the other rank sends (irecv).
    peer = 1 - RANK
    inbox = torch.empty(1000, device=DEV)
    pending = dist.irecv(inbox, src=peer)
    dist.send(data(torch.float32).to(DEV), dst=peer)
    pending.wait()
    g = torch.Generator().manual_seed(7 + peer)
    results["send_recv"] = torch.equal(inbox.cpu(), torch.randn(1000, generator=g))
    # A receive from any source learns the sender.
    if RANK == 0:
        dist.send(torch.full((3,), 5.0, device=DEV), dst=1)
        results["recv_any_source"] = True
    else:
        anywhere = torch.empty(3, device=DEV)
        sender = dist.recv(anywhere)
        results["recv_any_source"] = sender == 0 and anywhere.cpu().tolist() == [5.0] * 3

    dist.barrier()
    report["collectives"] = results
    save()


def no_sync_accumulation():
    """Two micro-batches per rank, the first under no_sync(): the gradients after the second
    backward equal one process's accumulated gradients over all four micro-batches."""
    model = mlp().to(DEV)
    ddp = DDP(model)
    batches = [global_batch(50), global_batch(51)]
    with ddp.no_sync():
        F.mse_loss(ddp(local(batches[0][0])), local(batches[0][1])).backward()
    # Under no_sync the gradients stay local: the two ranks' differ.
    for p in model.parameters():
        both = [torch.empty_like(p.grad) for _ in range(WORLD)]
        dist.all_gather(both, p.grad)
        report.setdefault("no_sync_local_grads_differ", []).append(
            not torch.equal(both[0].cpu(), both[1].cpu()))
    F.mse_loss(ddp(local(batches[1][0])), local(batches[1][1])).backward()
    single = mlp().to(DEV)
    for x, y in batches:
        for r in range(WORLD):
            part = slice(r * LOCAL_BATCH, (r + 1) * LOCAL_BATCH)
            (F.mse_loss(single(x[part].to(DEV)), y[part].to(DEV)) / WORLD).backward()
    report["no_sync_max_grad_diff"] = max(
        (a.grad.cpu() - b.grad.cpu()).abs().max().item()
        for a, b in zip(model.parameters(), single.parameters()))
    save()


class Branchy(torch.nn.Module):
    """`unused` takes no part in forward: DDP must be told (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.used = torch.nn.Linear(8, 4)
        self.unused = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.used(x)


def unused_parameters():
    model = Branchy().to(DEV)
    before = model.unused.weight.detach().cpu().clone()
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        x, y = global_batch(step)
        loss = F.mse_loss(ddp(local(x)), local(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    report["unused_parameter_unchanged"] = torch.equal(model.unused.weight.cpu(), before)
    report["unused_used_weights"] = model.used.weight.detach().cpu().flatten().tolist()
    save()


def batch_norm_buffers_and_checkpoint(checkpoint):
    """Ranks train on different data, so their running statistics differ; DDP broadcasts rank
    0's buffers at every forward. Then rank 0 saves a checkpoint that rank 1 loads."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(DEV)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        x, y = global_batch(step)
        loss = F.mse_loss(ddp(local(x)), local(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    bn = model[1]
    report["bn_mean_after_training"] = bn.running_mean.cpu().tolist()
    ddp.eval()
    with torch.no_grad():
        ddp(local(global_batch(9)[0]))  # eval: no update, but the forward broadcasts rank 0's
    report["bn_mean_after_eval_forward"] = bn.running_mean.cpu().tolist()
    if RANK == 0:
        torch.save(ddp.module.state_dict(), checkpoint)
    dist.barrier()
    restored = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                   torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(DEV)
    restored.load_state_dict(torch.load(checkpoint, map_location=DEV))
    restored.eval()
    x = global_batch(10)[0].to(DEV)
    with torch.no_grad():
        report["checkpoint_matches"] = torch.equal(restored(x).cpu(), ddp(x).cpu())
    report["checkpoint_on_device"] = all(
        t.device == DEV for t in restored.state_dict().values())
    save()


def errors():
    """A mismatched collective and a collective mixing the device and the CPU."""
    try:
        dist.all_reduce(torch.ones(3 + RANK, device=DEV))
        report["mismatch_error"] = None
    except RuntimeError as e:
        report["mismatch_error"] = str(e)
    try:
        outs = [torch.empty(2, device=DEV), torch.empty(2)]
        dist.all_gather(outs, torch.ones(2, device=DEV))
        report["mixed_error"] = None
    except RuntimeError as e:
        report["mixed_error"] = str(e)
    t = torch.ones(2, device=DEV)
    dist.all_reduce(t)  # both ranks still agree after the errors
    report["after_errors"] = t.cpu().tolist()
    save()


def killed_rank():
    """Rank 1 dies (SIGKILL) after a barrier; rank 0's next collective must fail, clearly."""
    dist.barrier()
    if RANK == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # rank 1 is gone by now (or going)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device=DEV))
        report["killed_rank_error"] = None
    except RuntimeError as e:
        report["killed_rank_error"] = str(e)
    report["killed_rank_seconds"] = time.monotonic() - start
    save()


def main():
    dist.init_process_group("neuron", init_method="file://" + STORE, rank=RANK, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    report["backend"] = dist.get_backend()
    ddp_training()
    collectives_against_gloo()
    no_sync_accumulation()
    unused_parameters()
    batch_norm_buffers_and_checkpoint(os.path.join(OUT, "checkpoint.pt"))
    errors()
    killed_rank()
    report["done"] = True
    save()


main()

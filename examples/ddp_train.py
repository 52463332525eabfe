"""DistributedDataParallel training on the neuron device: a plain DDP script whose only
device-specific lines are `import torchneuron`, the "neuron" backend and `torchneuron.device()`.

One machine, two processes:
    python3 -m torchneuron.run --nproc_per_node=2 examples/ddp_train.py
Two machines (run on each; NODE_RANK 0 on the machine that hosts the rendezvous at HOST:PORT):
    python3 -m torchneuron.run --nnodes=2 --node_rank=NODE_RANK --nproc_per_node=1 \\
        --rdzv_endpoint=HOST:PORT examples/ddp_train.py

`python3 -m torchneuron.run` takes torchrun's arguments; Debian 12's own `torchrun` needs
`--redirects 1 --tee 1` to start (README, "Distributed training").
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import torchneuron


def synthetic_regression(samples=512, features=16):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, features, generator=g)
    y = x @ torch.randn(features, 1, generator=g) + 0.1 * torch.randn(samples, 1, generator=g)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--checkpoint", help="rank 0 saves the model's state_dict here")
    args = parser.parse_args()

    dist.init_process_group(backend="neuron")  # torchrun's env:// rendezvous
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torchneuron.device()

    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    ddp = DDP(model)  # device_ids stays None on this device (docs/distributed.md)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

    data = synthetic_regression()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.mse_loss(ddp(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.6f}", flush=True)

    if rank == 0 and args.checkpoint:
        torch.save(model.state_dict(), args.checkpoint)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank} of {world}: weights checksum {checksum:.10f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

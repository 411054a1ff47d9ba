"""Sharded data-parallel training with FSDP2 (`fully_shard`), as a user would
write it: each rank keeps only its shard of the parameters, gradients and
Adam's state, and gathers a layer's parameters while it runs. One process per
rank (torchrun starts them), gloo on the CPU or nccl on GPUs, a batch size
per rank from the command line, random images made on the fly:

    torchrun --standalone --nproc-per-node 2 examples/fsdp_train.py --batch-size 32
    vramprobe sweep --world-sizes 1,2 -- torchrun --standalone --nproc-per-node {nproc} examples/fsdp_train.py --batch-size {batch}

Needs torch >= 2.6 for `torch.distributed.fsdp.fully_shard`.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.distributed.fsdp import fully_shard


class RandomImages(torch.utils.data.Dataset):
    """Stands in for a real image data set: a fresh random image per index."""

    def __init__(self, n, classes, size):
        self.n, self.classes, self.size = n, classes, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.randn(3, self.size, self.size), torch.randint(0, self.classes, ()).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    data = RandomImages(a.batch_size * world * a.steps, a.classes, a.image_size)
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, sampler=sampler, drop_last=True)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=a.classes).to(device)
    # Shard each residual stage, then the rest: a stage's full parameters
    # exist only while it runs.
    for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
        fully_shard(stage)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    model.train()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # gradients are reduce-scattered: each rank keeps its shard
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

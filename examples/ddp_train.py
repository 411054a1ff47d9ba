"""Data-parallel training with DistributedDataParallel, as a user would write
it: one process per rank (torchrun starts them), gloo on the CPU or nccl on
GPUs, a DistributedSampler so each rank sees its own share of the data, and
a batch size per rank from the command line. Its data set is random images
made on the fly, so it runs anywhere:

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --batch-size 32
    vramprobe sweep -- torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --batch-size {batch}
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel


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
    p.add_argument("--model", default="resnet18", help="a torchvision model name")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    data = RandomImages(a.batch_size * world * a.steps, a.classes, a.image_size)
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, sampler=sampler, drop_last=True)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torchvision.models.get_model(a.model, num_classes=a.classes).to(device)
    model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    model.train()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # DDP averages the gradients across ranks here
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A job for scripts/gpu-check's watched `vramprobe exec`: it trains on
--device from a DataLoader keeping every batch's outputs (memory held grows),
then evaluates gathering logits until the device runs out: on CUDA under
--fraction of the GPU (torch.cuda.set_per_process_memory_fraction), on the
CPU (the dry run) with one allocation no machine can make. It exits 1 with
PyTorch's own out-of-memory error, which the watch explains."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--fraction", type=float, default=0.02)
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(a.fraction, device)
    data = TensorDataset(torch.randn(a.batch_size * 64, 64), torch.randint(0, 1000, (a.batch_size * 64,)))
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1000)).to(device)
    opt = torch.optim.AdamW(model.parameters())
    kept = []
    for x, y in DataLoader(data, batch_size=a.batch_size):
        out = model(x.to(device))
        loss = torch.nn.functional.cross_entropy(out, y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(out.detach())
    torch.save(model.state_dict(), "/dev/null")
    logits = []
    with torch.no_grad():
        for x, _ in DataLoader(data, batch_size=a.batch_size):
            logits.append(model(x.to(device)).repeat(1, 64))
            if device.type == "cpu" and len(logits) == 8:
                torch.empty(1 << 50)  # 1 PiB: the CPU allocator refuses it
    print("evaluated without running out of memory: raise --fraction's opposite")


if __name__ == "__main__":
    main()

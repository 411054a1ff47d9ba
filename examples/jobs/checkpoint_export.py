"""A training job that saves a checkpoint after each epoch with an export
copy of the weights in float64 beside the optimizer's state: the save holds
the weights, their optimizer state and the copy at once, more than a
training step of a small batch holds. One of the job shapes a check of the
first few steps gets wrong (tests/whole_job.rs):

    vramprobe check --batch 8 -- python examples/jobs/checkpoint_export.py --batch-size {batch}
"""
import argparse
import os
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default=None, help="checkpoint folder [a temporary one]")
    a = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(a.samples, a.width), torch.randn(a.samples, a.width))
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True)
    layers = [torch.nn.Linear(a.width, a.width) for _ in range(4)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())][:-1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    folder = a.out or tempfile.mkdtemp(prefix="checkpoints-")
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        export = {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}
        checkpoint = {"epoch": epoch, "model": model.state_dict(), "export": export, "optimizer": opt.state_dict()}
        torch.save(checkpoint, os.path.join(folder, f"epoch-{epoch}.pt"))
        del export, checkpoint
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""A training job whose memory does not change after its first steps:
fixed-shape batches, evaluation that keeps only a running sum, a checkpoint
of the weights as they are. Its check must keep today's verdict, with no
false alarm (tests/whole_job.rs):

    vramprobe check --batch 32 -- python examples/jobs/fixed_shape.py --batch-size {batch}
"""
import argparse
import os
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(a.samples, 256), torch.randint(0, 100, (a.samples,)))
    held_out = TensorDataset(torch.randn(a.samples // 4, 256), torch.randint(0, 100, (a.samples // 4,)))
    loader = DataLoader(train, batch_size=a.batch_size, shuffle=True, drop_last=True)
    eval_loader = DataLoader(held_out, batch_size=a.batch_size)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 100))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    folder = tempfile.mkdtemp(prefix="checkpoints-")
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        correct = 0
        with torch.no_grad():
            for x, y in eval_loader:
                correct += (model(x).argmax(1) == y).sum().item()
        torch.save(model.state_dict(), os.path.join(folder, "last.pt"))
        print(f"epoch {epoch} accuracy {correct / len(held_out):.3f}")


if __name__ == "__main__":
    main()

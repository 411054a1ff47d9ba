"""A training job that keeps every batch's outputs on the device for an
epoch-end metric (`preds.append(out.detach())`), as many scripts do: memory
held grows by one batch of logits each step, so the job's peak is at the
end of the epoch, not in its first steps. One of the job shapes a check of
the first few steps gets wrong (tests/whole_job.rs):

    vramprobe check --batch 32 -- python examples/jobs/keep_outputs.py --batch-size {batch}
"""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(a.samples, 64), torch.randint(0, a.classes, (a.samples,)))
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, a.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(a.epochs):
        preds, labels = [], []
        for x, y in loader:
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            preds.append(out.detach())
            labels.append(y)
        accuracy = (torch.cat(preds).argmax(1) == torch.cat(labels)).float().mean().item()
        print(f"epoch {epoch} accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()

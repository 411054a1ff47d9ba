"""A training job whose evaluation after each epoch keeps every batch's
logits and concatenates them for its metrics (what a Hugging Face Trainer
does without `eval_accumulation_steps`): evaluation needs memory for the
whole evaluation set's logits, twice, while training needs only a batch's.
One of the job shapes a check of the first few steps gets wrong
(tests/whole_job.rs):

    vramprobe check --batch 32 -- python examples/jobs/eval_logits.py --batch-size {batch}
"""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    model.eval()
    logits, labels = [], []
    with torch.no_grad():
        for x, y in loader:
            logits.append(model(x))
            labels.append(y)
    logits, labels = torch.cat(logits), torch.cat(labels)
    model.train()
    return torch.nn.functional.cross_entropy(logits, labels).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--eval-samples", type=int, default=2048)
    p.add_argument("--classes", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(a.samples, 64), torch.randint(0, a.classes, (a.samples,)))
    held_out = TensorDataset(torch.randn(a.eval_samples, 64), torch.randint(0, a.classes, (a.eval_samples,)))
    loader = DataLoader(train, batch_size=a.batch_size, shuffle=True)
    eval_loader = DataLoader(held_out, batch_size=a.batch_size)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, a.classes))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} eval loss {evaluate(model, eval_loader):.4f}")


if __name__ == "__main__":
    main()

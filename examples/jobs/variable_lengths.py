"""A training job on token sequences of varying length, each batch padded
to its longest sequence, with the longest sequences late in the data set
(as a corpus sorted by source, or a curriculum, puts them): its first
batches are short, its peak is at the longest batch, late in the epoch.
One of the job shapes a check of the first few steps gets wrong
(tests/whole_job.rs):

    vramprobe check --batch 8 -- python examples/jobs/variable_lengths.py --batch-size {batch}
"""
import argparse

import torch
from torch.utils.data import DataLoader, Dataset


class Sequences(Dataset):
    """Token sequences: most short, the last few long."""

    def __init__(self, n, short, long, tail, vocab):
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(short // 2, short + 1, (n,), generator=g)
        lengths[-tail:] = long
        self.items = [torch.randint(1, vocab, (int(n),), generator=g) for n in lengths]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def pad(batch):
    longest = max(len(x) for x in batch)
    out = torch.zeros(len(batch), longest, dtype=torch.long)
    for i, x in enumerate(batch):
        out[i, : len(x)] = x
    return out


class TokenModel(torch.nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head(h + self.mlp(h))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--short", type=int, default=32)
    p.add_argument("--long", type=int, default=512)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    torch.manual_seed(0)
    data = Sequences(a.samples, a.short, a.long, a.batch_size, a.vocab)
    loader = DataLoader(data, batch_size=a.batch_size, collate_fn=pad)
    model = TokenModel(a.vocab, 128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(a.epochs):
        for tokens in loader:
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

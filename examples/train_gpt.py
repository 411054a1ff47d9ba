"""A small GPT-style language model trained as a user would write it: token
embeddings, causal self-attention blocks, AdamW, a batch size and a sequence
length from the command line, random tokens as the data. vramprobe sweeps it
over both, unmodified:

    vramprobe sweep --seq-lens 64,128,256 -- python examples/train_gpt.py --batch-size {batch} --seq-len {seq_len}
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyGPT(nn.Module):
    def __init__(self, vocab, d_model, heads, layers, context):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        block = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()

    model = TinyGPT(a.vocab, a.d_model, 4, a.layers, 1024).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.batch_size, a.seq_len + 1), device=a.device)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

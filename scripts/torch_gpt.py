"""nanoGPT's GPT (Karpathy, model.py), trimmed to what vramprobe's gpt
presets build: bias=True, dropout=0, flash attention (F.scaled_dot_product_attention
with is_causal=True), GELU MLP, pre-norm blocks, weight tying. The PyTorch
side of the GPT parity check in ./scripts/parity."""
import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    "gpt2-small": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
    "gpt-mini": (6, 6, 192),
    "gpt-micro": (4, 4, 128),
    "gpt-nano": (3, 3, 48),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.n_head, self.n_embd = heads, width

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, name, vocab, context=1024):
        super().__init__()
        layers, heads, width = SHAPES[name]
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab, width),
                wpe=nn.Embedding(context, width),
                h=nn.ModuleList([Block(width, heads) for _ in range(layers)]),
                ln_f=nn.LayerNorm(width),
            )
        )
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

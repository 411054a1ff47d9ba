"""The catch-and-retry recipe many training scripts follow, for
scripts/gpu-check: each step first tries something too big; the
out-of-memory error is caught and the step runs at batch 8 instead. A real
CUDA OOM on a GPU (torch.empty of 1 PiB); on the CPU, where nothing is too
big for a check, the script raises the same error itself past batch 8.
vramprobe must call this WON'T FIT (exit 3): its steps ran at another batch.

    vramprobe check --batch 32 -- python scripts/oom_retry.py {batch}
"""
import sys

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
batch = int(sys.argv[1])
model = torch.nn.Linear(64, 64).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    try:
        if device == "cuda":
            torch.empty(1 << 50, dtype=torch.uint8, device=device)
        elif batch > 8:
            raise torch.OutOfMemoryError("CUDA out of memory (raised by the script on the CPU)")
        model(torch.randn(batch, 64, device=device)).sum().backward()
        opt.step()
    except torch.OutOfMemoryError:
        if device == "cuda":
            torch.cuda.empty_cache()
        batch = 8
        model(torch.randn(batch, 64, device=device)).sum().backward()
        opt.step()

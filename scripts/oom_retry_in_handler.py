"""The catch-and-retry recipe with the CPU allocator's own failure: every
step first asks for far too much (a real `RuntimeError: ... can't allocate
memory` from libtorch, made in C), catches it and runs a smaller step inside
the `except` block. vramprobe must call this WON'T FIT (exit 3): the steps
it measured ran at another batch. Used by tests/command_mode.rs and
scripts/compat.py.

    vramprobe check --device cpu --batch 32 -- python scripts/oom_retry_in_handler.py {batch}
"""
import sys

import torch

batch = int(sys.argv[1])
m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    try:
        torch.empty(10**15 + batch)
    except RuntimeError as e:
        if "memory" not in str(e):
            raise
        m(torch.randn(8, 4)).sum().backward()
        opt.step()

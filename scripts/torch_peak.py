"""The PyTorch side of ./scripts/parity: a torchvision model trained on the
CPU with Adam (PyTorch's default single-tensor path there), and its peak
bytes per training step from the profiler's memory events (the same
allocations vramprobe's host tracker counts). Prints one JSON object."""
import argparse
import json

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--input", default="3x224x224")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    shape = [int(d) for d in a.input.split("x")]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        kwargs = {"init_weights": False} if a.model == "inception_v3" else {}
        model = getattr(torchvision.models, a.model)(num_classes=a.classes, **kwargs).train()
        params = model.parameters()
        opt = {
            "sgd": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9),
            "adam": lambda: torch.optim.Adam(params, lr=1e-3),
            "adamw": lambda: torch.optim.AdamW(params, lr=1e-3),
        }[a.optimizer]()
        for step in range(a.steps):
            with record_function(f"vramprobe_step_{step}"):
                x = torch.randn(a.batch, *shape)
                y = torch.randint(0, a.classes, (a.batch,))
                opt.zero_grad()
                out = model(x)
                logits = out.logits if hasattr(out, "logits") else out
                loss = torch.nn.functional.cross_entropy(logits, y)
                if getattr(out, "aux_logits", None) is not None:
                    loss = loss + 0.4 * torch.nn.functional.cross_entropy(out.aux_logits, y)
                loss.backward()
                opt.step()
                del x, y, out, logits, loss
    # Kineto's raw events carry the allocator's reports: "[memory]" with the
    # bytes allocated (positive) or freed (negative).
    events = prof.profiler.kineto_results.events()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    steps = sorted(
        (e.start_ns(), e.start_ns() + e.duration_ns()) for e in events if e.name().startswith("vramprobe_step_")
    )
    peaks, held, i = [], 0, 0
    for start, end in steps:
        while i < len(memory) and memory[i][0] < start:
            held += memory[i][1]
            i += 1
        peak = held
        while i < len(memory) and memory[i][0] <= end:
            held += memory[i][1]
            peak = max(peak, held)
            i += 1
        peaks.append(peak)
    print(json.dumps({"model": a.model, "batch": a.batch, "per_step_peak_bytes": peaks, "peak_bytes": max(peaks)}))


if __name__ == "__main__":
    main()

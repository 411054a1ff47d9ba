"""The PyTorch side of ./scripts/parity: a torchvision model (or, with
--torchscript FILE, a TorchScript model file) trained on the CPU with Adam
(PyTorch's default single-tensor path there), and its peak bytes per
training step from the profiler's memory events (the same allocations
vramprobe's host tracker counts). Prints one JSON object."""
import argparse
import json

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--torchscript", metavar="FILE", help="train this TorchScript file (--model only names it)")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--input", default="3x224x224")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16-amp", "bf16-amp"], default="fp32")
    p.add_argument("--mode", choices=["train", "eval"], default="train")
    a = p.parse_args()
    shape = [int(d) for d in a.input.split("x")]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        kwargs = {"init_weights": False} if a.model == "inception_v3" else {}
        tokens = a.model.startswith("gpt")
        if a.torchscript:
            model = torch.jit.load(a.torchscript).train(a.mode == "train")
        elif tokens:
            model = GPT(a.model, a.classes).train(a.mode == "train")
        else:
            import torchvision  # only the torchvision models need it

            model = getattr(torchvision.models, a.model)(num_classes=a.classes, **kwargs)
            model = model.train(a.mode == "train")
        if a.precision == "bf16":
            model = model.to(torch.bfloat16)
        params = model.parameters()
        amp = {"fp16-amp": torch.float16, "bf16-amp": torch.bfloat16}.get(a.precision)
        # GradScaler's scale does not change memory; 1 never skips a step (as vramprobe's sweep).
        scaler = torch.amp.GradScaler("cpu", init_scale=1.0) if a.precision == "fp16-amp" else None
        dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
        opt = {
            "sgd": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9),
            "adam": lambda: torch.optim.Adam(params, lr=1e-3),
            "adamw": lambda: torch.optim.AdamW(params, lr=1e-3),
        }[a.optimizer]()
        for step in range(a.steps):
            with record_function(f"vramprobe_step_{step}"):
                if tokens:
                    x = torch.randint(0, a.classes, (a.batch, *shape))
                    y = torch.randint(0, a.classes, (a.batch, *shape))
                else:
                    x = torch.randn(a.batch, *shape, dtype=dtype)
                    y = torch.randint(0, a.classes, (a.batch,))
                if a.mode == "eval":
                    with torch.no_grad(), torch.autocast("cpu", dtype=amp or torch.bfloat16, enabled=amp is not None):
                        out = model(x)
                    del x, y, out
                    continue
                opt.zero_grad()
                with torch.autocast("cpu", dtype=amp or torch.bfloat16, enabled=amp is not None):
                    out = model(x)
                    logits = out.logits if hasattr(out, "logits") else out
                    if tokens:
                        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
                    else:
                        loss = torch.nn.functional.cross_entropy(logits, y)
                    if getattr(out, "aux_logits", None) is not None:
                        loss = loss + 0.4 * torch.nn.functional.cross_entropy(out.aux_logits, y)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                else:
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

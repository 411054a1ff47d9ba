"""A torchvision training job for scripts/bench-gpu-predict's command-mode
rows: the calibration set's workloads as their own scripts run them, swept
unmodified by vramprobe (`vramprobe sweep -- python bench_tv_job.py ...
--batch-size {batch}`). Random images, cross entropy over 1000 classes.

    python3 scripts/bench_tv_job.py --model convnext_large --precision fp16-amp --optimizer sgd --batch-size 4
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--precision", choices=["fp32", "fp16-amp", "bf16-amp"], default="fp32")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    kwargs = {"aux_logits": False, "init_weights": False} if a.model == "inception_v3" else {}
    model = getattr(torchvision.models, a.model)(**kwargs).to(device)
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dtype = {"fp16-amp": torch.float16, "bf16-amp": torch.bfloat16}.get(a.precision)
    scaler = torch.amp.GradScaler(device, enabled=a.precision == "fp16-amp")
    for _ in range(a.steps):
        x = torch.randn(a.batch_size, 3, a.size, a.size, device=device)
        y = torch.randint(0, 1000, (a.batch_size,), device=device)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


if __name__ == "__main__":
    main()

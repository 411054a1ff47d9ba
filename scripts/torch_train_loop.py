"""The PyTorch side of ./scripts/bench-train: the same training loop as
`vramprobe train` (torchvision model, random data made each step, the same
batch, input, optimizer and thread count), timed the same way: mean step time
over every step but the first."""
import argparse
import json
import time

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--input", default="3x32x32")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    shape = [int(d) for d in a.input.split("x")]
    model = getattr(torchvision.models, a.model)(num_classes=a.classes)
    model.train()
    params = model.parameters()
    opt = {
        "sgd": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9),
        "adam": lambda: torch.optim.Adam(params, lr=1e-3),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-3),
    }[a.optimizer]()
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        x = torch.randn(a.batch, *shape)
        y = torch.randint(0, a.classes, (a.batch,))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    mean = sum(times[1:]) / len(times[1:])
    print(json.dumps({"samples_per_second": a.batch / mean, "mean_step_seconds": mean, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

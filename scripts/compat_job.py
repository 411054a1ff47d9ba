"""A small training job for scripts/compat, on torch alone (no torchvision,
which is pinned to one torch release): a convolutional classifier on
random images, SGD with momentum, an optional DataLoader with workers, and
`--by-hand` for a loop without torch.optim (weights updated by hand, as
pytorch/examples' word_language_model does).

    python scripts/compat_job.py --batch-size 8 [--workers 2] [--by-hand]
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--by-hand", action="store_true")
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()

model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1),
    torch.nn.ReLU(),
    torch.nn.Conv2d(16, 32, 3, padding=1),
    torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(),
    torch.nn.Linear(32, 10),
)
loss_fn = torch.nn.CrossEntropyLoss()
images = torch.utils.data.TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
loader = torch.utils.data.DataLoader(images, batch_size=args.batch_size, num_workers=args.workers, drop_last=True)
optimizer = None if args.by_hand else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

step = 0
while step < args.steps:
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        if optimizer is None:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)
                    p.grad = None
        else:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step += 1
        if step >= args.steps:
            break

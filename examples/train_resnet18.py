"""A plain PyTorch training script, as a user would write it: torchvision's
resnet18 on CIFAR-sized images, SGD with momentum, a batch size from the
command line. Random data by default, so it runs anywhere; vramprobe sweeps
it unmodified:

    vramprobe sweep -- python examples/train_resnet18.py --batch-size {batch}
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()

    model = torchvision.models.resnet18(num_classes=a.classes).to(a.device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    model.train()
    for step in range(a.steps):
        x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=a.device)
        y = torch.randint(0, a.classes, (a.batch_size,), device=a.device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""A plain PyTorch training script, as a user would write it: torchvision's
resnet18 on CIFAR-sized images, SGD with momentum, a DataLoader, optional
autocast (bf16, or fp16 with a GradScaler), a batch size from the command
line. Its data set is random images made on the fly,
so it runs anywhere; vramprobe sweeps it unmodified:

    vramprobe sweep -- python examples/train_resnet18.py --batch-size {batch}
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision


class RandomImages(torch.utils.data.Dataset):
    """Stands in for a real image data set: a fresh random image per index."""

    def __init__(self, n, classes, size):
        self.n, self.classes, self.size = n, classes, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.randn(3, self.size, self.size), torch.randint(0, self.classes, ()).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off", help="autocast (fp16 with a GradScaler)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()

    data = RandomImages(a.batch_size * a.steps, a.classes, a.image_size)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, num_workers=a.workers, drop_last=True)
    model = torchvision.models.resnet18(num_classes=a.classes).to(a.device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = torch.amp.GradScaler(a.device.split(":")[0], enabled=a.amp == "fp16")
    model.train()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(a.device), y.to(a.device)
        opt.zero_grad()
        with torch.autocast(a.device.split(":")[0], dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

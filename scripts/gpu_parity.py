"""GPU parity, the PyTorch side (run by scripts/gpu-check on the device):
torchvision's resnet18 (or, where torchvision is not installed, the same
network defined below op for op) trained with Adam on random data, and
torch.cuda.max_memory_allocated per step. Prints one JSON object."""
import argparse
import json

import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision.models.resnet18, layer for layer (11,689,512 parameters)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, inplanes = [], 64
        for planes, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--input", default="3x224x224")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--foreach", choices=["default", "on", "off"], default="default")
    a = p.parse_args()
    try:
        import torchvision

        model, source = torchvision.models.resnet18(), "torchvision " + torchvision.__version__
    except ImportError:
        model, source = ResNet18(), "bundled torchvision-equivalent definition"
    dev = torch.device("cuda")
    model = model.to(dev).train()
    foreach = {"default": None, "on": True, "off": False}[a.foreach]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
    shape = [int(d) for d in a.input.split("x")]
    peaks = []
    for _ in range(a.steps):
        torch.cuda.reset_peak_memory_stats(dev)
        x = torch.randn(a.batch, *shape, device=dev)
        y = torch.randint(0, 1000, (a.batch,), device=dev)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize(dev)
        del x, y, loss
        peaks.append(torch.cuda.max_memory_allocated(dev))
    print(json.dumps({
        "peak_allocated_bytes": max(peaks),
        "per_step": peaks,
        "model": source,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "foreach": a.foreach,
    }))


if __name__ == "__main__":
    main()

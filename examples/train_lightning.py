"""A PyTorch Lightning training job, as a Lightning user writes it:
torchvision's resnet18 in a LightningModule, AdamW, a DataLoader of random
CIFAR-sized images, the Trainer's own loop. vramprobe sweeps it unmodified
(needs `pip install lightning`; the search benchmark installs it for itself):

    vramprobe sweep -- python examples/train_lightning.py --batch-size {batch}

`build()` gives the same module to Lightning's own batch-size finder
(scripts/lightning_finder.py), for the benchmark's comparison.
"""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
import torchvision


class RandomImages(torch.utils.data.Dataset):
    def __init__(self, n, classes, size):
        self.n, self.classes, self.size = n, classes, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.randn(3, self.size, self.size), torch.randint(0, self.classes, ()).item()


class Classifier(L.LightningModule):
    def __init__(self, batch_size=32, image_size=32, classes=10, lr=1e-3, optimizer="adamw"):
        super().__init__()
        # Lightning's finder scales this attribute.
        self.batch_size, self.image_size, self.classes, self.lr = batch_size, image_size, classes, lr
        self.optimizer = optimizer
        self.net = torchvision.models.resnet18(num_classes=classes)

    def training_step(self, batch, _):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=False)
        return loss

    def configure_optimizers(self):
        kind = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[self.optimizer]
        return kind(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        data = RandomImages(self.batch_size * 1000, self.classes, self.image_size)
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size, drop_last=True)


def trainer(steps):
    return L.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def build(batch_size=32, image_size=32, optimizer="adamw"):
    return Classifier(batch_size=batch_size, image_size=image_size, optimizer=optimizer)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--optimizer", choices=["adamw", "adam"], default="adamw")
    a = p.parse_args()
    trainer(a.steps).fit(build(a.batch_size, a.image_size, a.optimizer))


if __name__ == "__main__":
    main()

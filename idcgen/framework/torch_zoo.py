"""PyTorch subject models, in plain PyTorch (torchvision is not needed): twins of the Keras zoo's ``lenet5``
and ``cifar10_cnn`` (``from_keras`` copies their weights across) and a CIFAR ResNet-18 (3x3 stem, no max
pooling, four stages of two basic blocks), with a plain training loop. ``recipes/train_torch.py`` trains them.

Each module carries ``input_shape`` (H, W, C): idcgen exports it on images of that shape.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class LeNet5(nn.Module):
    """The Keras zoo's LeNet-5 (DeepXplore's layer names), channels first."""

    def __init__(self, input_shape=(28, 28, 1), n_classes: int = 10):
        super().__init__()
        self.input_shape = tuple(input_shape)
        h, w, c = self.input_shape
        self.block1_conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.block2_conv1 = nn.Conv2d(6, 16, 5, padding=2)
        self.fc1 = nn.Linear(16 * (h // 4) * (w // 4), 120)
        self.fc2 = nn.Linear(120, 84)
        self.before_softmax = nn.Linear(84, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.block1_conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.block2_conv1(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.before_softmax(F.relu(self.fc2(x)))


class Cifar10CNN(nn.Module):
    """The Keras zoo's ``cifar10_cnn`` (the paper's CIFAR-10 network, its layer names), channels first, without
    its dropout layers (identities at inference)."""

    def __init__(self, input_shape=(32, 32, 3), n_classes: int = 10):
        super().__init__()
        self.input_shape = tuple(input_shape)
        h, w, c = self.input_shape
        self.block1_conv1 = nn.Conv2d(c, 32, 3, padding=1)
        self.block1_conv2 = nn.Conv2d(32, 32, 3)
        self.block2_conv1 = nn.Conv2d(32, 64, 3, padding=1)
        self.block2_conv2 = nn.Conv2d(64, 64, 3)
        side = lambda n: ((n - 2) // 2 - 2) // 2  # two valid 3x3 convolutions, each block pooled by 2
        self.fc1 = nn.Linear(64 * side(h) * side(w), 512)
        self.before_softmax = nn.Linear(512, n_classes)

    def forward(self, x):
        for block in (1, 2):
            x = F.relu(getattr(self, f"block{block}_conv1")(x))
            x = F.max_pool2d(F.relu(getattr(self, f"block{block}_conv2")(x)), 2)
        return self.before_softmax(F.relu(self.fc1(torch.flatten(x, 1))))


def from_keras(model) -> nn.Module:
    """The twin (:class:`LeNet5`, or :class:`Cifar10CNN` for a model named ``cifar10_cnn``) with the weights of
    the Keras zoo's ``model``: kernels moved channels first, and the first dense layer's rows reordered from
    Keras' (h, w, c) flattening to PyTorch's (c, h, w)."""
    shape = tuple(model.inputs[0].shape[1:])
    n_classes = int(model.outputs[0].shape[-1])
    if model.name == "cifar10_cnn":
        twin: nn.Module = Cifar10CNN(shape, n_classes)
        convs, dense = ("block1_conv1", "block1_conv2", "block2_conv1", "block2_conv2"), ("fc1", "before_softmax")
    else:
        twin = LeNet5(shape, n_classes)
        convs, dense = ("block1_conv1", "block2_conv1"), ("fc1", "fc2", "before_softmax")
    with torch.no_grad():
        for name in convs:
            kernel, bias = model.get_layer(name).get_weights()
            getattr(twin, name).weight.copy_(torch.as_tensor(kernel.transpose(3, 2, 0, 1)))
            getattr(twin, name).bias.copy_(torch.as_tensor(bias))
        flat = tuple(model.get_layer(convs[-1]).output.shape[1:])  # (h, w, c) before pooling
        h, w, c = flat[0] // 2, flat[1] // 2, flat[2]
        for name in dense:
            kernel, bias = model.get_layer(name).get_weights()
            if name == "fc1":
                kernel = kernel.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1)
            getattr(twin, name).weight.copy_(torch.as_tensor(kernel.T))
            getattr(twin, name).bias.copy_(torch.as_tensor(bias))
    return twin.eval()


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 (He et al. 2016 with the CIFAR stem): widths ``width`` x (1, 2, 4, 8); 64 is the
    standard 11 M-parameter network, smaller widths train in minutes on a CPU."""

    def __init__(self, input_shape=(32, 32, 3), n_classes: int = 10, width: int = 64):
        super().__init__()
        self.input_shape = tuple(input_shape)
        self.conv1 = nn.Conv2d(input_shape[-1], width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        stages, cin = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            cout = width * 2**i
            stages.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


MODELS = {"lenet5": LeNet5, "cifar10_cnn": Cifar10CNN, "resnet18": ResNet18}


def _channels_first(x) -> torch.Tensor:
    """Images (n, H, W[, C]) as a float tensor (n, C, H, W)."""
    x = np.asarray(x, np.float32)
    return torch.as_tensor(x[..., None] if x.ndim == 3 else x).permute(0, 3, 1, 2).contiguous()


def train(
    module: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int = 10,
    batch_size: int = 128,
    lr: float = 1e-3,
    augment: bool = False,
    minutes: float | None = None,
    random_state: int = 0,
    progress: bool = True,
) -> dict:
    """Train ``module`` on images ``x`` (n, H, W, C) in [0, 1] with Adam and a cosine schedule (random crops
    and flips with ``augment``), stopping after ``minutes`` if given; returns the epochs run and seconds."""
    from tqdm import tqdm

    torch.manual_seed(random_state)
    images = _channels_first(x)
    labels = torch.as_tensor(np.asarray(y, np.int64))
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    steps = epochs * ((len(images) + batch_size - 1) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    generator = torch.Generator().manual_seed(random_state)
    start, done = time.perf_counter(), 0
    module.train()
    for epoch in range(epochs):
        order = torch.randperm(len(images), generator=generator)
        bar = tqdm(
            range(0, len(images), batch_size), desc=f"epoch {epoch + 1}/{epochs}", disable=not progress, leave=False
        )
        for begin in bar:
            idx = order[begin : begin + batch_size]
            batch = images[idx]
            if augment:  # a random 4-pixel shift (padded crop) and a horizontal flip per batch
                dx, dy = (int(v) for v in torch.randint(-4, 5, (2,), generator=generator))
                batch = torch.roll(F.pad(batch, (4, 4, 4, 4)), (dy, dx), (2, 3))[:, :, 4:-4, 4:-4]
                if torch.rand(1, generator=generator) < 0.5:
                    batch = batch.flip(3)
            loss = F.cross_entropy(module(batch), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        done = epoch + 1
        if minutes is not None and time.perf_counter() - start > 60 * minutes:
            break
    module.eval()
    return {"epochs": done, "seconds": round(time.perf_counter() - start, 1)}


def accuracy(module: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 512) -> float:
    module.eval()
    right = 0
    with torch.inference_mode():
        for start in range(0, len(x), batch_size):
            batch = _channels_first(x[start : start + batch_size])
            right += int((module(batch).argmax(1).numpy() == np.asarray(y[start : start + batch_size])).sum())
    return right / max(len(x), 1)


def export_program(module: nn.Module, path) -> None:
    """``module`` saved as a torch.export program (``.pt2``), the file `idcgen --model` reads."""
    from .torch_load import export, save_program

    save_program(export(module, module.input_shape).program, path)

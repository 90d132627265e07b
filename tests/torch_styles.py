"""Models written as torchvision, timm and Hugging Face write them, in plain PyTorch (none of those packages
is imported): in-place operations, channels-last sections, hand-written normalisations, windows."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: one shared ``nn.ReLU(inplace=True)``, ``out += identity``."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet18(nn.Module):
    """torchvision's resnet18 (layers [2, 2, 2, 2]), ``width`` channels at the stem instead of 64."""

    input_shape = (32, 32, 3)

    def __init__(self, classes: int = 10, width: int = 8):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(width, 1)
        self.layer2 = self._stage(width * 2, 2)
        self.layer3 = self._stage(width * 4, 2)
        self.layer4 = self._stage(width * 8, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8, classes)

    def _stage(self, planes: int, stride: int):
        down = None
        if stride != 1 or self.inplanes != planes:
            down = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        first = BasicBlock(self.inplanes, planes, stride, down)
        self.inplanes = planes
        return nn.Sequential(first, BasicBlock(planes, planes))

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


#: in-place operation kinds as the model zoos write them, each with its out-of-place form
IN_PLACE = {
    "relu_": (lambda m, x: m.act(x), lambda m, x: m.act(x)),   # nn.ReLU(inplace=True), nn.ReLU()
    "add_": (lambda m, x: x.__iadd__(m.skip), lambda m, x: x + m.skip),   # out += identity
    "silu_": (lambda m, x: F.silu(x, inplace=True), lambda m, x: F.silu(x)),
    "hardswish_": (lambda m, x: F.hardswish(x, inplace=True), lambda m, x: F.hardswish(x)),
    "mul_": (lambda m, x: x.mul_(m.scale), lambda m, x: x * m.scale),   # a layer scale
    "mul_ gate": (lambda m, x: x.mul_(torch.sigmoid(x.mean((2, 3), keepdim=True))),   # squeeze-excitation
                  lambda m, x: x * torch.sigmoid(x.mean((2, 3), keepdim=True))),
    "clamp_": (lambda m, x: x.clamp_(min=0.0, max=6.0), lambda m, x: x.clamp(min=0.0, max=6.0)),
    "dropout_": (lambda m, x: F.dropout(x, 0.2, m.training, inplace=True), lambda m, x: F.dropout(x, 0.2, m.training)),
}


class InPlace(nn.Module):
    """conv -> BN -> (one operation, in place or not) -> conv -> global average -> dense."""

    input_shape = (8, 8, 3)

    def __init__(self, kind: str, in_place: bool):
        super().__init__()
        self.op = IN_PLACE[kind][0 if in_place else 1]
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.act = nn.ReLU(inplace=in_place)
        self.scale = nn.Parameter(torch.full((6, 1, 1), 0.7))
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        self.skip = self.conv(x)
        x = self.op(self, self.bn(self.skip))
        return self.fc(F.relu(self.conv2(x)).mean((2, 3)))

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
    "relu_": (lambda m, x: m.act(x), lambda m, x: m.act(x)),  # nn.ReLU(inplace=True), nn.ReLU()
    "add_": (lambda m, x: x.__iadd__(m.skip), lambda m, x: x + m.skip),  # out += identity
    "silu_": (lambda m, x: F.silu(x, inplace=True), lambda m, x: F.silu(x)),
    "hardswish_": (lambda m, x: F.hardswish(x, inplace=True), lambda m, x: F.hardswish(x)),
    "mul_": (lambda m, x: x.mul_(m.scale), lambda m, x: x * m.scale),  # a layer scale
    "mul_ gate": (
        lambda m, x: x.mul_(torch.sigmoid(x.mean((2, 3), keepdim=True))),  # squeeze-excitation
        lambda m, x: x * torch.sigmoid(x.mean((2, 3), keepdim=True)),
    ),
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


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: channels last, F.layer_norm, channels first again."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)


class ChannelsFirstNorm(nn.Module):
    """Hugging Face ConvNeXt's LayerNorm(data_format="channels_first"), written by hand over axis 1."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(channels)), nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNeXt(nn.Module):
    """A ConvNeXt stem and block as timm (``norm="timm"``) or Hugging Face (``norm="hf"``) write them: a
    channels-first norm after the stem; depthwise conv -> channels last (permute) -> LayerNorm -> MLP ->
    layer scale -> channels first -> residual."""

    input_shape = (16, 16, 3)

    def __init__(self, norm: str = "timm", dim: int = 16, classes: int = 5):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 2, 2)
        self.stem_norm = LayerNorm2d(dim, eps=1e-6) if norm == "timm" else ChannelsFirstNorm(dim)
        self.dwconv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem_norm(self.stem(x))
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        x = x + y.permute(0, 3, 1, 2)
        return self.head(x.mean((2, 3)))


class Windows(nn.Module):
    """A Swin-style stage: channels-last patches, a cyclic shift (torch.roll), window partition (batch x
    windows first), a per-window token MLP and attention-free mixing, windows merged back, shift undone."""

    input_shape = (8, 8, 3)

    def __init__(self, dim: int = 6, window: int = 4, classes: int = 4):
        super().__init__()
        self.window = window
        self.embed = nn.Linear(3, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):  # (n, 3, 8, 8)
        x = self.embed(x.permute(0, 2, 3, 1))  # (n, 8, 8, dim)
        n, h, w, c = x.shape
        k = self.window
        shifted = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
        win = shifted.view(n, h // k, k, w // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, k * k, c)
        win = win + self.fc2(F.relu(self.fc1(win)))  # (n * windows, tokens, dim)
        back = win.view(n, h // k, w // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(n, h, w, c)
        x = torch.roll(back, shifts=(2, 2), dims=(1, 2))
        return self.head(x.mean((1, 2)))


class Masked(nn.Module):
    """Hugging Face style bookkeeping inside the forward pass: a boolean mask and int64 indices (no layers)."""

    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = self.conv(x)
        mask = h > 0  # bool
        top = h.flatten(2).argmax(-1)  # int64 (n, 4)
        h = h * mask  # a where written as a product
        picked = h.flatten(2).gather(2, top[..., None])[..., 0]
        return self.fc(picked + h.mean((2, 3)))


class Squared(nn.Module):
    """An operation idcgen's LRP has no rule for (a square) between the pixels and the first hidden layer."""

    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(F.relu(self.conv2(self.conv(x).pow(2))).mean((2, 3)))


class InvertedResidual(nn.Module):
    """torchvision's MobileNetV2 block: 1x1 expand, depthwise 3x3, ReLU6(inplace=True), 1x1 project, + x."""

    def __init__(self, dim: int, expand: int = 4):
        super().__init__()
        hidden = dim * expand
        self.conv = nn.Sequential(
            nn.Conv2d(dim, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, dim, 1, bias=False),
            nn.BatchNorm2d(dim),
        )

    def forward(self, x):
        return x + self.conv(x)


class MobileNetV2(nn.Module):
    """A MobileNetV2 in torchvision's style (stem, two inverted residuals, head, in-place dropout)."""

    input_shape = (16, 16, 3)

    def __init__(self, classes: int = 10, dim: int = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, dim, 3, 2, 1, bias=False), nn.BatchNorm2d(dim), nn.ReLU6(inplace=True)),
            InvertedResidual(dim),
            InvertedResidual(dim),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(dim, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class MBConv(nn.Module):
    """timm's EfficientNet block: SiLU in place, squeeze-excitation ``x * sigmoid(...)``, ``x += shortcut``."""

    def __init__(self, dim: int):
        super().__init__()
        self.conv_pw, self.bn1 = nn.Conv2d(dim, 4 * dim, 1, bias=False), nn.BatchNorm2d(4 * dim)
        self.conv_dw = nn.Conv2d(4 * dim, 4 * dim, 3, padding=1, groups=4 * dim, bias=False)
        self.bn2 = nn.BatchNorm2d(4 * dim)
        self.se_reduce, self.se_expand = nn.Conv2d(4 * dim, dim, 1), nn.Conv2d(dim, 4 * dim, 1)
        self.conv_pwl, self.bn3 = nn.Conv2d(4 * dim, dim, 1, bias=False), nn.BatchNorm2d(dim)

    def forward(self, x):
        shortcut = x
        x = F.silu(self.bn1(self.conv_pw(x)), inplace=True)
        x = F.silu(self.bn2(self.conv_dw(x)), inplace=True)
        se = F.silu(self.se_reduce(x.mean((2, 3), keepdim=True)), inplace=True)
        x = x * torch.sigmoid(self.se_expand(se))
        x = self.bn3(self.conv_pwl(x))
        x += shortcut
        return x


class EfficientNet(nn.Module):
    """An EfficientNet in timm's style: stem (SiLU in place), two MBConv blocks, head, global pool, classifier."""

    input_shape = (16, 16, 3)

    def __init__(self, classes: int = 10, dim: int = 8):
        super().__init__()
        self.conv_stem, self.bn1 = nn.Conv2d(3, dim, 3, 2, 1, bias=False), nn.BatchNorm2d(dim)
        self.blocks = nn.Sequential(MBConv(dim), MBConv(dim))
        self.conv_head, self.bn2 = nn.Conv2d(dim, 4 * dim, 1, bias=False), nn.BatchNorm2d(4 * dim)
        self.classifier = nn.Linear(4 * dim, classes)

    def forward(self, x):
        x = F.silu(self.bn1(self.conv_stem(x)), inplace=True)
        x = F.silu(self.bn2(self.conv_head(self.blocks(x))), inplace=True)
        return self.classifier(F.dropout(x.mean((2, 3)), 0.2, self.training, inplace=True))


class TutorialNet(nn.Module):
    """PyTorch's CIFAR-10 tutorial network: conv -> pool -> conv -> pool, then ``x.view(-1, 16 * 5 * 5)``,
    which needs the feature maps in NCHW's own strides (as a DataLoader's batches give them)."""

    def __init__(self, channels: int = 3):
        super().__init__()
        self.input_shape = (32, 32, channels)
        self.conv1 = nn.Conv2d(channels, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        return self.fc2(F.relu(self.fc1(x)))

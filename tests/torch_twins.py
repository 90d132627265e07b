"""Twin models for the PyTorch tests: the same network in Keras and in plain PyTorch, with the same weights
(conv + BN + residual Add + max pooling + global pooling + dense; and one with a concatenation branch)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Residual(nn.Module):
    """stem -> [conv -> BN -> ReLU -> conv, + stem] -> ReLU -> max pool -> global average -> dense."""

    input_shape = (8, 8, 3)

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8, eps=1e-3)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        s = F.relu(self.stem(x))
        out = self.conv2(F.relu(self.bn1(self.conv1(s))))
        out = F.relu(out + s)
        out = self.pool(out)
        return self.fc(out.mean(dim=(2, 3)))


class Branches(nn.Module):
    """two convolutions side by side -> concatenation -> conv -> BN -> ReLU -> global average -> dense."""

    input_shape = (8, 8, 3)

    def __init__(self, classes: int = 10):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.mix = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, eps=1e-3)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = torch.cat([F.relu(self.a(x)), F.relu(self.b(x))], dim=1)
        x = F.relu(self.bn(self.mix(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def keras_residual(classes: int = 10):
    import keras
    L = keras.layers
    x = keras.Input((8, 8, 3))
    s = L.ReLU(name="stem_relu")(L.Conv2D(8, 3, padding="same", name="stem")(x))
    out = L.Conv2D(8, 3, padding="same", use_bias=False, name="conv1")(s)
    out = L.ReLU(name="relu1")(L.BatchNormalization(epsilon=1e-3, name="bn1")(out))
    out = L.Conv2D(8, 3, padding="same", name="conv2")(out)
    out = L.ReLU(name="block_relu")(L.Add(name="add")([out, s]))
    out = L.MaxPooling2D(2, name="pool")(out)
    out = L.GlobalAveragePooling2D(name="gap")(out)
    return keras.Model(x, L.Dense(classes, name="fc")(out))


def keras_branches(classes: int = 10):
    import keras
    L = keras.layers
    x = keras.Input((8, 8, 3))
    a = L.ReLU(name="a_relu")(L.Conv2D(4, 3, padding="same", name="a")(x))
    b = L.ReLU(name="b_relu")(L.Conv2D(4, 1, name="b")(x))
    out = L.Concatenate(name="cat")([a, b])
    out = L.ReLU(name="relu")(L.BatchNormalization(epsilon=1e-3, name="bn")(L.Conv2D(8, 3, padding="same",
                                                                                      name="mix")(out)))
    out = L.GlobalAveragePooling2D(name="gap")(out)
    return keras.Model(x, L.Dense(classes, name="fc")(out))


def randomise(module: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights, and batch-norm statistics far from the identity, so that every rule matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p.dim() > 1 else 0.1))
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return module.eval()


def copy_to_keras(module: nn.Module, model) -> None:
    """The torch module's weights into its Keras twin (layers matched by name)."""
    for name, sub in module.named_children():
        if not any(layer.name == name for layer in model.layers):
            continue
        layer = model.get_layer(name)
        if isinstance(sub, nn.Conv2d):
            weights = [sub.weight.detach().numpy().transpose(2, 3, 1, 0)]
            if sub.bias is not None:
                weights.append(sub.bias.detach().numpy())
        elif isinstance(sub, nn.Linear):
            weights = [sub.weight.detach().numpy().T, sub.bias.detach().numpy()]
        elif isinstance(sub, nn.BatchNorm2d):
            weights = [t.detach().numpy() for t in (sub.weight, sub.bias, sub.running_mean, sub.running_var)]
        else:
            continue
        layer.set_weights(weights)


def twins(kind: str = "residual", seed: int = 0):
    """(torch module, Keras model) with the same weights."""
    module = randomise(Residual() if kind == "residual" else Branches(), seed)
    model = keras_residual() if kind == "residual" else keras_branches()
    copy_to_keras(module, model)
    return module, model


def images(n: int = 32, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 8, 8, 3), dtype=np.float32)

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
    out = L.ReLU(name="relu")(
        L.BatchNormalization(epsilon=1e-3, name="bn")(L.Conv2D(8, 3, padding="same", name="mix")(out))
    )
    out = L.GlobalAveragePooling2D(name="gap")(out)
    return keras.Model(x, L.Dense(classes, name="fc")(out))


def randomise(module: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights, and batch-norm statistics far from the identity, so that every rule matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
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


class Block(nn.Module):
    """A pre-norm transformer block: LayerNorm -> multi-head attention -> residual; LayerNorm -> MLP -> residual."""

    def __init__(self, d: int, heads: int, mlp: int, act, need_weights: bool):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)
        self.act, self.need_weights = act, need_weights

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=self.need_weights)[0]
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TinyViT(nn.Module):
    """A vision transformer for 8x8 images: 4x4 patches, a learned position embedding (unless
    ``position=False``), two blocks, mean pooling over tokens. ``need_weights=True`` exports attention as
    bmm + softmax + bmm, else as PyTorch's fused scaled_dot_product_attention."""

    input_shape = (8, 8, 3)

    def __init__(
        self,
        d: int = 16,
        heads: int = 2,
        classes: int = 5,
        act=F.gelu,
        need_weights: bool = False,
        position: bool = True,
    ):
        super().__init__()
        self.embed = nn.Conv2d(3, d, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, 4, d) * 0.1) if position else None
        self.blocks = nn.Sequential(*[Block(d, heads, 2 * d, act, need_weights) for _ in range(2)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = x if self.pos is None else x + self.pos
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def detached_vit_taps(model: TinyViT, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The TinyViT's logits computed by hand with every LayerNorm's 1/std and the attention weights
    detached, and the tensors of three layers inside its blocks (for gradient x input)."""

    def norm(ln, t):
        centred = t - t.mean(-1, keepdim=True)
        return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + ln.eps).detach() * ln.weight + ln.bias

    taps, n = {}, len(x)
    t = model.embed(x).flatten(2).transpose(1, 2) + model.pos
    for i, block in enumerate(model.blocks):
        attn, d = block.attn, t.shape[-1]
        heads = attn.num_heads
        q, k, v = F.linear(norm(block.ln1, t), attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (a.reshape(n, -1, heads, d // heads).transpose(1, 2) for a in (q, k, v))
        weights = torch.softmax(q @ k.transpose(-2, -1) / (d // heads) ** 0.5, dim=-1).detach()
        t = t + attn.out_proj((weights @ v).transpose(1, 2).reshape(n, -1, d))
        taps[f"blocks.{i}.add"] = t
        hidden = block.fc1(norm(block.ln2, t))
        taps[f"blocks.{i}.fc1"] = hidden
        t = t + block.fc2(block.act(hidden))
    return model.head(norm(model.norm, t).mean(dim=1)), taps


def keras_vit_twin(module: TinyViT):
    """The Keras model of a ``TinyViT`` (GELU MLPs, no position embedding) with its weights: Conv2D patches,
    LayerNormalization, MultiHeadAttention, Dense, Add, token mean. PyTorch packs q, k, v into one
    ``in_proj_weight`` (3d, d) and heads into columns; Keras keeps a (d, heads, head_dim) kernel per
    projection and an output kernel (heads, head_dim, d)."""
    import keras

    L = keras.layers
    d, heads = module.embed.out_channels, module.blocks[0].attn.num_heads
    hd = d // heads
    if module.pos is not None:
        raise ValueError("the Keras twin has no position embedding: make the module with position=False")
    numpy = {name: p.detach().numpy() for name, p in module.state_dict().items()}
    inputs = keras.Input(module.input_shape)
    x = L.Conv2D(d, 4, strides=4, name="embed")(inputs)
    x = L.Reshape((-1, d), name="tokens")(x)
    for i in range(len(module.blocks)):
        y = L.LayerNormalization(epsilon=module.blocks[i].ln1.eps, name=f"block{i}_ln1")(x)
        y = L.MultiHeadAttention(heads, hd, name=f"block{i}_attn")(y, y)
        x = L.Add(name=f"block{i}_add1")([x, y])
        y = L.LayerNormalization(epsilon=module.blocks[i].ln2.eps, name=f"block{i}_ln2")(x)
        y = L.Dense(module.blocks[i].fc1.out_features, activation="gelu", name=f"block{i}_fc1")(y)
        y = L.Dense(d, name=f"block{i}_fc2")(y)
        x = L.Add(name=f"block{i}_add2")([x, y])
    x = L.LayerNormalization(epsilon=module.norm.eps, name="norm")(x)
    x = L.GlobalAveragePooling1D(name="mean")(x)
    model = keras.Model(inputs, L.Dense(module.head.out_features, name="head")(x))
    model.get_layer("embed").set_weights([numpy["embed.weight"].transpose(2, 3, 1, 0), numpy["embed.bias"]])
    for name, prefix in [("norm", "norm")] + [
        (f"block{i}_ln{j}", f"blocks.{i}.ln{j}") for i in range(len(module.blocks)) for j in (1, 2)
    ]:
        model.get_layer(name).set_weights([numpy[f"{prefix}.weight"], numpy[f"{prefix}.bias"]])
    for name, prefix in [("head", "head")] + [
        (f"block{i}_fc{j}", f"blocks.{i}.fc{j}") for i in range(len(module.blocks)) for j in (1, 2)
    ]:
        model.get_layer(name).set_weights([numpy[f"{prefix}.weight"].T, numpy[f"{prefix}.bias"]])
    for i in range(len(module.blocks)):
        w, b = numpy[f"blocks.{i}.attn.in_proj_weight"], numpy[f"blocks.{i}.attn.in_proj_bias"]
        qkv = [
            (w[j * d : (j + 1) * d].T.reshape(d, heads, hd), b[j * d : (j + 1) * d].reshape(heads, hd))
            for j in range(3)
        ]
        out = (
            numpy[f"blocks.{i}.attn.out_proj.weight"].T.reshape(heads, hd, d),
            numpy[f"blocks.{i}.attn.out_proj.bias"],
        )
        model.get_layer(f"block{i}_attn").set_weights([a for pair in qkv + [out] for a in pair])
    return model

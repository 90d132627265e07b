"""Fast, accurate CIFAR-10 training in plain PyTorch, for the study subjects (recipes/subjects.py).

The ideas are those of Keller Jordan's airbench (arXiv 2404.00498, "94 % on CIFAR-10 in 3.29 seconds on a
single GPU"), written anew here: a fixed whitening layer (2x2 patches, PCA of the training patches, each
direction and its negation), three conv-pool-BN-GELU blocks with identity-initialised convolutions, batch
norm with frozen scale and fast running statistics, Nesterov SGD with a large rate on the norm biases, label
smoothing, a warm-up then linear decay, Lookahead (every 5 steps the weights are pulled to a running average
whose weight grows as the rate falls, and the run ends on that average), alternating flips and 2-pixel
reflected shifts. Training runs channels-last (1.75x faster convolutions on a CPU). Two architectures:

- ``airbench``: the subject copies (widths 64-256-256, ~2 M parameters);
- ``resbench``: the fault extractor, another architecture (ReLU, residual blocks, widths 64-128-256, no
  whitening layer), so its judgements do not share the copies' inductive bias.

The file contract (docs/design.md, "Study subjects"): images in [0, 1], NCHW, normalisation inside the model;
the saved ``.pt2`` loads with ``torch.export.load(path).module()`` and is what ``idcgen --model`` reads.

Training checkpoints after every epoch (the ``checkpoint`` file: weights, optimiser, epoch, settings) and resumes
from it. Every
random draw of an epoch (batch order, flips, shifts) comes from a generator seeded by (random state, epoch),
so a run killed mid-epoch and resumed repeats that epoch exactly and ends where an uninterrupted run ends.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

#: CIFAR-10's per-channel training mean and standard deviation (of images in [0, 1])
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class Recipe:
    """Training settings. The optimiser's figures are airbench94's (batch 1,024, Nesterov momentum 0.85,
    rate 11.5 and decay 0.0153 per 1,024 examples on its summed-loss scale, batch-norm biases 64x the rate, label
    smoothing 0.2), here on a mean loss: the same step per example."""

    epochs: int = 10
    batch_size: int = 1024
    lr: float = 11.5
    momentum: float = 0.85
    weight_decay: float = 0.0153
    bias_scaler: float = 64.0
    label_smoothing: float = 0.2
    whiten_bias_epochs: int = 3
    shift: int = 2
    warmup: float = 0.23  # share of the steps spent rising from 0.2x to the full rate; then down to 0.07x
    bf16: bool = True  # bfloat16 autocast in training (1.5x on a CPU with AVX-512 BF16); the export is fp32


class Normalise(nn.Module):
    """Images in [0, 1] to CIFAR-10's standardised scale: normalisation inside the model (the file contract)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1))

    def forward(self, x):
        return (x - self.mean) / self.std


def _norm(width: int) -> nn.BatchNorm2d:
    """Batch norm with a frozen unit scale (only the bias learns) and fast running statistics: torch's momentum
    is the new batch's weight, 0.4 (airbench's 0.6 is the running value's)."""
    bn = nn.BatchNorm2d(width, momentum=0.4, eps=1e-12)
    bn.weight.requires_grad_(False)
    return bn


def _conv(c_in: int, c_out: int) -> nn.Conv2d:
    """A 3x3 convolution without bias whose first filters start as the identity."""
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[: min(c_in, c_out)])
    return conv


def _read_out(module: nn.Module, features: torch.Tensor) -> torch.Tensor:
    """The linear head's logits times the network's logit scale; a scale of 1 (folded into the head's weights
    for export) leaves the head the graph's last op, where idcgen looks for a classifier's logits."""
    logits = module.head(features)
    return logits if module.logit_scale == 1 else logits * module.logit_scale


class ConvGroup(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv1, self.pool, self.norm1 = _conv(c_in, c_out), nn.MaxPool2d(2), _norm(c_out)
        self.conv2, self.norm2 = _conv(c_out, c_out), _norm(c_out)

    def forward(self, x):
        x = F.gelu(self.norm1(self.pool(self.conv1(x))))
        return F.gelu(self.norm2(self.conv2(x)))


class AirBench(nn.Module):
    """The subjects' network: whitening, three conv groups, a global max pool, a linear read-out scaled 1/9."""

    input_shape = (3, 32, 32)

    def __init__(self, widths=(64, 256, 256)):
        super().__init__()
        self.normalise = Normalise()
        self.whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True)
        self.whiten.weight.requires_grad_(False)
        self.group1 = ConvGroup(24, widths[0])
        self.group2 = ConvGroup(widths[0], widths[1])
        self.group3 = ConvGroup(widths[1], widths[2])
        self.pool = nn.MaxPool2d(3)
        self.head = nn.Linear(widths[2], 10, bias=False)
        self.logit_scale = 1 / 9

    def forward(self, x):
        x = F.gelu(self.whiten(self.normalise(x)))
        x = self.group3(self.group2(self.group1(x)))
        return _read_out(self, torch.flatten(self.pool(x), 1))

    def init_whitening(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """The whitening filters from the 2x2 patches of ``images`` (n, 3, 32, 32) in [0, 1]: each principal
        direction scaled by 1/sqrt(its variance), and its negation."""
        patches = self.normalise(images).unfold(2, 2, 1).unfold(3, 2, 1)  # n, 3, 31, 31, 2, 2
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 12).double()
        patches = patches - patches.mean(0)
        values, vectors = torch.linalg.eigh(patches.T @ patches / len(patches))
        filters = (vectors.T / torch.sqrt(values + eps)[:, None]).flip(0).reshape(12, 3, 2, 2).float()
        with torch.no_grad():
            self.whiten.weight.copy_(torch.cat([filters, -filters]))
            self.whiten.bias.zero_()


class ResidualGroup(nn.Module):
    """conv-pool-BN-ReLU, then a residual pair of conv-BN-ReLU."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv, self.pool, self.norm = _conv(c_in, c_out), nn.MaxPool2d(2), _norm(c_out)
        self.conv1, self.norm1 = _conv(c_out, c_out), _norm(c_out)
        self.conv2, self.norm2 = _conv(c_out, c_out), _norm(c_out)

    def forward(self, x):
        x = F.relu(self.norm(self.pool(self.conv(x))))
        y = F.relu(self.norm1(self.conv1(x)))
        return x + F.relu(self.norm2(self.conv2(y)))


class ResBench(nn.Module):
    """The extractor's network: a plain 3x3 stem, three residual groups, a global max pool, a linear read-out."""

    input_shape = (3, 32, 32)

    def __init__(self, widths=(64, 128, 256)):
        super().__init__()
        self.normalise = Normalise()
        self.stem = _conv(3, 48)
        self.stem_norm = _norm(48)
        self.group1 = ResidualGroup(48, widths[0])
        self.group2 = ResidualGroup(widths[0], widths[1])
        self.group3 = ResidualGroup(widths[1], widths[2])
        self.pool = nn.MaxPool2d(4)
        self.head = nn.Linear(widths[2], 10, bias=False)
        self.logit_scale = 1 / 9

    def forward(self, x):
        x = F.relu(self.stem_norm(self.stem(self.normalise(x))))
        x = self.group3(self.group2(self.group1(x)))
        return _read_out(self, torch.flatten(self.pool(x), 1))

    def init_whitening(self, images: torch.Tensor) -> None:  # no whitening layer: nothing to fit
        pass


class AirBenchWide(AirBench):
    """airbench95's widths (128-384-384): about 2.5x the compute of a step, for a point or more of accuracy."""

    def __init__(self):
        super().__init__(widths=(128, 384, 384))


NETWORKS = {"airbench": AirBench, "airbench-wide": AirBenchWide, "resbench": ResBench}
#: the rate (per 1,024 examples) each network trains at when the recipe does not say: airbench95's for the wide one
RATES = {"airbench-wide": 10.0}


def recipe_for(architecture: str, epochs: int) -> Recipe:
    """The training settings of ``architecture`` for ``epochs`` epochs."""
    return Recipe(epochs=epochs, lr=RATES.get(architecture, Recipe.lr))


def _augment(images: torch.Tensor, flip: torch.Tensor, shift: int, generator: torch.Generator) -> torch.Tensor:
    """Each image flipped where ``flip`` says and shifted by up to ``shift`` pixels (reflected padding)."""
    out = torch.where(flip[:, None, None, None], images.flip(3), images)
    if shift:
        padded = F.pad(out, (shift,) * 4, mode="reflect")
        n, size = len(images), images.shape[-1]
        dx = torch.randint(0, 2 * shift + 1, (n,), generator=generator)
        dy = torch.randint(0, 2 * shift + 1, (n,), generator=generator)
        rows = (dy[:, None] + torch.arange(size))[:, None, :, None].expand(n, 3, size, size + 2 * shift)
        out = padded.gather(2, rows)
        cols = (dx[:, None] + torch.arange(size))[:, None, None, :].expand(n, 3, size, size)
        out = out.gather(3, cols)
    return out


def _rate_factor(step: int, total: int, warmup: float) -> float:
    return float(np.interp(step, [0, int(warmup * total), total], [0.2, 1.0, 0.07]))


def _optimizer(module: nn.Module, recipe: Recipe) -> torch.optim.SGD:
    """Nesterov SGD, the rates airbench's summed-loss figures give on a mean loss; decay scaled so that each
    step shrinks a weight by the same share whatever the rate. Only the batch norms' biases take the large
    rate (the whitening bias learns at the common one)."""
    scale = recipe.batch_size * (1 + 1 / (1 - recipe.momentum))  # airbench's "kilostep" scale
    lr = recipe.lr / scale * recipe.batch_size
    decay = recipe.weight_decay * recipe.batch_size / scale
    norms = {id(p) for m in module.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()}
    biases = [p for p in module.parameters() if p.requires_grad and id(p) in norms]
    others = [p for p in module.parameters() if p.requires_grad and id(p) not in norms]
    bias_lr = lr * recipe.bias_scaler
    groups = [
        {"params": biases, "lr": bias_lr, "weight_decay": decay / bias_lr, "initial_lr": bias_lr},
        {"params": others, "lr": lr, "weight_decay": decay / lr, "initial_lr": lr},
    ]
    return torch.optim.SGD(groups, momentum=recipe.momentum, nesterov=True)


class Lookahead:
    """Every ``period`` steps, the floating-point state (weights and running statistics) moves to an average
    that follows it with weight ``decay`` on the past, and the network restarts from that average. The decay
    grows with the cube of the run's progress (0 at the start, 0.95^5 at the end): late, noisy steps are
    averaged, early ones are not."""

    period = 5

    def __init__(self, module: nn.Module, total: int):
        self.total = total
        self.average = {k: v.detach().clone() for k, v in module.state_dict().items() if v.is_floating_point()}

    def step(self, module: nn.Module, step: int) -> None:
        """After optimiser step ``step`` (1-based); the last step makes the average the network."""
        if step % self.period and step < self.total:
            return
        decay = 1.0 if step >= self.total else 0.95**5 * (step / self.total) ** 3
        state = module.state_dict()
        with torch.no_grad():
            for name, average in self.average.items():
                average.lerp_(state[name], 1 - decay)
                state[name].copy_(average)


def train(
    architecture: str,
    x: np.ndarray,
    y: np.ndarray,
    *,
    seed: int,
    recipe: Recipe = Recipe(),
    checkpoint: Path | None = None,
    stop_after: int | None = None,
    progress: bool = True,
    log=print,
) -> tuple[nn.Module, dict]:
    """Train ``architecture`` on images ``x`` (n, 32, 32, 3) in [0, 1] with labels ``y`` and random state
    ``seed``, resuming from ``checkpoint`` when it exists and writing it after every epoch. ``stop_after``
    ends the process' work after that many epochs in total (a test's stand-in for a kill). Returns the module
    in eval mode and {"epochs", "seconds"} (seconds summed over resumed parts)."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    module = NETWORKS[architecture]()
    images = torch.as_tensor(np.ascontiguousarray(np.asarray(x, np.float32).transpose(0, 3, 1, 2)))
    labels = torch.as_tensor(np.asarray(y, np.int64))
    module.init_whitening(images[torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:5000]])
    module.to(memory_format=torch.channels_last)
    optimizer = _optimizer(module, recipe)
    steps_per_epoch = max(len(images) // recipe.batch_size, 1)  # the last, partial batch dropped
    total = recipe.epochs * steps_per_epoch
    lookahead = Lookahead(module, total)
    flip_mask = torch.rand(len(images), generator=torch.Generator().manual_seed(seed)) < 0.5
    state = {"epoch": 0, "seconds": 0.0}
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if saved["recipe"] != asdict(recipe) or saved["architecture"] != architecture or saved["seed"] != seed:
            raise SystemExit(f"{checkpoint} was made with other settings; delete it to start afresh")
        module.load_state_dict(saved["module"])
        optimizer.load_state_dict(saved["optimizer"])
        lookahead.average = saved["lookahead"]
        state = {"epoch": saved["epoch"], "seconds": saved["seconds"]}
        log(f"  resumed from {checkpoint.name} after epoch {state['epoch']}")
    module.train()
    while state["epoch"] < recipe.epochs and (stop_after is None or state["epoch"] < stop_after):
        epoch, started = state["epoch"], time.perf_counter()
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(len(images), generator=generator)
        if isinstance(module, AirBench):  # the whitening bias learns in the first epochs only
            module.whiten.bias.requires_grad_(epoch < recipe.whiten_bias_epochs)
        bar = tqdm(range(steps_per_epoch), desc=f"epoch {epoch + 1}/{recipe.epochs}", disable=not progress)
        loss_sum = correct = 0.0
        for step in bar:
            idx = order[step * recipe.batch_size : (step + 1) * recipe.batch_size]
            flip = flip_mask[idx] ^ bool(epoch % 2)  # alternating flips: every image seen both ways in 2 epochs
            batch = _augment(images[idx], flip, recipe.shift, generator).contiguous(memory_format=torch.channels_last)
            factor = _rate_factor(epoch * steps_per_epoch + step, total, recipe.warmup)
            for group in optimizer.param_groups:
                group["lr"] = group["initial_lr"] * factor
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.bf16):
                outputs = module(batch)
                loss = F.cross_entropy(outputs.float(), labels[idx], label_smoothing=recipe.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            lookahead.step(module, epoch * steps_per_epoch + step + 1)
            loss_sum += float(loss.detach()) * len(idx)
            correct += float((outputs.argmax(1) == labels[idx]).sum())
        state = {"epoch": epoch + 1, "seconds": state["seconds"] + time.perf_counter() - started}
        seen = min(steps_per_epoch * recipe.batch_size, len(images))
        log(
            f"  epoch {epoch + 1}/{recipe.epochs}: loss {loss_sum / seen:.3f}, "
            f"train accuracy {correct / seen:.2%} ({time.perf_counter() - started:.0f} s)"
        )
        if checkpoint is not None:
            _save_atomic(
                {
                    "module": module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "lookahead": lookahead.average,
                    "recipe": asdict(recipe),
                    "architecture": architecture,
                    "seed": seed,
                    **state,
                },
                checkpoint,
            )
    module.eval().to(memory_format=torch.contiguous_format)
    return module, {"epochs": state["epoch"], "seconds": round(state["seconds"], 1)}


def _save_atomic(obj, path: Path) -> None:
    """torch.save to a temporary file, then rename: a kill mid-write leaves the previous checkpoint whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save(obj, partial)
    os.replace(partial, path)


def accuracy(module: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 1000) -> float:
    """Top-1 accuracy of ``module`` as it is (no test-time augmentation) on images (n, 32, 32, 3) in [0, 1]."""
    module.eval()
    right = 0
    with torch.inference_mode():
        for start in range(0, len(x), batch_size):
            batch = torch.as_tensor(np.asarray(x[start : start + batch_size], np.float32).transpose(0, 3, 1, 2))
            right += int((module(batch).argmax(1).numpy() == np.asarray(y[start : start + batch_size])).sum())
    return right / max(len(x), 1)


def export(module: nn.Module, path: Path) -> None:
    """``module`` as a torch.export program: ``torch.export.load(path).module()`` runs it on NCHW [0, 1] images."""
    module = copy.deepcopy(module).eval()
    with torch.no_grad():  # the logit scale folded into the head: the same outputs, the head last
        module.head.weight.mul_(module.logit_scale)
    module.logit_scale = 1
    example = torch.zeros(2, *module.input_shape)
    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.pt2")
    torch.export.save(program, partial)
    os.replace(partial, path)

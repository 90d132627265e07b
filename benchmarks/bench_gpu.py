"""idcgen on a GPU against the same GPU's raw speed, and against the machine's CPU (issue 31). One JSON line per
measurement on stdout (and in ``--out``), each with the card, driver and torch version:

1. analysis (relevance, activations, clusters) of CIFAR-size images (32x32x3, synthetic: the speed does not
   depend on the pixels) on the width-64 CIFAR ResNet-18 at ``layer3`` and ``layer4``, against a raw
   forward + backward (the gradient of the top logit to the input, what a relevance pass needs) of the
   same module over the same images at the same batch; the CPU's analysis of a subset, and whether the two
   devices find the same important neurons, k and centroids (within 1e-3);
2. fuzz execs/s at several batch sizes (numpy mutators, on the CPU) against the GPU's raw forward rate at
   the same batch, and the loop's ceiling: the same loop on the same images with a model that costs next to
   nothing (what the CPU side of the loop alone sustains; the GPU ratio cannot exceed ceiling / raw forward);
3. ResNet-50 and ViT-B/16-size models at 224x224 with random weights on synthetic images: raw forward +
   backward, analysis, fuzz execs/s.

    python benchmarks/bench_gpu.py                  # on the GPU machine (torch + numpy + idcgen only)
    python benchmarks/bench_gpu.py --quick          # tiny sizes: a smoke run on any CPU

The models are written here in plain PyTorch (torchvision need not be importable). Without a GPU every
measurement runs on the CPU. The GPU runs in fp32 unless ``--precision`` says otherwise (the forward-only
work only; analyses are always fp32).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from idcgen.framework.device import ieee_fp32  # noqa: E402
from idcgen.framework.torch_zoo import ResNet18  # noqa: E402  (torch and numpy only, as this script needs)
from record import record  # noqa: E402  (benchmarks/record.py: one JSON line per figure, results/bench_gpu.jsonl)

#: numpy mutators (idcgen/fuzz/mutators): no albumentations needed on the GPU machine
MUTATORS = "gauss,random_pixels,brightness,contrast"


# ---- the models, in plain PyTorch (the CIFAR ResNet-18 is idcgen's, torch_zoo.ResNet18) --------------------
class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = mid * 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 (ImageNet stem: 7x7 stride 2, max pooling), stages of 3, 4, 6, 3 bottlenecks."""

    def __init__(self, width=64, size=224, classes=1000):
        super().__init__()
        self.input_shape = (size, size, 3)
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        cin, stages = width, []
        for i, (blocks, stride) in enumerate(zip((3, 4, 6, 3), (1, 2, 2, 2))):
            mid = width * 2**i
            stage = [Bottleneck(cin, mid, stride)] + [Bottleneck(mid * 4, mid, 1) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            cin = mid * 4
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    """ViT-B/16 (patch 16, 768 dimensions, 12 blocks of 12 heads) with a class token."""

    def __init__(self, dim=768, depth=12, heads=12, patch=16, size=224, classes=1000):
        super().__init__()
        self.input_shape = (size, size, 3)
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# ---- measuring ----------------------------------------------------------------------------------------
def machine() -> dict:
    """The card, driver and versions every line carries."""
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
    }
    if torch.cuda.is_available():
        info["card"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        # fp32 convolutions run on TF32 tensor cores unless this is off (cuDNN's default: on): what "fp32" means
        info["cudnn_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        info["matmul_precision"] = torch.get_float32_matmul_precision()
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    else:
        info.update(card=None, driver=None, cuda=None)
    return info


class Out:
    def __init__(self, path: Path | None):
        self.base, self.path = machine(), path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def __call__(self, **line):
        text = json.dumps(dict(line, **self.base))
        print(text, flush=True)
        figure = {k: v for k, v in line.items() if k not in ("figure", "value", "unit")}
        record(
            str(line.get("figure", line.get("what", "measurement"))),
            line.get("value"),
            unit=str(line.get("unit", "")),
            **figure,
            **self.base,
        )
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(text + "\n")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_rates(module, x: np.ndarray, batch: int, device, precision="fp32") -> dict:
    """The module alone on ``device``, images already there: forward inputs/s (inference) and forward +
    backward (the top logit's gradient to the input) inputs/s, at ``batch`` (``x`` repeated to fill it)."""
    module = module.to(device).eval()
    for p in module.parameters():
        p.requires_grad_(False)
    images = torch.as_tensor(np.resize(x, (batch, *x.shape[1:]))).permute(0, 3, 1, 2).contiguous().to(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else torch.autocast(device.type, enabled=False)

    def forward():
        with torch.inference_mode(), autocast:
            module(images)

    def backward():
        inp = images.clone().requires_grad_(True)
        with autocast:
            top = module(inp).max(dim=1).values.sum()
        torch.autograd.grad(top, inp)

    rates = {}
    # tf32: torch's own default on a GPU, timed for comparison; idcgen's fp32 turns it off (ieee_fp32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        for name, step in (("forward", forward), ("forward_backward", backward)):
            step()
            sync(device)
            reps, start = 0, time.perf_counter()
            while reps < 3 or time.perf_counter() - start < 2.0:
                step()
                reps += 1
            sync(device)
            rates[name] = reps * batch / (time.perf_counter() - start)
    finally:
        ieee_fp32(torch)
    return rates


def timed_analysis(network, x, layer):
    from idcgen.analysis import analyze

    analyze(network, x[: min(len(x), 64)], layer=layer, m=8, clusters=[2, 3], progress=False)  # warm-up
    sync(network.device)
    start = time.perf_counter()
    found = analyze(network, x, layer=layer, m=8, progress=False)
    sync(network.device)
    return found, time.perf_counter() - start


def fuzz_rate(analysis, seeds, batch: int, execs: int) -> tuple[float, dict]:
    """Execs/s of the fuzz loop at ``batch`` mutants a step (numpy mutators on the CPU, the forward on the
    network's device), the steps after the first (which traces) counted; and the shares of their time by
    phase (mutate, model, checks, record: what a faster device can save is the model's)."""
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import parse_mutators

    with tempfile.TemporaryDirectory() as tmp:
        fuzzer = Fuzzer(
            analysis, mutators=parse_mutators(MUTATORS), batch_size=batch, random_state=0, oracle="prediction-change"
        )
        campaign = fuzzer.start(seeds, None, Path(tmp) / "c", budget=batch)
        fuzzer.run(campaign, budget=batch, progress=False)  # warm-up step
        t0, e0, p0 = campaign.elapsed, campaign.execs, dict(campaign.phase_seconds)
        fuzzer.run(campaign, budget=campaign.execs + max(execs, 2 * batch), progress=False)
        spent = {k: v - p0[k] for k, v in campaign.phase_seconds.items()}
        total = sum(spent.values())
        shares = {k: round(v / total, 3) for k, v in spent.items()}
        return (campaign.execs - e0) / (campaign.elapsed - t0), shares


def compare(a, b) -> dict:
    """Whether two analyses found the same important neurons and k, and their centroids' largest difference."""
    same_k = [c.k for c in a.clusters] == [c.k for c in b.clusters]
    diff = (
        max(
            float(np.abs(np.asarray(p.centroids) - np.asarray(q.centroids)).max())
            for p, q in zip(a.clusters, b.clusters)
        )
        if same_k
        else None
    )
    return {"same_neurons": a.neurons.tolist() == b.neurons.tolist(), "same_k": same_k, "centroid_max_diff": diff}


def bench_model(out, name, make, n_gpu, n_cpu, layers, batches, execs, devices, precision, cpu_execs):
    """Every measurement of one model: raw rates, analyses per layer (and the CPU's agreement), fuzz rates
    (on the CPU one rate, in the time a GPU session has: over ``cpu_execs`` execs at a batch of at most an
    eighth of them)."""
    from idcgen.framework import Network

    torch.manual_seed(0)
    module = make().eval()
    rng = np.random.default_rng(0)
    shape = module.input_shape
    x = rng.random((max(n_gpu, n_cpu), *shape), dtype=np.float32)
    found_on = {}
    for device in devices:
        n = n_gpu if device.type == "cuda" else n_cpu
        try:
            network = Network(module, device=device)
            batch = network.relevance_batch_size()
            rates = raw_rates(make_like(module, make), x, batch, device)
            out(
                what="raw",
                model=name,
                device=str(device),
                batch=batch,
                precision="fp32",
                forward_per_s=round(rates["forward"], 1),
                forward_backward_per_s=round(rates["forward_backward"], 1),
            )
            for other in ("tf32", precision) if device.type == "cuda" else ():
                if other != "fp32":
                    rates16 = raw_rates(make_like(module, make), x, batch, device, other)
                    out(
                        what="raw",
                        model=name,
                        device=str(device),
                        batch=batch,
                        precision=other,
                        forward_per_s=round(rates16["forward"], 1),
                        forward_backward_per_s=round(rates16["forward_backward"], 1),
                    )
            for layer in layers or [network.default_layer()]:
                found, seconds = timed_analysis(network, x[:n], layer)
                found_on[(device.type, layer)] = found
                out(
                    what="analysis",
                    model=name,
                    device=str(device),
                    layer=found.layer,
                    images=n,
                    seconds=round(seconds, 3),
                    images_per_s=round(n / seconds, 1),
                    relevance_seconds=round(found.timings.get("relevance", float("nan")), 3),
                    relevance_batch=network.relevance_batch_size(),
                    vs_forward_backward=round((n / rates["forward_backward"]) / seconds, 3),
                )
            on_gpu = device.type == "cuda"
            analysis = found_on[(device.type, (layers or [network.default_layer()])[-1])]
            for b in batches if on_gpu else [min(batches[0], max(16, cpu_execs // 8))]:
                loop, shares = fuzz_rate(analysis, x[:64], b, execs if on_gpu else cpu_execs)
                raw = raw_rates(make_like(module, make), x, b, device)["forward"] if b != batch else rates["forward"]
                out(
                    what="fuzz",
                    model=name,
                    device=str(device),
                    batch=b,
                    execs_per_s=round(loop, 1),
                    raw_forward_per_s=round(raw, 1),
                    ratio=round(loop / raw, 3),
                    phase_shares=shares,
                    mutators=MUTATORS,
                )
        except Exception as exc:  # one model or device failing leaves the others measured
            out(what="error", model=name, device=str(device), error=f"{type(exc).__name__}: {exc}"[:500])
    for layer in layers or []:
        if ("cuda", layer) in found_on and ("cpu", layer) in found_on and n_cpu == n_gpu:
            out(
                what="agreement",
                model=name,
                layer=layer,
                images=n_cpu,
                **compare(found_on[("cuda", layer)], found_on[("cpu", layer)]),
            )


class Free(nn.Module):
    """A model that costs next to nothing (a strided 3x3 convolution to 4 channels, two small dense layers):
    the fuzz loop around it runs at the speed of its CPU side (mutators, validity, coverage, corpus)."""

    def __init__(self, size=32):
        super().__init__()
        self.input_shape = (size, size, 3)
        self.conv = nn.Conv2d(3, 4, 3, stride=size // 8)
        self.fc = nn.Linear(4 * ((size - 3) // (size // 8) + 1) ** 2, 16)
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        return self.out(F.relu(self.fc(torch.flatten(F.relu(self.conv(x)), 1))))


def bench_ceiling(out, size, batches, execs):
    """The fuzz loop's own ceiling on ``size`` x ``size`` images: execs/s with the :class:`Free` model on the
    CPU (its forward is a few percent of the step), at each batch size."""
    from idcgen.analysis import analyze
    from idcgen.framework import Network

    torch.manual_seed(0)
    x = np.random.default_rng(0).random((512, size, size, 3), dtype=np.float32)
    try:
        network = Network(Free(size), device="cpu")
        analysis = analyze(network, x, m=8, progress=False)
        for b in batches:
            rate, shares = fuzz_rate(analysis, x[:64], b, execs)
            out(
                what="loop_ceiling",
                model=f"free-{size}",
                device="cpu",
                batch=b,
                execs_per_s=round(rate, 1),
                phase_shares=shares,
                mutators=MUTATORS,
            )
    except Exception as exc:
        out(what="error", model=f"free-{size}", device="cpu", error=f"{type(exc).__name__}: {exc}"[:500])


def make_like(module, make):
    """A fresh copy of the module with the same weights (raw_rates moves and freezes its own)."""
    twin = make()
    twin.load_state_dict(module.state_dict())
    return twin


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny models and image counts: a smoke run on a CPU")
    parser.add_argument("--images", type=int, default=50_000, help="CIFAR-size images analysed on the GPU")
    parser.add_argument("--cpu-images", type=int, default=2_000, help="images analysed on the CPU (a rate)")
    parser.add_argument("--large-images", type=int, default=5_000, help="224x224 images analysed on the GPU")
    parser.add_argument("--large-cpu-images", type=int, default=64)
    parser.add_argument("--batches", default="256,1024,4096", help="fuzz batch sizes tried")
    parser.add_argument("--execs", type=int, default=16_384, help="fuzz execs timed per batch size")
    parser.add_argument(
        "--cpu-execs", type=int, default=2_048, help="fuzz execs timed on the CPU (a quarter for 224x224 models)"
    )
    parser.add_argument("--precision", default="fp32", help="also time the raw passes in bf16 or fp16")
    parser.add_argument("--only", default="ceiling,resnet18,resnet50,vit", help="which measurements")
    parser.add_argument("--no-cpu", action="store_true", help="leave out the CPU measurements on a GPU machine")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON lines here")
    args = parser.parse_args()

    gpu = torch.cuda.is_available()
    if gpu:
        ieee_fp32(torch)  # what idcgen's fp32 is on a GPU, for the raw rates too; every line records it
    devices = ([torch.device("cuda", 0)] if gpu else []) + ([] if gpu and args.no_cpu else [torch.device("cpu")])
    out = Out(args.out)
    batches = [int(b) for b in args.batches.split(",")]
    if args.quick:
        specs = {
            "resnet18": (lambda: ResNet18(width=8), 64, 64, ["layer3", "layer4"], [32], 64),
            "resnet50": (lambda: ResNet50(width=8, size=64), 16, 16, ["layer4"], [16], 32),
            "vit": (lambda: ViT(dim=32, depth=2, heads=2, patch=8, size=32), 16, 16, None, [16], 32),
        }
    else:
        cpu_n = args.cpu_images if not gpu else min(args.cpu_images, args.images)
        specs = {
            "resnet18": (lambda: ResNet18(width=64), args.images, cpu_n, ["layer3", "layer4"], batches, args.execs),
            "resnet50": (
                lambda: ResNet50(),
                args.large_images,
                args.large_cpu_images,
                ["layer4"],
                batches[:2],
                args.execs // 4,
            ),
            "vit": (lambda: ViT(), args.large_images, args.large_cpu_images, None, batches[:2], args.execs // 4),
        }
    out(what="start", devices=[str(d) for d in devices], quick=args.quick)
    for name in args.only.split(","):
        if name == "ceiling":
            bench_ceiling(out, 32, [32] if args.quick else batches, 64 if args.quick else args.execs)
            continue
        make, n_gpu, n_cpu, layers, model_batches, execs = specs[name]
        bench_model(
            out,
            name,
            make,
            n_gpu if gpu else n_cpu,
            n_cpu,
            layers,
            model_batches,
            execs,
            devices,
            args.precision,
            64 if args.quick else args.cpu_execs // (1 if name == "resnet18" else 4),
        )
        if gpu and not args.no_cpu and name == "resnet18":  # the agreement needs the same images on both
            bench_agreement(out, make, n_cpu)


def bench_agreement(out, make, n):
    """The same analysis (the same ``n`` images) on the GPU and on the CPU: the same important neurons and k,
    centroids within 1e-3, and the speed-up."""
    from idcgen.framework import Network

    torch.manual_seed(0)
    module = make().eval()
    x = np.random.default_rng(1).random((n, *module.input_shape), dtype=np.float32)
    for layer in ("layer3", "layer4"):
        try:
            found, seconds = {}, {}
            for device in (torch.device("cuda", 0), torch.device("cpu")):
                found[device.type], seconds[device.type] = timed_analysis(Network(module, device=device), x, layer)
            out(
                what="agreement",
                model="resnet18",
                layer=layer,
                images=n,
                speedup=round(seconds["cpu"] / seconds["cuda"], 2),
                **compare(found["cuda"], found["cpu"]),
            )
        except Exception as exc:
            out(what="error", model="resnet18", device="agreement", error=f"{type(exc).__name__}: {exc}"[:500])


if __name__ == "__main__":
    main()

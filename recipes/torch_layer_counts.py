"""Layers, hidden layers and subject layers of PyTorch models written as the model zoos write them
(tests/torch_styles.py), as a markdown table row per model, for docs/models.md ("PyTorch models as people
write them"). From the repository root:

    PYTHONPATH=. python recipes/torch_layer_counts.py
"""

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from torch_styles import ConvNeXt, EfficientNet, Masked, MobileNetV2, ResNet18, Windows  # noqa: E402

from idcgen.framework import as_network  # noqa: E402
from idcgen.framework.torch_zoo import LeNet5  # noqa: E402
from torch_twins import TinyViT, randomise  # noqa: E402

MODELS = {
    "torchvision-style ResNet-18": lambda: randomise(ResNet18()),
    "torchvision-style MobileNetV2": lambda: randomise(MobileNetV2()),
    "timm-style EfficientNet": lambda: randomise(EfficientNet()),
    "timm-style ConvNeXt": lambda: randomise(ConvNeXt("timm")),
    "HF-style ConvNeXt": lambda: randomise(ConvNeXt("hf")),
    "Swin-style windows": lambda: Windows().eval(),
    "HF-style mask + indices": lambda: randomise(Masked()),
    "hand-written ViT (tests)": lambda: TinyViT().eval(),
    "idcgen zoo LeNet-5": lambda: LeNet5().eval(),
}


def first_line(error) -> str:
    return str(error).splitlines()[0][:70]


def row(name, make) -> str:
    torch.manual_seed(0)
    start = time.time()
    network = as_network(make())
    hidden = [s for s in network.layer_names() if network.is_hidden(s)]
    subject = network.subject_layers()
    x = np.random.default_rng(0).random((4, *network.input_shape), dtype=np.float32)
    try:
        network.forward(x, tuple(network.layer_names()))
        taps = "all tap"
    except Exception as error:  # the table reports it
        taps = "tap fails: " + first_line(error)
    try:
        network.relevance(subject[0])(x)
        relevance = "ok"
    except Exception as error:
        relevance = "fails: " + first_line(error)
    default = network.default_layer()
    return (
        f"| {name} | {len(network.layer_names())} | {len(hidden)} | {len(subject)} | {default} "
        f"({network.neuron_count(default)} neurons) | {taps} | {relevance} | {time.time() - start:.1f} s |"
    )


if __name__ == "__main__":
    for name, make in MODELS.items():
        try:
            print(row(name, make), flush=True)
        except Exception as error:
            print(f"| {name} | error: {first_line(error)} |", flush=True)

"""Train the PyTorch subjects (idcgen/framework/torch_zoo.py): a LeNet-5 on MNIST and a CIFAR ResNet-18 on
the CIFAR-10 in ../shared, in plain PyTorch (Adam, one-cycle rate, batch 128; shifts and flips for CIFAR-10).

    python recipes/train_torch.py [--models lenet5 resnet18] [--epochs N] [--width W] [--minutes M]
    python recipes/train_torch.py --models lenet5 --twin    # the PyTorch twin of outputs/models/lenet5.keras

Writes ``outputs/models/<name>_<dataset>.pt2`` (torch.export program: what `idcgen --model` reads) and
``.pt`` (TorchScript with its input shape), and ``outputs/train_torch/accuracy.{md,csv}`` with test accuracy,
epochs and seconds. ``--width`` sets the ResNet-18's base width (64 is the standard 11 M-parameter network;
the default 8 is what 2 shared CPU cores train in the time a session has); ``--minutes`` stops after the
epoch that passes it. ``--twin`` makes the LeNet-5 by copying the weights of the Keras LeNet-5 that
recipes/train_models.py trained (idcgen.framework.torch_zoo.from_keras) instead of training it.
"""

from __future__ import annotations

import argparse

from kit import OUTPUTS, command_line, load_data, load_model, write_table

SETTINGS = {
    "lenet5": {"dataset": "mnist", "epochs": 4, "lr": 2e-3, "augment": False},
    "resnet18": {"dataset": "cifar10", "epochs": 8, "lr": 2e-3, "augment": True},
}


def train_one(
    name: str, *, epochs: int | None, width: int, minutes: float | None, limit: int | None, twin: bool = False
) -> dict:
    import torch

    from idcgen.framework.torch_load import save_torchscript
    from idcgen.framework.torch_zoo import MODELS, accuracy, export_program, from_keras, train

    settings = SETTINGS[name]
    dataset = settings["dataset"]
    x, y = load_data("train", dataset, limit)
    x_test, y_test = load_data("test", dataset)
    torch.manual_seed(0)
    if twin:
        if name != "lenet5":
            raise SystemExit("--twin copies the Keras LeNet-5 only")
        module = from_keras(load_model("lenet5"))
        run = {"epochs": "twin of outputs/models/lenet5.keras", "seconds": 0.0}
    else:
        module = MODELS[name](input_shape=x.shape[1:], **({"width": width} if name == "resnet18" else {}))
        run = train(
            module,
            x,
            y,
            epochs=epochs or settings["epochs"],
            lr=settings["lr"],
            augment=settings["augment"],
            minutes=minutes,
        )
    folder = OUTPUTS / "models"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{name}_{dataset}"
    export_program(module, folder / f"{stem}.pt2")
    save_torchscript(module, folder / f"{stem}.pt", input_shape=x.shape[1:])
    parameters = sum(p.numel() for p in module.parameters())
    return {
        "model": stem,
        "parameters": parameters,
        "train inputs": len(x),
        "test accuracy %": round(100 * accuracy(module, x_test, y_test), 2),
        "epochs": run["epochs"],
        "seconds": run["seconds"],
        "file": f"outputs/models/{stem}.pt2",
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--width", type=int, default=8, help="ResNet-18 base width (64: the standard network)")
    parser.add_argument("--twin", action="store_true", help="LeNet-5: copy the Keras LeNet-5's weights instead")
    parser.add_argument("--minutes", type=float, default=None, help="stop after the epoch that passes this")
    parser.add_argument("--limit", type=int, default=None, help="first N training inputs only (a quick run)")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        rows.append(
            train_one(
                name, epochs=args.epochs, width=args.width, minutes=args.minutes, limit=args.limit, twin=args.twin
            )
        )
        print(rows[-1])
        path = write_table(
            OUTPUTS / "train_torch",
            f"accuracy_{name}",
            rows[-1:],
            title="PyTorch subjects",
            notes="Test accuracy on the full test split; training time on this machine.",
            command=command_line(),
        )
    print(f"written to {path}")


if __name__ == "__main__":
    main()

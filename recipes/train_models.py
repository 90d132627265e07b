"""Train LeNet-1, LeNet-4 and LeNet-5 with the paper's settings; the other recipes use them.

    python recipes/train_models.py [--models lenet1 lenet4 lenet5] [--dataset mnist|fashion-mnist|embedded-mnist] [--epochs 10]

Adadelta (lr 1.0, rho 0.95), batch 256, 10 epochs (the paper's DeepXplore models reached 98.3-99.0 %
on MNIST). Writes ``outputs/models/<name>.keras`` and ``outputs/train_models/accuracy.{md,csv}``.
"""

from __future__ import annotations

import argparse

from common import DATASETS, MODELS, OUTPUTS, Timer, command_line, mnist, model_path, write_table


def train_one(name: str, *, dataset: str = "mnist", epochs: int = 10, random_state: int = 0) -> dict:
    from idcgen.models import Network
    from idcgen.zoo import MODELS as ZOO, train
    x_train, y_train = mnist("train", dataset)
    x_test, y_test = mnist("test", dataset)
    model = ZOO[name]()
    with Timer() as t:
        train(model, x_train, y_train, epochs=epochs, batch_size=256, optimizer="adadelta", verbose=2,
              random_state=random_state)
    path = model_path(name, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    accuracy = float((Network(model).predict(x_test) == y_test).mean())
    print(f"{name} on {dataset}: test accuracy {accuracy:.2%} after {epochs} epochs ({t.seconds:.0f} s) -> {path}")
    return {"model": name, "dataset": dataset, "epochs": epochs, "params": model.count_params(),
            "test accuracy %": round(100 * accuracy, 2), "train seconds": round(t.seconds, 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--dataset", default="mnist", choices=DATASETS)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    rows = [train_one(name, dataset=args.dataset, epochs=args.epochs) for name in args.models]
    suffix = "" if args.dataset == "mnist" else "_" + args.dataset.replace("-", "_")
    write_table(OUTPUTS / "train_models", f"accuracy{suffix}", rows, title=f"LeNet models on {args.dataset}",
                command=command_line(),
                notes="Paper (DeepXplore's models, Table 1 of DeepImportance): 98.3-99.0 % on MNIST.")


if __name__ == "__main__":
    main()

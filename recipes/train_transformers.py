"""Train the CIFAR-10 transformer and modern-CNN subjects: a ViT-Tiny and a small ConvNeXt (issue 22).

    python recipes/train_transformers.py [--models vit_tiny convnext_micro efficientnet_b0 mobilenet_v3_small]
                                         [--epochs N] [--minutes M] [--limit N]

CPU time is scarce, so training is bounded by time: each model trains for ``--epochs`` epochs (the cosine
learning-rate schedule spans them) but stops after the first epoch that ends past ``--minutes`` of
training. AdamW (lr 1e-3 cosine-decayed, weight decay 0.05, as ViTs and ConvNeXts are trained), batch 128,
random flips and shifts of up to 4 pixels, CIFAR-10 from ../shared/data/cifar10 (idcgen's named dataset cifar10).
EfficientNet-B0 and MobileNetV3-Small (keras.applications, weights=None) take 0..255 images through their
own Rescaling and are fed them (not by default). Writes ``outputs/models/<name>.keras`` and
``outputs/train_models/accuracy_transformers.{md,csv}`` and ``history_transformers.{md,csv}``.
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import OUTPUTS, load_data, model_path
from kit.tables import write_training_tables
from kit.training import classifier_score, describe_classifier, flips_and_shifts, keras_epoch, train_epochs

SETTINGS = {
    "vit_tiny": {"epochs": 8, "batch_size": 128, "lr": 1e-3, "weight_decay": 0.05},
    "convnext_micro": {"epochs": 8, "batch_size": 128, "lr": 1e-3, "weight_decay": 0.05},
    # keras.applications models taking 0..255 images (their own Rescaling): fed x * 255
    "efficientnet_b0": {"epochs": 3, "batch_size": 128, "lr": 1e-3, "weight_decay": 0.05},
    "mobilenet_v3_small": {"epochs": 3, "batch_size": 128, "lr": 1e-3, "weight_decay": 0.05},
}


def train(
    name: str, *, epochs: int | None = None, minutes: float = 20.0, limit: int | None = None, random_state: int = 0
) -> dict:
    import keras

    from idcgen.framework.keras_zoo import TRANSFORMER_MODELS

    settings = dict(SETTINGS[name], **({"epochs": epochs} if epochs else {}))
    x_train, y_train = load_data("train", "cifar10", limit=limit)
    x_test, y_test = load_data("test", "cifar10")
    keras.utils.set_random_seed(random_state)
    rng = np.random.default_rng(random_state)
    model = TRANSFORMER_MODELS[name](random_state=random_state)
    from idcgen.framework.keras_convention import from_model

    scale = float(from_model(model).value_range[1])  # 255 for a model with its own Rescaling to 0..255 images
    if scale != 1.0:
        x_train, x_test = x_train * scale, x_test * scale
    steps = settings["epochs"] * -(-len(x_train) // settings["batch_size"])
    opt = keras.optimizers.AdamW(
        keras.optimizers.schedules.CosineDecay(settings["lr"], steps), weight_decay=settings["weight_decay"]
    )
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    path = model_path(name, "cifar10")
    path.parent.mkdir(parents=True, exist_ok=True)
    one_epoch = keras_epoch(model, x_train, y_train, settings["batch_size"], flips_and_shifts, rng)
    history = train_epochs(
        name,
        settings["epochs"],
        one_epoch,
        classifier_score(model, one_epoch, x_test, y_test),
        describe_classifier,
        stop=lambda seconds: seconds > 60 * minutes,
        after_epoch=lambda row: model.save(path),
    )  # a stopped run keeps its last epoch
    seconds, epoch = sum(h["epoch seconds"] for h in history), len(history)
    accuracy = history[-1]["test accuracy %"] / 100
    print(f"{name} on cifar10: test accuracy {accuracy:.2%} after {epoch} epochs ({seconds:.0f} s) -> {path}")
    return {
        "model": name,
        "dataset": "cifar10",
        "epochs": f"{epoch} of {settings['epochs']}",
        "params": model.count_params(),
        "optimizer": f"adamw lr {settings['lr']:g} cosine over {settings['epochs']} epochs, wd {settings['weight_decay']}",
        "batch": settings["batch_size"],
        "augmentation": "flips, shifts <= 4 px",
        "train images": len(x_train),
        "test accuracy %": round(100 * accuracy, 2),
        "train seconds": round(seconds, 1),
        "history": history,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["vit_tiny", "convnext_micro"], choices=list(SETTINGS))
    parser.add_argument("--epochs", type=int, default=None, help="default: SETTINGS (the schedule's length)")
    parser.add_argument("--minutes", type=float, default=20.0, help="stop after the epoch that passes this")
    parser.add_argument("--limit", type=int, default=None, help="first N training images (smoke runs)")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        row = train(name, epochs=args.epochs, minutes=args.minutes, limit=args.limit)
        rows.append(
            write_training_tables(
                OUTPUTS / "train_models",
                "transformers",
                "accuracy_transformers",
                row,
                name,
                title="CIFAR-10 transformers and modern CNNs",
                notes="Training bounded by time on 2 shared CPU cores (--minutes); training "
                "images are JPEG files, test images JPEG round-tripped (../shared/data/cifar10).",
            )
        )
    return rows


if __name__ == "__main__":
    main()

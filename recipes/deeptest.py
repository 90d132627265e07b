"""DeepTest's metamorphic testing of the three Daves (Tian et al., ICSE 2018), on the drive DeepTest used.

    python recipes/deeptest.py [--models dave2 dave2_norminit dave2_dropout] [--lambdas 1 2 ... 10]
                               [--budget 2240] [--seeds 224] [--parts grid sweep guided retrain retrain-all]
                               [--grid-stride 1]
                               [--random-states 0 1 ...] [--retrain-budget 8192] [--retrain-seeds 1024]

The models are the three Daves of ``recipes/train_models.py --dataset udacity`` (trained on the real
angles, blocked split: recipes/kit/data.py); the test frames are the 1,122 frames of test blocks 2 and 7.
The oracle is DeepTest's relation (idcgen.fuzz.deeptest): a transformed frame is an erroneous behaviour when
``(theta_t - theta_label)^2 > lambda * MSE``, with MSE the model's on the untransformed test frames.

- ``sweep``: every test frame transformed once by each of DeepTest's transforms (parameters drawn from
  DeepTest's ranges, ``TRANSFORMS``), erroneous behaviours counted per transform and per lambda; beside each
  count, how many of them come from frames whose untransformed version keeps the relation (the transform
  made the error, not the frame). Writes ``outputs/deeptest/sweep.{md,csv}`` and ``by_lambda.{md,csv}``.
- ``grid``: DeepTest's own standard (docs/results.md, "DeepTest's own standard"): its seven simple
  transformations at its ten parameter values each (``GRID``), applied to the 160x120 camera frame before
  the model's crop and resize, as DeepTest applied them to its frames; every ``--grid-stride``-th test frame
  under each of the 70 (transformation, value) pairs, for every model. Per pair: the MSE over its frames and
  its erroneous behaviours per lambda; a pair counts at epsilon only when its MSE stays within epsilon of the
  original frames' (DeepTest's Eq. 3: idcgen.fuzz.deeptest.erroneous_behaviours). Writes
  ``outputs/deeptest/grid/runs.csv`` (one row per model and pair), ``study.{md,csv}`` (the paper's Tables 7
  and 8 computed from it).
- ``guided``: fuzz campaigns on dave2 with every DeepTest transform as a mutator (chains combine transforms)
  and the DeepTest oracle at lambda 5, ``--budget`` execs from ``--seeds`` test frames, guided by IDC
  (idcgen), by neuron coverage (DeepTest's guidance) and unguided; beside them the single transforms of the
  sweep on the same seeds with the same number of execs. Writes ``outputs/deeptest/guided.{md,csv}``.

- ``retrain``: DeepTest's retraining and idcgen's on dave2: fine-tune for ``--retrain-epochs`` with N added
  frames labelled with their original angle: the mutants an IDC-guided campaign (``--retrain-budget`` execs
  from ``--retrain-seeds`` training frames) kept, as many training frames under one random transform each,
  or as many clean training frames (control); test MSE on clean and transformed test frames before and
  after. ``retrain-all``: every training frame once more, transformed or clean. Writes
  ``outputs/deeptest/retrain.{md,csv}`` and ``retrain_all.{md,csv}``.

``guided`` and the retraining parts run once per ``--random-states`` value. Each part's result per model is
kept in ``outputs/deeptest/<part>_<model>.json``: a run skips what is done (delete the file to redo it).
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

import numpy as np

from kit import (
    OUTPUTS,
    UDACITY_CROP,
    UDACITY_MODELS,
    UDACITY_RESIZE,
    Timer,
    command_line,
    load_model,
    save_json,
    udacity,
    write_csv,
    write_table,
)

RECIPE = "deeptest"
#: DeepTest's transforms with its parameter ranges, scaled from its 640x480 frames to fractions of the frame
#: (docs/results.md, "DeepTest's metamorphic testing" says where idcgen's transform differs from DeepTest's)
TRANSFORMS = {
    "translation": "shift(limit=0.16)",  # DeepTest: 10..100 px of 640 (0.016..0.156 of the width)
    "scale": "scale(low=1.5, high=6.0)",  # DeepTest: 1.5..6
    "shear": "shear(limit=45.0)",  # DeepTest: factor 0.1..1.0 = 5.7..45 degrees
    "rotation": "rotate(limit=30.0)",  # DeepTest: 3..30 degrees
    "contrast": "gain(low=1.2, high=3.0)",  # DeepTest: gain 1.2..3.0
    "brightness": "bias(low=0.0392, high=0.392)",  # DeepTest: bias 10..100 of 255
    "blur": "deeptest_blur",  # DeepTest's ten blur settings
    "fog": "fog",
    "rain": "rain",
}
LAMBDAS = tuple(range(1, 11))
GUIDE_LAMBDA = 5

#: DeepTest's parameter grid for its seven simple transformations (its Table 3, and its generators in the
#: ARiSE-Lab/deepTest repository): ten values each, applied to the camera frame before the model's crop and
#: resize. Pixel values are of DeepTest's 640x480 frames (``grid_transform`` scales them to ours), brightness
#: is of 8-bit values, blur kernels are in pixels of the frame it is applied to.
GRID = {
    "translation": tuple(10 * p for p in range(1, 11)),  # pixels right and down, both axes alike
    "scale": tuple(1 + 0.5 * p for p in range(1, 11)),  # the whole frame resized, then cropped as usual
    "shear": tuple(round(0.1 * p, 1) for p in range(1, 11)),  # x' = x - factor * y, about the top-left corner
    "rotation": tuple(3 * p for p in range(1, 11)),  # degrees, counter-clockwise about the centre
    "contrast": tuple(round(1 + 0.2 * p, 1) for p in range(1, 11)),  # gain
    "brightness": tuple(10 * p for p in range(1, 11)),  # bias added to 8-bit values
    # its ten blur settings (idcgen.fuzz.mutators.deeptest.DEEPTEST_BLURS; recipes import idcgen only in functions)
    "blur": tuple(
        f"{k} {s}"
        for k, s in (("average", 3), ("average", 4), ("average", 5), ("average", 6), ("gaussian", 3))
        + (("gaussian", 5), ("gaussian", 7), ("median", 3), ("median", 5), ("bilateral", 9))
    ),
}
#: DeepTest's thresholds: epsilon of Eq. 3 (rad^2) and the lambdas of its Table 7; Table 8 is at (5, 0.03)
EPSILONS = (0.01, 0.02, 0.03, 0.04, 0.05)
GRID_LAMBDAS = (1, 2, 3, 4, 5, 6, 8, 10)
PAPER_LAMBDA, PAPER_EPS = 5, 0.03
#: DeepTest's camera frames were 640 pixels wide
DEEPTEST_WIDTH = 640


def grid_transform(frame: np.ndarray, transformation: str, value) -> np.ndarray:
    """One uint8 camera frame (h, w, 3) under one of DeepTest's simple transformations at one value of its
    grid (``GRID``), computed with OpenCV as DeepTest's generators compute it; pixel parameters scaled by
    w / 640 (its frames were 640x480). Scale returns a larger frame (DeepTest cropped and resized it after)."""
    import cv2

    h, w = frame.shape[:2]
    frame = np.ascontiguousarray(frame, np.uint8)

    def warp(matrix) -> np.ndarray:
        return cv2.warpAffine(frame, np.float32(matrix), (w, h))  # bilinear, black outside

    if transformation == "translation":
        t = value * w / DEEPTEST_WIDTH
        return warp([[1, 0, t], [0, 1, t]])
    if transformation == "scale":
        return cv2.resize(frame, None, fx=value, fy=value, interpolation=cv2.INTER_CUBIC)
    if transformation == "shear":
        return warp([[1, -value, 0], [0, 1, 0]])
    if transformation == "rotation":
        return warp(cv2.getRotationMatrix2D((w / 2, h / 2), value, 1))
    if transformation == "contrast":
        return np.clip(np.rint(frame * np.float32(value)), 0, 255).astype(np.uint8)
    if transformation == "brightness":
        return np.clip(frame.astype(np.int16) + int(value), 0, 255).astype(np.uint8)
    if transformation == "blur":
        kind, size = value.split()
        size = int(size)
        if kind == "average":
            return cv2.blur(frame, (size, size))
        if kind == "gaussian":
            return cv2.GaussianBlur(frame, (size, size), 0)
        if kind == "median":
            return cv2.medianBlur(frame, size)
        return cv2.bilateralFilter(frame, size, 75, 75)
    raise ValueError(f"transformation must be one of {', '.join(GRID)}; got {transformation!r}")


def model_input(frames) -> np.ndarray:
    """Camera frames (uint8) as Dave-2 sees them: the top rows cut and the rest resized exactly as the
    recipes' ``udacity`` dataset reads its JPEGs (PIL, bilinear), float32 in [0, 1]."""
    from PIL import Image

    from idcgen.data.fitting import parse_crop, parse_resize

    top = parse_crop(UDACITY_CROP)[0]
    height, width = parse_resize(UDACITY_RESIZE)
    out = np.empty((len(frames), height, width, 3), np.float32)
    for i, frame in enumerate(frames):
        image = Image.fromarray(frame).crop((0, top, frame.shape[1], frame.shape[0]))
        out[i] = np.asarray(image.resize((width, height), Image.Resampling.BILINEAR), np.float32) / 255.0
    return out


def camera_frames(stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uint8 frames (n, 120, 160, 3), real angles, frame ids): every ``stride``-th test frame, in time order."""
    from PIL import Image

    from kit.data import read_angles, udacity_folder

    ids, angles = read_angles()
    angle_of = dict(zip(ids.tolist(), angles.tolist()))
    paths = sorted(udacity_folder("test").glob("*.jpg"))[::stride]
    frames = np.stack([np.asarray(Image.open(p).convert("RGB"), np.uint8) for p in paths])
    frame_ids = np.array([int(p.stem) for p in paths], np.int64)
    return frames, np.array([angle_of[i] for i in frame_ids.tolist()]), frame_ids


def grid(networks: dict, frames: np.ndarray, y: np.ndarray, lambdas=LAMBDAS) -> dict:
    """DeepTest's grid on the camera ``frames`` (angles ``y``) for every model of ``networks`` (name -> network):
    one row per (model, transformation, value) with the MSE over its frames and its erroneous behaviours per
    lambda, unfiltered (the epsilon filter is applied per pair from the two MSEs: ``grid_tables``)."""
    from idcgen.fuzz.deeptest import erroneous_behaviours

    clean = model_input(frames)
    mse = {name: float(np.mean((predict(net, clean) - y) ** 2)) for name, net in networks.items()}
    print(f"grid: {len(frames)} frames; MSE on them: {mse}", flush=True)
    rows = []
    for transformation, values in GRID.items():
        with Timer() as t:
            for value in values:
                x = model_input([grid_transform(f, transformation, value) for f in frames])
                for name, net in networks.items():
                    angles = predict(net, x)
                    row = {
                        "model": name,
                        "transformation": transformation,
                        "parameter": value,
                        "frames": len(frames),
                        "mse original": mse[name],
                        "mse transformed": float(np.mean((angles - y) ** 2)),
                    }
                    for lam in lambdas:
                        row[f"erroneous lambda={lam}"] = erroneous_behaviours(angles, y, mse=mse[name], lam=lam)
                    rows.append(row)
        print(f"grid: {transformation} in {t.seconds:.0f} s", flush=True)
    return {"frames": len(frames), "mse": mse, "rows": rows}


def grid_count(rows: list[dict], *, lam, eps=None) -> tuple[int, int]:
    """(erroneous behaviours, pairs counted) over ``rows`` of ``grid``: the rows whose pair passes the epsilon
    filter (DeepTest's Eq. 3; every row with ``eps`` None), their frames breaking the relation at ``lam``."""
    from idcgen.fuzz.deeptest import within_eps

    kept = [r for r in rows if eps is None or within_eps(float(r["mse transformed"]), float(r["mse original"]), eps)]
    return sum(int(r[f"erroneous lambda={lam}"]) for r in kept), len(kept)


def grid_tables(rows: list[dict], models: list[str]) -> list[dict]:
    """The long summary of ``grid``'s rows: per model (and all models together), the erroneous behaviours per
    transformation at DeepTest's Table 8 setting (lambda 5, epsilon 0.03; also unfiltered), and the totals
    over the seven transformations per epsilon at lambda 5 and per lambda at epsilon 0.03 (its Table 7)."""
    out = []
    for model in [*models, "all"]:
        mine = [r for r in rows if model in ("all", r["model"])]
        settings = [("8", PAPER_LAMBDA, eps, t) for t in GRID for eps in (PAPER_EPS, None)]
        settings += [("7", PAPER_LAMBDA, eps, "total") for eps in (*EPSILONS, None)]
        settings += [("7", lam, PAPER_EPS, "total") for lam in GRID_LAMBDAS]
        for table, lam, eps, transformation in settings:
            chosen = [r for r in mine if transformation in ("total", r["transformation"])]
            n, pairs = grid_count(chosen, lam=lam, eps=eps)
            out.append(
                {
                    "table": table,
                    "model": model,
                    "transformation": transformation,
                    "lambda": lam,
                    "eps": "none" if eps is None else eps,
                    "pairs counted": pairs,
                    "pairs": len(chosen),
                    "erroneous": n,
                }
            )
    return out


def write_grid_tables(folder: Path, result: dict, models: list[str], command: str) -> None:
    """``runs.csv`` (every row of ``grid``), ``study.csv`` (``grid_tables``) and ``study.md`` (readable)."""

    folder.mkdir(parents=True, exist_ok=True)
    rows = result["rows"]
    write_csv(folder / "runs.csv", rows)
    study = grid_tables(rows, models)
    write_csv(folder / "study.csv", study)

    def get(table, model, transformation, lam, eps):
        eps = "none" if eps is None else eps
        return next(
            r
            for r in study
            if (r["table"], r["model"], r["transformation"], r["lambda"], r["eps"])
            == (table, model, transformation, lam, eps)
        )

    def cell(r) -> str:
        return f"{r['erroneous']} ({r['pairs counted']}/{r['pairs']})"

    columns = [*models, "all"]
    lines = [
        "# DeepTest's grid with its epsilon filter",
        "",
        f"Command: `{command}`",
        "",
        f"{result['frames']} test frames per (transformation, value) pair; MSE on the untransformed frames: "
        + ", ".join(f"{m} {result['mse'][m]:.4f}" for m in models)
        + ". Cells: erroneous behaviours (pairs counted of the pairs).",
        "",
        f"## Table 8: per transformation, lambda {PAPER_LAMBDA}, epsilon {PAPER_EPS} (unfiltered in brackets)",
        "",
        "| transformation | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for t in [*GRID, "total"]:
        lines.append(
            f"| {t} | "
            + " | ".join(
                f"{get('8' if t != 'total' else '7', m, t, PAPER_LAMBDA, PAPER_EPS)['erroneous']} "
                f"[{get('8' if t != 'total' else '7', m, t, PAPER_LAMBDA, None)['erroneous']}]"
                for m in columns
            )
            + " |"
        )
    lines += [
        "",
        f"## Table 7: totals over the seven transformations, lambda {PAPER_LAMBDA} per epsilon",
        "",
        "| epsilon | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for eps in (*EPSILONS, None):
        lines.append(
            f"| {eps if eps is not None else 'none'} | "
            + " | ".join(cell(get("7", m, "total", PAPER_LAMBDA, eps)) for m in columns)
            + " |"
        )
    lines += [
        "",
        f"## Table 7: totals over the seven transformations, epsilon {PAPER_EPS} per lambda",
        "",
        "| lambda | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for lam in GRID_LAMBDAS:
        lines.append(f"| {lam} | " + " | ".join(cell(get("7", m, "total", lam, PAPER_EPS)) for m in columns) + " |")
    (folder / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def predict(network, x) -> np.ndarray:
    return np.asarray(network.predict(x), np.float64).ravel()


def sweep(name: str, network, x, y, lambdas, random_state: int) -> dict:
    """Counts of erroneous behaviours per transform and lambda on the test frames ``x`` (labels ``y``)."""
    from kit.sets import perturbed

    clean = predict(network, x)
    mse = float(np.mean((clean - y) ** 2))
    clean_ok = {lam: (clean - y) ** 2 <= lam * mse for lam in lambdas}
    rows = []
    for transform, spec in TRANSFORMS.items():
        with Timer() as t:
            mutants = perturbed(network, x, y, spec, random_state=random_state)
            angles = predict(network, mutants)
        error = (angles - y) ** 2
        for lam in lambdas:
            flagged = error > lam * mse
            rows.append(
                {
                    "model": name,
                    "transform": transform,
                    "spec": spec,
                    "lambda": lam,
                    "erroneous": int(flagged.sum()),
                    "new": int((flagged & clean_ok[lam]).sum()),
                    "frames": len(x),
                    "mse_transformed": round(float(error.mean()), 5),
                    "seconds": round(t.seconds, 1),
                }
            )
        print(
            f"{name} {transform}: MSE {error.mean():.4f} on transformed frames (clean {mse:.4f}); erroneous at "
            f"lambda 5: {rows[-len(lambdas) + 4]['erroneous'] if len(lambdas) >= 5 else '-'}",
            flush=True,
        )
    clean_rows = [{"lambda": lam, "erroneous_clean": int((~clean_ok[lam]).sum())} for lam in lambdas]
    return {"model": name, "mse": mse, "rmse": mse**0.5, "frames": len(x), "rows": rows, "clean": clean_rows}


def guided(name: str, network, x_train, y_train, x, y, *, budget: int, n_seeds: int, random_state: int) -> dict:
    """Campaigns with every DeepTest transform, guided by IDC, by NC, or unguided, against single transforms."""
    from idcgen.analysis import analyze
    from idcgen.criteria import make_criterion
    from idcgen.fuzz.fuzzer import Fuzzer
    from kit.sets import perturbed

    seeds = np.linspace(0, len(x) - 1, n_seeds).round().astype(int)  # spread over both test blocks
    xs, ys = x[seeds], y[seeds]
    with Timer() as t:
        analysis = analyze(network, x_train, y_train, layer="fc3", m=8, random_state=random_state, progress=False)
        nc = make_criterion("nc").fit(network, x_train)
    print(f"{name}: analysis and NC fitted in {t.seconds:.0f} s", flush=True)
    mutators = list(TRANSFORMS.values())
    rows = []
    for guide in ("idc", "nc", "none"):
        with Timer() as t:
            fuzzer = Fuzzer(
                analysis,
                mutators=mutators,
                oracle=f"deeptest(lam={GUIDE_LAMBDA})",
                guide=guide,
                measure=[nc],
                batch_size=min(256, n_seeds),
                random_state=random_state,
            )
            out = OUTPUTS / RECIPE / "campaigns" / f"{name}_{guide}_b{budget}_s{n_seeds}_rs{random_state}"
            c = fuzzer.run(xs, ys, budget=budget, out=out, progress=False)
        findings = c.findings()
        rows.append(
            {
                "model": name,
                "random state": random_state,
                "search": f"combined transforms, guided by {guide}"
                if guide != "none"
                else "combined transforms, unguided",
                "execs": c.execs,
                "oracle": c.settings.oracle,
                "flagged mutants": int(c.flagged),
                "erroneous": int(len(findings.get("id", ()))),
                "seeds with one": int(len(set(np.asarray(findings.get("root", []), int).tolist()))),
                "IDC %": round(100 * c.coverage["idc"].score, 1),
                "NC %": round(100 * c.coverage["nc"].score, 1),
                "seconds": round(t.seconds, 1),
            }
        )
        print(rows[-1], flush=True)
    # single transforms on the same seeds, as many execs, split evenly between the transforms
    mse = float(np.mean((predict(network, xs) - ys) ** 2))
    per = budget // len(TRANSFORMS)
    flagged_roots, n_flagged, mutants_all = set(), 0, []
    for spec in TRANSFORMS.values():
        reps = int(np.ceil(per / len(xs)))
        xr, yr = np.concatenate([xs] * reps)[:per], np.concatenate([ys] * reps)[:per]
        roots = np.tile(np.arange(len(xs)), reps)[:per]
        mutants = perturbed(network, xr, yr, spec, random_state=random_state)
        bad = (predict(network, mutants) - yr) ** 2 > GUIDE_LAMBDA * mse
        n_flagged += int(bad.sum())
        flagged_roots |= set(roots[bad].tolist())
        mutants_all.append(mutants)
    combined = np.concatenate([xs] + mutants_all)
    rows.append(
        {
            "model": name,
            "random state": random_state,
            "search": "single transforms (DeepTest's sweep)",
            "execs": per * len(TRANSFORMS),
            "oracle": f"deeptest(lam={GUIDE_LAMBDA}, mse={mse!r})",
            "flagged mutants": n_flagged,
            "erroneous": n_flagged,
            "seeds with one": len(flagged_roots),
            "IDC %": round(100 * analysis.coverage(combined).score, 1),
            "NC %": round(100 * nc.coverage(network, combined).score, 1),
            "seconds": None,
        }
    )
    print(rows[-1], flush=True)
    return {"model": name, "rows": rows}


RETRAIN_ARMS = ("clean frames", "random transformed frames (DeepTest)", "IDC-kept mutants (idcgen)")


def transformed_test(network, x, y, random_state: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every test frame transformed once by each transform: (frames, labels, transform index)."""
    from kit.sets import perturbed

    parts = [perturbed(network, x, y, spec, random_state=random_state) for spec in TRANSFORMS.values()]
    return np.concatenate(parts), np.tile(y, len(parts)), np.repeat(np.arange(len(parts)), len(x))


def random_transformed(network, x, y, n: int, rng: np.random.Generator, random_state: int):
    """``n`` frames drawn from ``x`` (with their angles ``y``), each transformed by one transform drawn at random."""
    from kit.sets import perturbed

    picks, which = rng.integers(0, len(x), n), rng.integers(0, len(TRANSFORMS), n)
    out = np.empty((n, *x.shape[1:]), x.dtype)
    for t, spec in enumerate(TRANSFORMS.values()):
        idx = np.flatnonzero(which == t)
        if idx.size:
            out[idx] = perturbed(network, x[picks[idx]], y[picks[idx]], spec, random_state=random_state + t)
    return out, y[picks]


def fine_tune(path, x_train, y_train, x_extra, y_extra, *, epochs: int, lr: float, random_state: int):
    """The model at ``path`` trained ``epochs`` more epochs on the training frames plus ``x_extra`` (labelled
    ``y_extra``), half of each epoch's frames flipped with the angle negated, as train_models.py trains."""
    import keras

    from idcgen.framework import load_model as load
    from kit.training import augment, keras_epoch, train_epochs

    keras.utils.set_random_seed(random_state)
    rng = np.random.default_rng(random_state)
    model = load(path)
    model.compile(optimizer=keras.optimizers.Adam(lr, use_ema=True, ema_momentum=0.99), loss="mse")
    x, y = np.concatenate([x_train, x_extra]), np.concatenate([y_train, y_extra])
    flips = keras_epoch(model, x, y, 32, lambda xs, ys, r: augment(xs, ys, r, {}), rng)  # flips only
    train_epochs(f"{Path(path).stem} fine-tuned", epochs, flips, dict)
    return model


def retrain(
    name: str, x_train, y_train, x_test, y_test, *, budget: int, n_seeds: int, epochs: int, lr: float, random_state: int
) -> dict:
    """DeepTest's retraining and idcgen's: fine-tune the model with synthesised training frames labelled with
    their original angle, and measure the test MSE on clean and on transformed test frames before and after.

    Three arms add the same number N of frames to the 4,412 training frames for ``epochs`` epochs: the
    IDC-kept mutants of a campaign on ``n_seeds`` training frames (all transforms as mutators, guided by IDC,
    ``budget`` execs; N is how many it kept), N training frames each transformed once by a transform drawn
    at random (DeepTest's synthesised frames), and N clean training frames (the control: as many steps,
    nothing synthesised). The transformed test frames are every test frame under every transform, drawn with
    another random state than the synthesised training frames."""
    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.framework import load_model as load
    from idcgen.fuzz.fuzzer import Fuzzer
    from kit import model_path

    path = model_path(name, "udacity")
    network = Network(load(path))
    xt, yt, which = transformed_test(network, x_test, y_test, random_state + 1000)
    rng = np.random.default_rng(random_state)
    seeds = np.sort(rng.choice(len(x_train), n_seeds, replace=False))
    with Timer() as t:
        analysis = analyze(network, x_train, y_train, layer="fc3", m=8, random_state=random_state, progress=False)
        fuzzer = Fuzzer(
            analysis,
            mutators=list(TRANSFORMS.values()),
            oracle=f"deeptest(lam={GUIDE_LAMBDA})",
            guide="idc",
            batch_size=256,
            random_state=random_state,
        )
        c = fuzzer.run(x_train[seeds], y_train[seeds], budget=budget, progress=False)
    kept = np.arange(c.corpus.n_seeds, len(c.corpus))
    x_idc, y_idc = c.corpus.x[kept].astype(np.float32), np.asarray(c.corpus.label[kept], np.float64)
    n = len(kept)
    print(
        f"{name}: the IDC campaign kept {n} mutants of {c.execs} execs from {n_seeds} training frames "
        f"({t.seconds:.0f} s)",
        flush=True,
    )
    x_rand, y_rand = random_transformed(network, x_train[seeds], y_train[seeds], n, rng, random_state)
    clean = rng.integers(0, len(x_train), n)
    extras = {
        RETRAIN_ARMS[0]: (x_train[clean], y_train[clean]),
        RETRAIN_ARMS[1]: (x_rand, y_rand),
        RETRAIN_ARMS[2]: (x_idc, y_idc),
    }

    def measure(net, arm: str, seconds=None) -> dict:
        p, pt = predict(net, x_test), predict(net, xt)
        mse = float(np.mean((p - y_test) ** 2))
        err = (pt - yt) ** 2
        row = {
            "model": name,
            "random state": random_state,
            "fine-tuned with": arm,
            "added frames": n if arm != "before" else 0,
            "test MSE (clean)": round(mse, 4),
            "test MSE (transformed)": round(float(err.mean()), 4),
            "erroneous at lambda 5": int((err > GUIDE_LAMBDA * mse).sum()),
            "erroneous at lambda 5, base bound": int((err > GUIDE_LAMBDA * base_mse).sum())
            if arm != "before"
            else None,
        }
        for i, transform in enumerate(TRANSFORMS):
            row[f"MSE {transform}"] = round(float(err[which == i].mean()), 4)
        row["seconds"] = None if seconds is None else round(seconds, 1)
        print(row, flush=True)
        return row

    base_mse = float(np.mean((predict(network, x_test) - y_test) ** 2))
    rows = [measure(network, "before")]
    for arm, (xe, ye) in extras.items():
        with Timer() as t:
            model = fine_tune(path, x_train, y_train, xe, ye, epochs=epochs, lr=lr, random_state=random_state)
        rows.append(measure(Network(model), arm, t.seconds))
    return {"model": name, "random_state": random_state, "kept": n, "execs": c.execs, "rows": rows}


def retrain_all(name: str, x_train, y_train, x_test, y_test, *, epochs: int, lr: float, random_state: int) -> dict:
    """DeepTest's retraining at full size: every training frame once more, transformed by one transform drawn
    at random (labelled with its original angle), against every training frame once more untransformed (the
    control: as many steps, nothing synthesised); test MSE on clean and transformed test frames."""
    from idcgen.framework import Network
    from idcgen.framework import load_model as load
    from kit import model_path

    path = model_path(name, "udacity")
    network = Network(load(path))
    xt, yt, which = transformed_test(network, x_test, y_test, random_state + 1000)
    rng = np.random.default_rng(random_state)
    order = rng.permutation(len(x_train))
    x_syn, y_syn = random_transformed(
        network, x_train[order], y_train[order], len(x_train), np.random.default_rng(random_state), random_state
    )
    rows = []
    base_mse = float(np.mean((predict(network, x_test) - y_test) ** 2))
    for arm, (xe, ye, model) in {
        "before": (None, None, network),
        "every training frame again, clean": (x_train, y_train, None),
        "every training frame again, transformed (DeepTest)": (x_syn, y_syn, None),
    }.items():
        with Timer() as t:
            net = (
                model
                if model is not None
                else Network(fine_tune(path, x_train, y_train, xe, ye, epochs=epochs, lr=lr, random_state=random_state))
            )
        p, pt = predict(net, x_test), predict(net, xt)
        mse, err = float(np.mean((p - y_test) ** 2)), (pt - yt) ** 2
        row = {
            "model": name,
            "random state": random_state,
            "fine-tuned with": arm,
            "added frames": 0 if xe is None else len(xe),
            "test MSE (clean)": round(mse, 4),
            "test MSE (transformed)": round(float(err.mean()), 4),
            "erroneous at lambda 5": int((err > GUIDE_LAMBDA * mse).sum()),
            "erroneous at lambda 5, base bound": int((err > GUIDE_LAMBDA * base_mse).sum()),
        }
        for i, transform in enumerate(TRANSFORMS):
            row[f"MSE {transform}"] = round(float(err[which == i].mean()), 4)
        row["seconds"] = round(t.seconds, 1)
        print(row, flush=True)
        rows.append(row)
    return {"model": name, "random_state": random_state, "rows": rows}


def _once(part: str, name: str, compute):
    """The saved result of ``part`` for ``name``, else ``compute()`` saved (the recipe resumes)."""
    path = OUTPUTS / RECIPE / f"{part}_{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    save_json(path, result)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(UDACITY_MODELS), choices=UDACITY_MODELS)
    parser.add_argument("--lambdas", nargs="+", type=float, default=list(LAMBDAS))
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["sweep", "guided"],
        choices=("grid", "sweep", "guided", "retrain", "retrain-all"),
    )
    parser.add_argument("--grid-stride", type=int, default=1, help="grid: every N-th test frame (default all 1,122)")
    parser.add_argument("--budget", type=int, default=2240, help="execs per guided campaign")
    parser.add_argument("--seeds", type=int, default=224, help="test frames the guided campaigns start from")
    parser.add_argument("--guided-models", nargs="+", default=["dave2"], choices=UDACITY_MODELS)
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument(
        "--random-states",
        nargs="+",
        type=int,
        default=None,
        help="guided and retrain: one run per random state (default: --random-state)",
    )
    parser.add_argument("--retrain-budget", type=int, default=8192, help="execs of the retraining campaign")
    parser.add_argument("--retrain-seeds", type=int, default=1024, help="training frames the campaign starts from")
    parser.add_argument("--retrain-epochs", type=int, default=1)
    parser.add_argument("--retrain-lr", type=float, default=5e-5)
    args = parser.parse_args(argv)
    states = args.random_states or [args.random_state]
    from idcgen.framework import Network

    x_train, y_train = udacity("train")
    x_test, y_test = udacity("test")
    lambdas = [int(v) if float(v).is_integer() else v for v in args.lambdas]
    sweeps, guides, retrains, retrains_all = [], [], [], []
    if "grid" in args.parts:
        frames, y_grid, _ = camera_frames(args.grid_stride)
        gap = float(np.abs(model_input(frames) - x_test[:: args.grid_stride]).max())
        if gap > 1e-6:  # the grid's frames must be the model's test frames when untransformed
            raise SystemExit(f"the grid's untransformed frames differ from udacity:test by up to {gap}")
        networks = {name: Network(load_model(name, "udacity")) for name in args.models}
        key = f"{'_'.join(args.models)}_stride{args.grid_stride}"
        result = _once("grid", key, partial(grid, networks, frames, y_grid))
        write_grid_tables(OUTPUTS / RECIPE / "grid", result, args.models, command_line())
    for name in args.models:
        network = Network(load_model(name, "udacity"))
        if "sweep" in args.parts:
            sweeps.append(
                _once("sweep", name, partial(sweep, name, network, x_test, y_test, lambdas, args.random_state))
            )
        if "guided" in args.parts and name in args.guided_models:
            for state in states:
                guides.append(
                    _once(
                        "guided",
                        f"{name}_b{args.budget}_s{args.seeds}_rs{state}",
                        partial(
                            guided,
                            name,
                            network,
                            x_train,
                            y_train,
                            x_test,
                            y_test,
                            budget=args.budget,
                            n_seeds=args.seeds,
                            random_state=state,
                        ),
                    )
                )
        if "retrain" in args.parts and name in args.guided_models:
            for state in states:
                key = f"{name}_b{args.retrain_budget}_s{args.retrain_seeds}_e{args.retrain_epochs}_rs{state}"
                retrains.append(
                    _once(
                        "retrain",
                        key,
                        partial(
                            retrain,
                            name,
                            x_train,
                            y_train,
                            x_test,
                            y_test,
                            budget=args.retrain_budget,
                            n_seeds=args.retrain_seeds,
                            epochs=args.retrain_epochs,
                            lr=args.retrain_lr,
                            random_state=state,
                        ),
                    )
                )
        if "retrain-all" in args.parts and name in args.guided_models:
            for state in states:
                retrains_all.append(
                    _once(
                        "retrain_all",
                        f"{name}_e{args.retrain_epochs}_rs{state}",
                        partial(
                            retrain_all,
                            name,
                            x_train,
                            y_train,
                            x_test,
                            y_test,
                            epochs=args.retrain_epochs,
                            lr=args.retrain_lr,
                            random_state=state,
                        ),
                    )
                )
    folder = OUTPUTS / RECIPE
    if sweeps:
        write_sweep_tables(folder, sweeps)
    if retrains:
        write_table(
            folder,
            "retrain",
            [r for g in retrains for r in g["rows"]],
            command=command_line(),
            title="Fine-tuning with synthesised frames labelled with their original angle",
            notes="Before: the trained model. Each arm adds the same number of frames to the training "
            "frames for the same epochs: clean training frames (control), training frames under one "
            "random DeepTest transform each (DeepTest's retraining), or the mutants an IDC-guided "
            "campaign kept (idcgen's). Transformed: every test frame under every transform. "
            "Erroneous: transformed test frames breaking DeepTest's relation at lambda 5 with the "
            "model's own clean-test MSE ('base bound': with the MSE before fine-tuning).",
        )
    if retrains_all:
        write_table(
            folder,
            "retrain_all",
            [r for g in retrains_all for r in g["rows"]],
            command=command_line(),
            title="Fine-tuning with every training frame once more, transformed or clean",
            notes="Transformed: each training frame under one DeepTest transform drawn at random, labelled "
            "with its original angle. Test MSE on the clean test frames and on every test frame under "
            "every transform.",
        )
    if guides:
        write_table(
            folder,
            "guided",
            [r for g in guides for r in g["rows"]],
            command=command_line(),
            title=f"DeepTest's transforms combined in coverage-guided campaigns vs single transforms "
            f"(lambda {GUIDE_LAMBDA})",
            notes="Erroneous: mutants breaking DeepTest's relation (campaigns: one per (IDC combination, "
            "seed) pair, as idcgen counts findings; single transforms: every flagged mutant). The MSE "
            "is the model's on the seeds, measured at the start of each campaign.",
        )


def write_sweep_tables(folder, sweeps: list[dict]) -> None:
    notes = (
        "Each of the 1,122 test frames (blocks 2 and 7 of the drive, real angles) transformed once per "
        "transform, parameters drawn from DeepTest's ranges; 'new': of those, frames whose untransformed "
        "version keeps the relation. MSE: "
        + ", ".join(f"{s['model']} {s['mse']:.4f} (RMSE {s['rmse']:.3f})" for s in sweeps)
        + "."
    )
    at5 = []
    for transform in TRANSFORMS:
        row = {"transform": transform, "spec": TRANSFORMS[transform]}
        for s in sweeps:
            hit = next(r for r in s["rows"] if r["transform"] == transform and float(r["lambda"]) == 5)
            row[f"{s['model']} erroneous"] = hit["erroneous"]
            row[f"{s['model']} new"] = hit["new"]
        at5.append(row)
    total = {"transform": "total", "spec": ""}
    for key in at5[0]:
        if key not in total:
            total[key] = sum(r[key] for r in at5)
    clean = {"transform": "untransformed frames", "spec": ""}
    for s in sweeps:
        clean[f"{s['model']} erroneous"] = next(r["erroneous_clean"] for r in s["clean"] if float(r["lambda"]) == 5)
        clean[f"{s['model']} new"] = ""
    write_table(
        folder,
        "sweep",
        at5 + [total, clean],
        command=command_line(),
        title="Erroneous behaviours per DeepTest transform at lambda 5",
        notes=notes,
    )
    by_lambda = []
    for s in sweeps:
        for lam in sorted({r["lambda"] for r in s["rows"]}):
            rows = [r for r in s["rows"] if r["lambda"] == lam]
            by_lambda.append(
                {
                    "model": s["model"],
                    "lambda": lam,
                    "bound (rad^2)": round(lam * s["mse"], 5),
                    "erroneous": sum(r["erroneous"] for r in rows),
                    "new": sum(r["new"] for r in rows),
                    "untransformed frames erroneous": next(
                        r["erroneous_clean"] for r in s["clean"] if r["lambda"] == lam
                    ),
                    "transformed frames": sum(r["frames"] for r in rows),
                }
            )
    write_table(
        folder,
        "by_lambda",
        by_lambda,
        command=command_line(),
        title="Erroneous behaviours over all DeepTest transforms, per lambda",
        notes=notes,
    )


if __name__ == "__main__":
    main()

"""DeepTest's metamorphic testing of the three Daves (Tian et al., ICSE 2018), on the drive DeepTest used.

    python recipes/deeptest.py [--models dave2 dave2_norminit dave2_dropout] [--lambdas 1 2 ... 10]
                               [--budget 2240] [--seeds 224] [--parts sweep guided retrain retrain-all]
                               [--random-states 0 1 ...] [--retrain-budget 8192] [--retrain-seeds 1024]

The models are the three Daves of ``recipes/train_models.py --dataset udacity`` (trained on the real
angles, blocked split: recipes/kit/data.py); the test frames are the 1,122 frames of test blocks 2 and 7.
The oracle is DeepTest's relation (idcgen.fuzz.deeptest): a transformed frame is an erroneous behaviour when
``(theta_t - theta_label)^2 > lambda * MSE``, with MSE the model's on the untransformed test frames.

- ``sweep``: every test frame transformed once by each of DeepTest's transforms (parameters drawn from
  DeepTest's ranges, ``TRANSFORMS``), erroneous behaviours counted per transform and per lambda; beside each
  count, how many of them come from frames whose untransformed version keeps the relation (the transform
  made the error, not the frame). Writes ``outputs/deeptest/sweep.{md,csv}`` and ``by_lambda.{md,csv}``.
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

from kit import OUTPUTS, UDACITY_MODELS, Timer, command_line, load_model, save_json, udacity, write_table

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
        "--parts", nargs="+", default=["sweep", "guided"], choices=("sweep", "guided", "retrain", "retrain-all")
    )
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

"""DeepTest's metamorphic testing of the three Daves (Tian et al., ICSE 2018), on the drive DeepTest used.

    python recipes/deeptest.py [--models dave2 dave2_norminit dave2_dropout] [--lambdas 1 2 ... 10]
                               [--budget 2240] [--seeds 224] [--parts sweep guided] [--random-state 0]

The models are the three Daves of ``recipes/train_models.py --dataset udacity`` (trained on the real
angles, blocked split: recipes/udacity_data.py); the test frames are the 1,122 frames of test blocks 2 and 7.
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

Each part's result per model is kept in ``outputs/deeptest/<part>_<model>.json``: a run skips what is done
(delete the file to redo it).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from common import OUTPUTS, UDACITY_MODELS, Timer, command_line, load_model, save_json, udacity, write_table

RECIPE = "deeptest"
#: DeepTest's transforms with its parameter ranges, scaled from its 640x480 frames to fractions of the frame
#: (docs/results.md, "DeepTest's metamorphic testing" says where idcgen's transform differs from DeepTest's)
TRANSFORMS = {
    "translation": "shift(limit=0.16)",                 # DeepTest: 10..100 px of 640 (0.016..0.156 of the width)
    "scale": "scale(low=1.5, high=6.0)",                # DeepTest: 1.5..6
    "shear": "shear(limit=45.0)",                       # DeepTest: factor 0.1..1.0 = 5.7..45 degrees
    "rotation": "rotate(limit=30.0)",                   # DeepTest: 3..30 degrees
    "contrast": "gain(low=1.2, high=3.0)",              # DeepTest: gain 1.2..3.0
    "brightness": "bias(low=0.0392, high=0.392)",       # DeepTest: bias 10..100 of 255
    "blur": "deeptest_blur",                            # DeepTest's ten blur settings
    "fog": "fog",
    "rain": "rain",
}
LAMBDAS = tuple(range(1, 11))
GUIDE_LAMBDA = 5


def predict(network, x) -> np.ndarray:
    return np.asarray(network.predict(x), np.float64).ravel()


def sweep(name: str, network, x, y, lambdas, random_state: int) -> dict:
    """Counts of erroneous behaviours per transform and lambda on the test frames ``x`` (labels ``y``)."""
    from sets import perturbed
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
            rows.append({"model": name, "transform": transform, "spec": spec, "lambda": lam,
                         "erroneous": int(flagged.sum()), "new": int((flagged & clean_ok[lam]).sum()),
                         "frames": len(x), "mse_transformed": round(float(error.mean()), 5),
                         "seconds": round(t.seconds, 1)})
        print(f"{name} {transform}: MSE {error.mean():.4f} on transformed frames (clean {mse:.4f}); erroneous at "
              f"lambda 5: {rows[-len(lambdas) + 4]['erroneous'] if len(lambdas) >= 5 else '-'}", flush=True)
    clean_rows = [{"lambda": lam, "erroneous_clean": int((~clean_ok[lam]).sum())} for lam in lambdas]
    return {"model": name, "mse": mse, "rmse": mse ** 0.5, "frames": len(x), "rows": rows, "clean": clean_rows}


def guided(name: str, network, x_train, y_train, x, y, *, budget: int, n_seeds: int, random_state: int) -> dict:
    """Campaigns with every DeepTest transform, guided by IDC, by NC, or unguided, against single transforms."""
    from idcgen.analysis import analyze
    from idcgen.criteria import make_criterion
    from idcgen.fuzz.fuzzer import Fuzzer
    from sets import perturbed
    seeds = np.linspace(0, len(x) - 1, n_seeds).round().astype(int)       # spread over both test blocks
    xs, ys = x[seeds], y[seeds]
    with Timer() as t:
        analysis = analyze(network, x_train, y_train, layer="fc3", m=8, random_state=random_state, progress=False)
        nc = make_criterion("nc").fit(network, x_train)
    print(f"{name}: analysis and NC fitted in {t.seconds:.0f} s", flush=True)
    mutators = list(TRANSFORMS.values())
    rows = []
    for guide in ("idc", "nc", "none"):
        with Timer() as t:
            fuzzer = Fuzzer(analysis, mutators=mutators, oracle=f"deeptest(lam={GUIDE_LAMBDA})", guide=guide,
                            measure=[nc], batch_size=min(256, n_seeds), random_state=random_state)
            c = fuzzer.run(xs, ys, budget=budget, out=OUTPUTS / RECIPE / "campaigns" / f"{name}_{guide}",
                           progress=False)
        findings = c.findings()
        rows.append({"model": name, "search": f"combined transforms, guided by {guide}" if guide != "none" else
                     "combined transforms, unguided", "execs": c.execs, "oracle": c.settings.oracle,
                     "erroneous": int(len(findings.get("id", ()))),
                     "seeds with one": int(len(set(np.asarray(findings.get("root", []), int).tolist()))),
                     "IDC %": round(100 * c.coverage["idc"].score, 1), "NC %": round(100 * c.coverage["nc"].score, 1),
                     "seconds": round(t.seconds, 1)})
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
    rows.append({"model": name, "search": "single transforms (DeepTest's sweep)", "execs": per * len(TRANSFORMS),
                 "oracle": f"deeptest(lam={GUIDE_LAMBDA}, mse={mse!r})", "erroneous": n_flagged,
                 "seeds with one": len(flagged_roots),
                 "IDC %": round(100 * analysis.coverage(combined).score, 1),
                 "NC %": round(100 * nc.coverage(network, combined).score, 1),
                 "seconds": None})
    print(rows[-1], flush=True)
    return {"model": name, "rows": rows}


def _done(part: str, name: str):
    path = OUTPUTS / RECIPE / f"{part}_{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(UDACITY_MODELS), choices=UDACITY_MODELS)
    parser.add_argument("--lambdas", nargs="+", type=float, default=list(LAMBDAS))
    parser.add_argument("--parts", nargs="+", default=["sweep", "guided"], choices=("sweep", "guided"))
    parser.add_argument("--budget", type=int, default=2240, help="execs per guided campaign")
    parser.add_argument("--seeds", type=int, default=224, help="test frames the guided campaigns start from")
    parser.add_argument("--guided-models", nargs="+", default=["dave2"], choices=UDACITY_MODELS)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    from idcgen.framework import Network
    x_train, y_train = udacity("train")
    x_test, y_test = udacity("test")
    lambdas = [int(v) if float(v).is_integer() else v for v in args.lambdas]
    sweeps, guides = [], []
    for name in args.models:
        network = Network(load_model(name, "udacity"))
        if "sweep" in args.parts:
            result = _done("sweep", name)
            if result is None:
                result = sweep(name, network, x_test, y_test, lambdas, args.random_state)
                save_json(OUTPUTS / RECIPE / f"sweep_{name}.json", result)
            sweeps.append(result)
        if "guided" in args.parts and name in args.guided_models:
            result = _done("guided", name)
            if result is None:
                result = guided(name, network, x_train, y_train, x_test, y_test, budget=args.budget,
                                n_seeds=args.seeds, random_state=args.random_state)
                save_json(OUTPUTS / RECIPE / f"guided_{name}.json", result)
            guides.append(result)
    folder = OUTPUTS / RECIPE
    if sweeps:
        write_sweep_tables(folder, sweeps)
    if guides:
        write_table(folder, "guided", [r for g in guides for r in g["rows"]], command=command_line(),
                    title=f"DeepTest's transforms combined in coverage-guided campaigns vs single transforms "
                          f"(lambda {GUIDE_LAMBDA})",
                    notes="Erroneous: mutants breaking DeepTest's relation (campaigns: one per (IDC combination, "
                          "seed) pair, as idcgen counts findings; single transforms: every flagged mutant). The MSE "
                          "is the model's on the seeds, measured at the start of each campaign.")


def write_sweep_tables(folder, sweeps: list[dict]) -> None:
    notes = ("Each of the 1,122 test frames (blocks 2 and 7 of the drive, real angles) transformed once per "
             "transform, parameters drawn from DeepTest's ranges; 'new': of those, frames whose untransformed "
             "version keeps the relation. MSE: " + ", ".join(f"{s['model']} {s['mse']:.4f} (RMSE {s['rmse']:.3f})"
                                                             for s in sweeps) + ".")
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
    write_table(folder, "sweep", at5 + [total, clean], command=command_line(),
                title="Erroneous behaviours per DeepTest transform at lambda 5", notes=notes)
    by_lambda = []
    for s in sweeps:
        for lam in sorted({r["lambda"] for r in s["rows"]}):
            rows = [r for r in s["rows"] if r["lambda"] == lam]
            by_lambda.append({"model": s["model"], "lambda": lam, "bound (rad^2)": round(lam * s["mse"], 5),
                              "erroneous": sum(r["erroneous"] for r in rows), "new": sum(r["new"] for r in rows),
                              "untransformed frames erroneous": next(r["erroneous_clean"] for r in s["clean"]
                                                                      if r["lambda"] == lam),
                              "transformed frames": sum(r["frames"] for r in rows)})
    write_table(folder, "by_lambda", by_lambda, command=command_line(),
                title="Erroneous behaviours over all DeepTest transforms, per lambda", notes=notes)


if __name__ == "__main__":
    main()

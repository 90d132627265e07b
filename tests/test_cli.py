import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.cli import app
from idcgen.errors import Param, ParameterError

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def data_files(digits, tmp_path_factory):
    x_train, y_train, x_test, y_test = digits
    folder = tmp_path_factory.mktemp("data")
    np.savez(folder / "train.npz", x=(x_train[:1500, ..., 0] * 255).round().astype(np.uint8), y=y_train[:1500])
    np.savez(folder / "test.npz", x=(x_test[..., 0] * 255).round().astype(np.uint8), y=y_test)
    return folder


def test_layers(trained_lenet):
    _, path = trained_lenet
    result = invoke("layers", "--model", path)
    assert result.exit_code == 0, result.output
    assert "block1_conv1" in result.output and "Conv2D" in result.output and "(None, 28, 28, 4)" in result.output
    assert "default subject layer: block2_pool1" in result.output


def test_analyze_then_coverage(trained_lenet, data_files, tmp_path):
    _, path = trained_lenet
    out = tmp_path / "analysis"
    result = invoke(
        "analyze",
        "--model",
        path,
        "--train",
        data_files / "train.npz",
        "--layer",
        "block2_conv1",
        "--m",
        4,
        "--clusters",
        "2-3",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "layer block2_conv1" in result.output and (out / "analysis.json").exists()
    meta = json.loads((out / "analysis.json").read_text())
    assert meta["m"] == 4 and meta["config"]["clusters"] == [2, 3] and meta["data"]["n"] == 1500
    result = invoke("coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz", "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.output.strip().splitlines()[-1])
    assert 0 < got["idc"] <= 1 and got["total"] == meta["combinations_total"] and got["covered"] >= 1
    from idcgen.analysis import Analysis
    from idcgen.data import fit_to_model, load_inputs

    model, _ = trained_lenet
    expected = Analysis.load(out, model=model).coverage(fit_to_model(load_inputs(data_files / "test.npz"), (28, 28, 1)))
    assert got["covered"] == expected.covered
    text = invoke("coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz")
    assert text.exit_code == 0 and "IDC" in text.output and "%" in text.output


def test_the_peak_memory_analyze_prints_is_the_processs_high_water_mark(tmp_path):
    from idcgen.framework.common import peak_memory_mib

    (tmp_path / "status").write_text("Name:\tpython\nVmPeak:\t  921600 kB\nVmHWM:\t  204800 kB\n")
    assert peak_memory_mib(tmp_path / "status") == 200
    assert peak_memory_mib(tmp_path / "missing") > 0  # no /proc: the process' ru_maxrss


@pytest.mark.parametrize(
    "args, message",
    [
        (["--m", 9999], "error: --m must be an int in the range [1, 12]"),
        (["--layer", "nope"], "unknown layer 'nope'; valid layers:"),
        (["--clusters", "5-2"], "cluster range"),
    ],
)
def test_analyze_errors_are_one_line(trained_lenet, data_files, tmp_path, args, message):
    _, path = trained_lenet
    result = invoke("analyze", "--model", path, "--train", data_files / "train.npz", "--out", tmp_path / "a", *args)
    assert result.exit_code == 1
    assert message in result.output
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()  # nothing half-written


def test_missing_model_and_bad_inputs(trained_lenet, tmp_path):
    result = invoke("layers", "--model", tmp_path / "missing.h5")
    assert result.exit_code == 1 and "model file not found" in result.output
    _, path = trained_lenet
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("analyze", "--model", path, "--train", empty)
    assert result.exit_code == 1 and "no images" in result.output
    # an RGB array for a grayscale model is converted as a folder's images are (PIL's luma), and said
    rgb = np.random.default_rng(0).integers(0, 256, (3, 28, 28, 3), dtype=np.uint8)
    np.save(tmp_path / "rgb.npy", rgb)
    result = invoke("analyze", "--model", path, "--train", tmp_path / "rgb.npy", "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    assert "note: 3 of 3 images converted from colour to grayscale (1 channels wanted)" in result.output


def test_coverage_refuses_other_model(trained_lenet, data_files, tmp_path):
    from idcgen.framework.keras_zoo import lenet1

    _, path = trained_lenet
    out = tmp_path / "a"
    assert (
        invoke("analyze", "--model", path, "--train", data_files / "train.npz", "--m", 3, "--out", out).exit_code == 0
    )
    other = tmp_path / "other.keras"
    lenet1().save(other)
    result = invoke("coverage", "--analysis", out, "--model", other, "--inputs", data_files / "test.npz")
    assert result.exit_code == 1 and "made for another model" in result.output


def test_demo_runs_end_to_end(tmp_path):
    result = invoke("demo", "--out", tmp_path / "demo", "--epochs", 2)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "demo" / "coverage.json").read_text())
    # two epochs of 16 steps reach about 80 %; the bound says training worked (chance is 10 %) without
    # depending on the exact figure, which CPU float rounding moves by a point or two
    assert 0 < summary["coverage"]["idc"] <= 1 and summary["accuracy"] > 0.6
    assert (tmp_path / "demo" / "lenet5.keras").exists() and (tmp_path / "demo" / "analysis" / "analysis.json").exists()


def test_coverage_prints_criterion_notes(trained_lenet, digits, tmp_path):
    # LSC fits one density per class: a class with fewer training inputs than neurons gets none, and the
    # CLI must say so rather than print a bare score.
    _, path = trained_lenet
    x_train, y_train, x_test, _ = digits
    rows = np.concatenate(
        [np.flatnonzero(y_train == 0)[:150], np.flatnonzero(y_train == 1)[:150], np.flatnonzero(y_train == 2)[:3]]
    )
    to_uint8 = lambda a: (a[..., 0] * 255).round().astype(np.uint8)  # noqa: E731
    np.savez(tmp_path / "train.npz", x=to_uint8(x_train[rows]), y=y_train[rows])
    np.savez(tmp_path / "test.npz", x=to_uint8(x_test[:100]))
    result = invoke(
        "coverage",
        "--model",
        path,
        "--inputs",
        tmp_path / "test.npz",
        "--train",
        tmp_path / "train.npz",
        "--criteria",
        "lsc",
    )
    assert result.exit_code == 0, result.output
    assert "note: LSC:" in result.output and "class 2" in result.output


def test_analyze_out_refuses_an_existing_analysis(trained_lenet, data_files, tmp_path):
    _, path = trained_lenet
    out = tmp_path / "mine"
    base = ["analyze", "--model", path, "--train", data_files / "train.npz", "--clusters", "2-3", "--out", out]
    assert invoke(*base, "--m", 3).exit_code == 0
    result = invoke(*base, "--m", 4)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {out} already holds an analysis: refusing to replace it; pass --force to replace it, or save elsewhere"
    )
    assert json.loads((out / "analysis.json").read_text())["m"] == 3
    result = invoke(*base, "--m", 4, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "analysis.json").read_text())["m"] == 4


def test_default_analysis_folders_never_collide(trained_lenet, data_files, tmp_path, monkeypatch):
    # the default folder names the data (fingerprint); a second analysis whose name is taken by another one
    # goes to a new name and says so; fuzz --train does the same, and the analyses it saved are found again
    from idcgen.analysis import data_fingerprint
    from idcgen.data import fit_to_model, load_inputs

    monkeypatch.chdir(tmp_path)
    _, path = trained_lenet
    train = load_inputs(data_files / "train.npz")
    fingerprint = data_fingerprint(fit_to_model(train, (28, 28, 1)), train.y)
    first = Path("outputs/analyses") / f"lenet1_block2_pool1_m3_{fingerprint}"
    base = ["analyze", "--model", path, "--train", data_files / "train.npz", "--m", 3]
    result = invoke(*base, "--clusters", "2-3")
    assert result.exit_code == 0, result.output
    assert f"analysis saved to {first} (" in result.output
    mine = (first / "analysis.json").read_text()
    result = invoke(*base, "--clusters", "2-3")  # the same analysis: kept
    assert result.exit_code == 0 and f"analysis already in {first}, unchanged" in result.output
    result = invoke(*base, "--clusters", "4-5")
    assert result.exit_code == 0, result.output
    assert f"analysis saved to {first}-2 ({first} holds another analysis)" in result.output
    assert json.loads((Path(f"{first}-2") / "analysis.json").read_text())["config"]["clusters"] == [4, 5]
    np.savez("seeds.npz", x=np.load(data_files / "test.npz")["x"][:40], y=np.load(data_files / "test.npz")["y"][:40])
    fuzz = [
        "fuzz",
        "--model",
        path,
        "--seeds",
        "seeds.npz",
        "--budget",
        64,
        "--batch-size",
        64,
        "--m",
        3,
        "--mutators",
        "gauss",
    ]
    result = invoke(*fuzz, "--train", data_files / "train.npz", "--out", "camp")  # k 2-5: a third analysis
    assert result.exit_code == 0, result.output
    assert f"saved to {first}-3 ({first} holds another analysis)" in result.output
    assert (first / "analysis.json").read_text() == mine  # the user's analysis is untouched
    result = invoke(*fuzz, "--out", "camp2")  # no --train: finds the newest saved analysis of the model
    assert result.exit_code == 0, result.output
    assert f"(the saved analysis of this model in {first}-3/" in result.output


def test_demo_refuses_an_earlier_demo(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "coverage.json").write_text("{}")
    result = invoke("demo", "--out", out, "--epochs", 1, "--budget", 0)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {out} already holds an earlier demo: refusing to replace it; pass "
        "--force to replace it, or give another folder (--out)"
    )
    assert [p.name for p in out.iterdir()] == ["coverage.json"]
    for args, message in [
        (["--budget", -5], "error: --budget must be an int >= 0. Got -5 instead."),
        (["--epochs", 0], "error: --epochs must be an int >= 1. Got 0 instead."),
    ]:
        result = invoke("demo", "--out", tmp_path / "other", *args)
        assert result.exit_code == 1 and result.output.strip() == message
    result = invoke("demo", "--out", out, "--epochs", 1, "--budget", 0, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "coverage.json").read_text())["layer"] == "fc2"


@pytest.mark.parametrize(
    "parts, library, expected",
    [
        (
            (Param("batch_size"), " must be an int >= 1. Got 0 instead."),
            "The 'batch_size' parameter must be an int >= 1. Got 0 instead.",
            "--batch-size must be an int >= 1. Got 0 instead.",
        ),
        (
            ("pass ", Param("scale", "none"), " to keep them"),
            "pass scale='none' to keep them",
            "pass --scale none to keep them",
        ),
        (
            (
                "made for ",
                Param("layer", "fc2"),
                " and ",
                Param("m", 8),
                "; drop ",
                Param("layer"),
                " and ",
                Param("m"),
            ),
            "made for layer='fc2' and m=8; drop the 'layer' parameter and the 'm' parameter",
            "made for --layer fc2 and --m 8; drop --layer and --m",
        ),
        (
            ("made with ", Param("mutators", "gauss(std=0.05),rotate")),
            "made with mutators='gauss(std=0.05),rotate'",
            "made with --mutators 'gauss(std=0.05),rotate'",
        ),
        (("made with ", Param("clusters", [2, 3])), "made with clusters='2,3'", "made with --clusters 2,3"),
        (
            ("pass ", Param("overwrite", True), " to replace it"),
            "pass overwrite=True to replace it",
            "pass --force to replace it",
        ),
        (("pass ", Param("x_train")), "pass the 'x_train' parameter", "pass --train"),
        # a mutator's own parameters, layers' names and specs are words, not Params: left as they are
        (
            ("The 'limit' parameter of rotate must be a float",),
            "The 'limit' parameter of rotate must be a float",
            "The 'limit' parameter of rotate must be a float",
        ),
        (
            ("bad spec 'rotate(limit=30)'; rotate has no parameter 'alpha'",),
            "bad spec 'rotate(limit=30)'; rotate has no parameter 'alpha'",
            "bad spec 'rotate(limit=30)'; rotate has no parameter 'alpha'",
        ),
        (("split='test' was asked for",), "split='test' was asked for", "split='test' was asked for"),
        # a parameter no option sets keeps the library's words
        (
            (Param("aggregate"), " must be sum"),
            "The 'aggregate' parameter must be sum",
            "The 'aggregate' parameter must be sum",
        ),
    ],
)
def test_errors_name_flags(parts, library, expected):
    from idcgen.commandline import in_cli_words

    error = ParameterError(*parts)
    assert str(error) == library
    assert in_cli_words(error, app) == expected
    assert pickle.loads(pickle.dumps(error)).parts == error.parts  # as a Ray worker sends it


def _parameters_in_words(source: str, flags: dict) -> list[str]:
    """The parameters with a flag that a raise in ``source`` names in words ("the 'm' parameter", "scale='none'"),
    which the command line would show as they are."""
    import ast
    import re

    words = re.compile(r"(?<!\w)(?:[Tt]he )?'(\w+)' parameters?\b(?! of )")  # a mutator's own: "'std' parameter of"
    assigned = re.compile(r"(?<![\w(])(\w+)=(?:'|\{)")  # not inside a spec: rotate(limit=30)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            for arg in node.exc.args:
                pieces = [arg] if isinstance(arg, ast.Constant) else getattr(arg, "values", [])
                text = "".join(
                    p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else "{}" for p in pieces
                )
                found += [m.group(0) for m in [*words.finditer(text), *assigned.finditer(text)] if m.group(1) in flags]
    return found


def test_no_error_names_a_parameter_with_a_flag_in_words():
    """Such a parameter is a Param of the message, which the command line spells as its flag."""
    from idcgen.commandline import parameter_flags

    flags = parameter_flags(app)
    assert _parameters_in_words("raise ParameterError(f\"The 'm' parameter must; pass scale='none' {x}\")", flags) == [
        "The 'm' parameter",
        "scale='",
    ]
    root = Path(__file__).resolve().parents[1] / "idcgen"
    found = {str(p.relative_to(root)): _parameters_in_words(p.read_text(), flags) for p in sorted(root.rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_flags_of_parameters_are_read_from_the_options_the_commands_declare():
    """No table typed by hand: each parameter's flag is an option of some command, its own name or one it
    records as also set (overwrite: --force), and every name the former hand-written table held is there."""
    import inspect

    import typer

    from idcgen.cli import app
    from idcgen.commandline import parameter_flags

    declared = {
        flag
        for command in app.registered_commands
        for p in inspect.signature(command.callback).parameters.values()
        if isinstance(p.default, typer.models.OptionInfo)
        for flag in p.default.param_decls
    }
    flags = parameter_flags(app)
    assert set(flags.values()) <= declared
    former = {
        "alpha": "--alpha", "analysis": "--analysis", "architecture": "--architecture", "beta": "--beta",
        "budget": "--budget", "batch_size": "--batch-size", "threshold": "--threshold", "scaling": "--scaling",
        "top": "--top", "clusters": "--clusters", "crop": "--crop", "labels": "--labels", "task": "--task",
        "class_names": "--class-names", "cluster_method": "--cluster-method", "correct_only": "--correct-only",
        "criteria": "--criteria", "epochs": "--epochs", "force": "--force", "guide": "--guide",
        "image_shape": "--image-shape", "layer": "--layer", "limit": "--limit", "limit_test": "--limit-test",
        "m": "--m", "measure": "--measure", "mode": "--mode", "model": "--model", "mutators": "--mutators",
        "no_round": "--no-round", "no_validity": "--no-validity", "only_class": "--class", "oracle": "--oracle",
        "out": "--out", "overwrite": "--force", "pair": "--pair", "preprocess": "--preprocess",
        "random_state": "--random-state", "relevance_of": "--relevance-of", "repeats": "--repeats",
        "resize": "--resize", "scale": "--scale", "scheduler": "--scheduler", "seeds": "--seeds", "train": "--train",
        "value_range": "--value-range", "tol": "--tol", "measures": "--measures", "units": "--units",
        "hypotheses": "--hypotheses", "workers": "--workers", "by": "--by", "passes": "--passes",
        "tolerance": "--tolerance", "x_train": "--train", "device": "--device", "precision": "--precision",
        "gpus_per_worker": "--gpus-per-worker",
    }  # fmt: skip
    assert {name: flags.get(name) for name in former} == former


def test_library_errors_reach_the_user_as_flags(trained_lenet, tmp_path):
    _, path = trained_lenet
    np.save(tmp_path / "floats.npy", np.full((5, 28, 28), 200.0, np.float32))  # 0..255 floats, model takes 0..1
    result = invoke("analyze", "--model", path, "--train", tmp_path / "floats.npy")
    assert result.exit_code == 1 and "--scale 255" in result.output and "scale=" not in result.output
    result = invoke(
        "fuzz",
        "--model",
        path,
        "--seeds",
        tmp_path / "floats.npy",
        "--scale",
        "255",
        "--budget",
        10,
        "--batch-size",
        0,
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 1
    assert "error: --batch-size must be an int >= 1. Got 0 instead." in result.output


@pytest.fixture()
def campaign_files(trained_lenet, data_files, tmp_path):
    """Seeds (40 held-out digits) and a saved analysis (default layer block2_pool1, m = 3, k 2-3)."""
    _, path = trained_lenet
    test = np.load(data_files / "test.npz")
    np.savez(tmp_path / "seeds.npz", x=test["x"][:40], y=test["y"][:40])
    result = invoke(
        "analyze",
        "--model",
        path,
        "--train",
        data_files / "train.npz",
        "--m",
        3,
        "--clusters",
        "2-3",
        "--out",
        tmp_path / "a",
    )
    assert result.exit_code == 0, result.output
    return path, tmp_path / "seeds.npz", tmp_path / "a"


def test_fuzz_m_below_one_is_an_error(campaign_files, data_files, tmp_path):
    path, seeds, _ = campaign_files
    result = invoke(
        "fuzz",
        "--model",
        path,
        "--seeds",
        seeds,
        "--budget",
        64,
        "--train",
        data_files / "train.npz",
        "--m",
        0,
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 1 and result.output.strip() == "error: --m must be an int >= 1. Got 0 instead."
    assert not (tmp_path / "c").exists()


def test_fuzz_refuses_settings_a_saved_analysis_was_not_made_with(campaign_files, tmp_path):
    path, seeds, analysis = campaign_files
    base = [
        "fuzz",
        "--model",
        path,
        "--seeds",
        seeds,
        "--budget",
        64,
        "--batch-size",
        64,
        "--mutators",
        "gauss",
        "--analysis",
        analysis,
    ]
    result = invoke(*base, "--m", 4, "--layer", "block1_conv1", "--out", tmp_path / "c")
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: --analysis {analysis} was made with --layer block2_pool1 (not 'block1_conv1'), --m 3 (not 4); "
        "leave these out to use it, or analyse again with --train"
    )
    result = invoke(*base, "--clusters", "2-5", "--cluster-method", "zero-aware", "--out", tmp_path / "c")
    assert (
        result.exit_code == 1
        and "--clusters 2,3 (not '2,3,4,5'), --cluster-method silhouette (not 'zero-aware')" in result.output
    )
    result = invoke(*base, "--m", 3, "--layer", "block2_pool1", "--out", tmp_path / "c")  # the same values: fine
    assert result.exit_code == 0, result.output
    assert "analysis: layer block2_pool1, m = 3" in result.output


def test_resume_refuses_options_that_differ_from_the_campaign(campaign_files, data_files, tmp_path):
    path, seeds, analysis = campaign_files
    camp = tmp_path / "camp"
    result = invoke(
        "fuzz",
        "--model",
        path,
        "--seeds",
        seeds,
        "--budget",
        128,
        "--batch-size",
        64,
        "--mutators",
        "gauss,rotate",
        "--analysis",
        analysis,
        "--out",
        camp,
    )
    assert result.exit_code == 0, result.output
    before = {p.name: p.read_bytes() for p in camp.iterdir() if p.is_file()}
    result = invoke(
        "fuzz",
        "--resume",
        camp,
        "--batch-size",
        32,
        "--random-state",
        3,
        "--mutators",
        "rotate",
        "--no-validity",
        "--oracle",
        "prediction-change",
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: campaign {camp} was made with --batch-size 64 (not 32), --random-state 0 (not 3), --mutators "
        "'gauss(std=0.05),rotate(limit=30.0)' (not 'rotate(limit=30.0)'), without --no-validity, --oracle "
        "misclassification (not 'prediction-change'); a resumed campaign keeps its settings: leave these out, or "
        "start a new campaign"
    )
    for args, message in [
        (["--seeds", data_files / "test.npz"], f"was made with --seeds {seeds} (not "),
        (["--alpha", 0.5, "--scale", "255"], "--alpha 0.02 (not 0.5), --scale auto (not '255')"),
        (
            ["--limit", 10],
            f"error: a resumed campaign keeps its seeds and its analysis ({camp / 'analysis'}): drop --limit",
        ),
        (["--out", tmp_path / "elsewhere"], f"error: a resumed campaign stays in its folder {camp}: drop --out"),
    ]:
        result = invoke("fuzz", "--resume", camp, *args)
        assert result.exit_code == 1 and message in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert {p.name: p.read_bytes() for p in camp.iterdir() if p.is_file()} == before  # refused before any change
    result = invoke("fuzz", "--resume", camp, "--budget", 100)
    assert result.exit_code == 1
    assert "error: budget 100 is below the 128 execs this campaign has already done" in result.output
    # the same values again are no conflict: the campaign continues
    result = invoke(
        "fuzz", "--resume", camp, "--batch-size", 64, "--seeds", seeds, "--mutators", "gauss,rotate", "--budget", 192
    )
    assert result.exit_code == 0, result.output
    assert json.loads((camp / "campaign.json").read_text())["state"]["execs"] == 192


def test_max_mutations_caps_each_parent_is_recorded_and_kept_on_resume(campaign_files, tmp_path):
    """--max-mutations N: no entry is picked as a parent once it was N times; the campaign ends when none is
    left, records the cap (campaign.json, report) and a resume refuses another one."""
    path, seeds, analysis = campaign_files
    camp = tmp_path / "camp"
    base = ["--model", path, "--seeds", seeds, "--mutators", "gauss", "--analysis", analysis]
    # keep-none: the corpus is the 40 seeds, each picked twice or more (a batch may pick one past the cap)
    result = invoke(
        "fuzz", *base, "--budget", 2000, "--batch-size", 8, "--guide", "keep-none", "--max-mutations", 2, "--out", camp
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((camp / "campaign.json").read_text())
    assert meta["config"]["max_mutations"] == 2
    assert 40 * 2 <= meta["state"]["execs"] < 40 * 2 * 2  # ended early (the budget is 2000)
    report = (camp / "report.md").read_text()
    assert "- settings: max mutations 2" in report and "every corpus entry was a parent 2 times" in report
    result = invoke("fuzz", "--resume", camp, "--max-mutations", 3)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: campaign {camp} was made with --max-mutations 2 (not 3); a resumed campaign keeps its settings: "
        "leave these out, or start a new campaign"
    )
    result = invoke("fuzz", "--resume", camp, "--max-mutations", 2, "--budget", 3000)  # the same: nothing left
    assert result.exit_code == 0, result.output
    assert json.loads((camp / "campaign.json").read_text())["state"]["execs"] == meta["state"]["execs"]
    # without the option the cap is no key of campaign.json (the record of earlier campaigns, as it was)
    result = invoke("fuzz", *base, "--budget", 16, "--batch-size", 8, "--out", tmp_path / "plain")
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "plain" / "campaign.json").read_text())["config"]
    assert "max_mutations" not in config and "settings:" not in (tmp_path / "plain" / "report.md").read_text()
    assert "--max-mutations must be an int >= 1" in invoke("fuzz", *base, "--budget", 16, "--max-mutations", 0).output


def test_resume_from_another_directory_and_a_moved_model(campaign_files, tmp_path, monkeypatch):
    import shutil

    path, seeds, analysis = campaign_files
    (tmp_path / "m").mkdir()
    shutil.copy(path, tmp_path / "m" / "lenet1.keras")
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "fuzz",
        "--model",
        "m/lenet1.keras",
        "--seeds",
        "seeds.npz",
        "--budget",
        64,
        "--batch-size",
        64,
        "--mutators",
        "gauss",
        "--analysis",
        "a",
        "--out",
        "camp",
    )
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "camp" / "campaign.json").read_text())["config"]
    assert config["model"] == str(tmp_path / "m" / "lenet1.keras") and config["seeds"] == str(tmp_path / "seeds.npz")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = invoke("fuzz", "--resume", "../camp", "--budget", 128)
    assert result.exit_code == 0, result.output
    (tmp_path / "m" / "lenet1.keras").rename(tmp_path / "moved.keras")
    result = invoke("fuzz", "--resume", "../camp", "--budget", 192)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: model file not found: {tmp_path / 'm' / 'lenet1.keras'} (the model "
        "campaign ../camp recorded); give --model to override it"
    )
    result = invoke("fuzz", "--resume", "../camp", "--budget", 192, "--model", "../moved.keras")
    assert result.exit_code == 0, result.output
    # a campaign written before paths were recorded absolute: the message says the path was relative
    meta = json.loads((tmp_path / "camp" / "campaign.json").read_text())
    meta["config"]["model"] = "m/lenet1.keras"
    (tmp_path / "camp" / "campaign.json").write_text(json.dumps(meta, indent=2) + "\n")
    result = invoke("fuzz", "--resume", "../camp", "--budget", 256)
    assert result.exit_code == 1 and result.output.strip() == (
        "error: model file not found: m/lenet1.keras (the model campaign ../camp recorded, relative to the "
        "directory it was started in); give --model to override it"
    )
    # an option the recorded model's framework refuses is said as it is: no --model would mend it
    result = invoke("fuzz", "--resume", "../camp", "--budget", 256, "--model", "../moved.keras", "--precision", "bf16")
    assert result.exit_code == 1
    assert result.output.strip() == "error: --precision bf16 is for PyTorch models; Keras models run in fp32"
    meta["config"]["model"] = str(tmp_path / "moved.keras")
    (tmp_path / "camp" / "campaign.json").write_text(json.dumps(meta, indent=2) + "\n")
    result = invoke("fuzz", "--resume", "../camp", "--budget", 256, "--precision", "bf16")
    assert result.exit_code == 1
    assert result.output.strip() == "error: --precision bf16 is for PyTorch models; Keras models run in fp32"
    # a campaign that records no model file (one started from Python on a model object) is resumed with --model;
    # without it, load_networks took Path(None): a TypeError's traceback
    meta["config"]["model"] = None
    (tmp_path / "camp" / "campaign.json").write_text(json.dumps(meta, indent=2) + "\n")
    result = invoke("fuzz", "--resume", "../camp", "--budget", 256)
    assert result.exit_code == 1 and result.output.strip() == (
        "error: ../camp records no model file (a campaign started from Python on a model object); give --model"
    ), result.output


def test_the_campaign_summary_counts_in_the_right_number():
    """ "1 findings (1 survive uint8 rounding)" was printed for a campaign with one finding."""
    from idcgen.campaigns import _count

    assert [_count(n, "finding") for n in (0, 1, 2)] == ["0 findings", "1 finding", "2 findings"]
    assert [_count(n, "survive", "survives") for n in (0, 1, 5)] == ["0 survive", "1 survives", "5 survive"]

"""The way into the core (docs/design.md, "Settings"): options parsed once at the edge into settings groups, a
campaign built from one CampaignSettings, and no function with a long parameter list."""

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.errors import ParameterError
from idcgen.options import AnalysisOptions, CampaignOptions, ConventionOptions, InputOptions, ModelsOptions

ROOT = Path(__file__).resolve().parents[1]


def test_a_group_parses_each_option_once_and_names_the_flag_when_it_cannot():
    wanted = AnalysisOptions.from_typed({"clusters": "2-4", "m": 3, "layer": None}, given=("m", "clusters"))
    assert wanted.clusters == (2, 3, 4) and wanted.m == 3 and wanted.layer is None
    assert wanted.resolved("cluster_method") == "silhouette" and wanted.resolved("m") == 3
    assert wanted.given == ("m", "clusters") and wanted.typed("m") and not wanted.typed("layer")
    with pytest.raises(ParameterError) as bad:
        ConventionOptions.from_typed({"value_range": "3,1"})
    assert str(bad.value).endswith("(--value-range)") and "LO < HI" in str(bad.value)
    with pytest.raises(ParameterError, match=r"^The 'm' parameter must be an int >= 1"):  # the CLI spells it --m
        AnalysisOptions.from_typed({"m": 0})
    # canonical forms, as a campaign records them
    options = CampaignOptions.from_typed({"mutators": "gauss,rotate", "scheduler": "uniform"})
    assert options.mutators == ("gauss(std=0.05)", "rotate(limit=30.0)") and options.scheduler == "uniform"
    assert InputOptions.from_typed({"resize": "66x200"}).resize == (66, 200)
    assert ModelsOptions.from_typed({"model": None, "architecture": None}).model == ()


def test_groups_are_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        AnalysisOptions().m = 3


def test_a_command_with_one_option_in_two_groups_is_a_programming_error():
    from idcgen.commandline import _expand_groups

    def clash(wanted: AnalysisOptions, again: AnalysisOptions):
        """Two groups, one --layer."""

    with pytest.raises(TypeError, match="more than one group"):
        _expand_groups(clash)


def _count_calls(monkeypatch, name: str) -> list:
    """Wrap function ``name`` wherever an idcgen module holds it; returns the list each call appends to."""
    calls = []
    for module in [m for k, m in sys.modules.items() if k.startswith("idcgen")]:
        original = getattr(module, name, None)
        if callable(original) and getattr(original, "__module__", "").startswith("idcgen"):

            def counted(*args, _original=original, **kwargs):
                calls.append(args)
                return _original(*args, **kwargs)

            monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.slow
def test_a_fresh_campaign_parses_the_value_range_once_and_reads_its_analysis_once(
    trained_lenet, digits, tmp_path, monkeypatch
):
    import idcgen.convention  # noqa: F401 (every module holding the parser is loaded before it is counted)
    import idcgen.data.loading  # noqa: F401
    import idcgen.fuzz.fuzzer  # noqa: F401
    import idcgen.session  # noqa: F401
    from idcgen.analysis import Analysis
    from idcgen.cli import app

    _, path = trained_lenet
    x_train, y_train, x_test, y_test = digits
    np.savez(tmp_path / "train.npz", x=(x_train[:600, ..., 0] * 255).round().astype(np.uint8), y=y_train[:600])
    from PIL import Image

    for i, (image, label) in enumerate(zip(x_test[:20, ..., 0], y_test[:20])):  # a folder: --resize and --crop apply
        (tmp_path / "seeds" / str(int(label))).mkdir(parents=True, exist_ok=True)
        Image.fromarray((image * 255).round().astype(np.uint8)).save(tmp_path / "seeds" / str(int(label)) / f"{i}.png")
    runner = CliRunner()
    made = runner.invoke(
        app,
        [
            "analyze",
            "--model",
            str(path),
            "--train",
            str(tmp_path / "train.npz"),
            "--m",
            "3",
            "--clusters",
            "2-3",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert made.exit_code == 0, made.output
    parsed = _count_calls(monkeypatch, "parse_value_range")
    others = {
        name: _count_calls(monkeypatch, name)
        for name in ("parse_image_shape", "parse_preprocess", "parse_resize", "parse_crop", "parse_class_names")
    }
    loads = []
    original = Analysis.load.__func__
    monkeypatch.setattr(Analysis, "load", classmethod(lambda cls, *a, **k: loads.append(a) or original(cls, *a, **k)))
    result = runner.invoke(
        app,
        [
            "fuzz",
            "--model",
            str(path),
            "--seeds",
            str(tmp_path / "seeds"),
            "--budget",
            "64",
            "--batch-size",
            "32",
            "--mutators",
            "gauss",
            "--value-range",
            "0,1",
            "--image-shape",
            "28,28,1",
            "--resize",
            "28x28",
            "--crop",
            "0,0,0,0",
            "--analysis",
            str(tmp_path / "a"),
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(parsed) == 1 and parsed[0] == ("0,1",)
    # each option typed is parsed once, at the edge; one not typed (--preprocess, --class-names) never
    assert {name: [a[0] for a in calls] for name, calls in others.items()} == {
        "parse_image_shape": ["28,28,1"],
        "parse_preprocess": [],
        "parse_resize": ["28x28"],
        "parse_crop": ["0,0,0,0"],
        "parse_class_names": [],
    }
    assert len(loads) == 1 and Path(loads[0][0]) == tmp_path / "a"


def test_a_fresh_campaign_builds_its_settings_once(trained_lenet, digits, tmp_path, monkeypatch):
    """Option groups -> one CampaignSettings (campaign_settings) -> the fuzzer's record (Fuzzer.settings, once):
    Fuzzer.start writes the record from_settings built, it does not build the settings again."""
    import idcgen
    import idcgen.campaigns as campaigns
    from idcgen.cli import app
    from idcgen.fuzz.fuzzer import Fuzzer

    model, path = trained_lenet
    x_train, y_train, x_test, y_test = digits
    idcgen.analyze(model, x_train[:300], y_train[:300], m=2, progress=False).save(tmp_path / "a")
    np.savez(tmp_path / "seeds.npz", x=(x_test[:16, ..., 0] * 255).round().astype(np.uint8), y=y_test[:16])
    built = {"campaign_settings": 0, "Fuzzer.settings": 0}
    made, recorded = campaigns.campaign_settings, Fuzzer.settings

    def counted_made(*args, **kwargs):
        built["campaign_settings"] += 1
        return made(*args, **kwargs)

    def counted_recorded(self, *args, **kwargs):
        built["Fuzzer.settings"] += 1
        return recorded(self, *args, **kwargs)

    monkeypatch.setattr(campaigns, "campaign_settings", counted_made)
    monkeypatch.setattr(Fuzzer, "settings", counted_recorded)
    args = ["--model", str(path), "--seeds", str(tmp_path / "seeds.npz"), "--analysis", str(tmp_path / "a")]
    result = CliRunner().invoke(
        app,
        ["fuzz", *args, "--budget", "32", "--batch-size", "16", "--mutators", "gauss", "--out", str(tmp_path / "c")],
    )
    assert result.exit_code == 0, result.output
    assert built == {"campaign_settings": 1, "Fuzzer.settings": 1}
    config = json.loads((tmp_path / "c" / "campaign.json").read_text())["config"]
    assert config["budget"] == 32 and config["mutators"] == ["gauss(std=0.05)"] and config["layer"] is not None


def _parameter_counts(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
                if names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                n = len(names) + (a.vararg is not None) + (a.kwarg is not None)  # *args and **kwargs: one each
                yield n, f"{path.relative_to(ROOT)}:{node.lineno}:{node.name}"


def test_no_command_takes_more_than_twelve_parameters():
    """The command line's functions take settings groups, not one parameter per option."""
    long = [(n, where) for n, where in _parameter_counts(ROOT / "idcgen") if n > 12 and "cli.py" in where]
    assert not long, long


def test_no_function_takes_more_than_twelve_parameters():
    """What belongs together travels as one frozen settings object (a CampaignSettings, an InputConvention,
    a Clustering, ...), so no function of idcgen/ takes more than 12 parameters (self and cls not counted,
    *args and **kwargs one each)."""
    long = sorted((n, where) for n, where in _parameter_counts(ROOT / "idcgen") if n > 12)
    assert not long, long

"""Per mutator, the IDC its kept inputs gained and the change they made (idcgen/fuzz/credit.py), in the
campaign's report and exports. Run on the framework-free double of tests/doubles.py."""

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest

CHEAP = ["gauss(std=0.05)", "random_pixels", "rotate", "brightness"]


@pytest.fixture(scope="module")
def setup(digits):
    from doubles import NumpyNet
    from idcgen.analysis import analyze

    x_train, y_train, x_test, y_test = digits
    network = NumpyNet.fit(x_train, y_train)
    analysis = analyze(network, x_train[:1000], y_train[:1000], layer="hidden", m=6, progress=False)
    return analysis, x_test[:60], y_test[:60]


def _campaign(analysis, x, y, folder=None, guide="idc", budget=512):
    from idcgen.fuzz.fuzzer import Fuzzer

    fuzzer = Fuzzer(analysis, mutators=CHEAP, random_state=3, batch_size=64, guide=guide)
    if folder is None:
        return fuzzer.run(x, y, budget=budget, progress=False)
    c = fuzzer.start(x, y, folder, budget=budget)
    fuzzer.run(c, progress=False)
    return c


@pytest.mark.parametrize("block", [512, 2])  # 2: the distances gathered and computed in several blocks
def test_one_row_by_hand_on_a_corpus_built_by_hand(block, monkeypatch):
    from idcgen.fuzz import credit
    from idcgen.fuzz.credit import credit_csv, first_reached, mutator_credit

    monkeypatch.setattr(credit, "_BLOCK", block)

    # 2 seeds (combinations 0, 1), then five mutants: a-b-a-b-a by their chains' last mutator
    x = np.zeros((7, 2, 2, 1), np.float32)
    x[1] = 0.5
    x[2, 0, 0, 0] = 0.1  # from seed 0: L2 0.1, L-inf 0.1
    x[3] = 0.5
    x[3, 1, 1, 0] = 0.9  # from seed 1: L2 0.4, L-inf 0.4 (b)
    x[4, 0, 0, 0], x[4, 0, 1, 0] = 0.3, 0.4  # from seed 0: L2 0.5, L-inf 0.4
    x[5] = 0.5  # b, identical to its seed: nothing moved
    x[6, :, :, 0] = 0.2  # from seed 0: L2 0.4, L-inf 0.2
    corpus = SimpleNamespace(
        x=x,
        parent=np.array([-1, -1, 0, 1, 2, 1, 0]),
        root=np.array([0, 1, 0, 1, 0, 1, 0]),
        combination=np.array([0, 1, 5, 6, 5, 1, 7]),  # entry 4 repeats 2's, entry 5 its seed's: no gain
        chains=[[], [], ["a"], ["b"], ["a", "a"], ["b"], ["b", "a"]],
    )
    campaign = SimpleNamespace(
        corpus=corpus,
        tracker=SimpleNamespace(total=20),
        mutator_stats={"a": None, "b": None, "c": None},
        value_range=(0.0, 1.0),
    )
    assert first_reached(corpus.combination).tolist() == [True, True, True, True, False, False, True]
    rows = {r["mutator"]: r for r in mutator_credit(campaign)}
    a = rows["a"]  # kept inputs 2, 4, 6; first reached 5 (by 2) and 7 (by 6): 2 of 20 combinations
    assert (
        a["kept_inputs"] == 3 and a["idc_gained"] == pytest.approx(2 / 20) and a["idc_gained_pp"] == pytest.approx(10)
    )
    assert a["median_l2"] == pytest.approx(0.4) and a["median_linf"] == pytest.approx(0.2)
    assert a["idc_gained_pp_per_linf"] == pytest.approx(10 / 0.2)
    b = rows["b"]  # kept inputs 3 and 5: one new combination; L-inf 0.4 and 0
    assert b["kept_inputs"] == 2 and b["idc_gained"] == pytest.approx(1 / 20)
    assert b["median_linf"] == pytest.approx(0.2) and b["idc_gained_pp_per_linf"] == pytest.approx(5 / 0.2)
    c = rows["c"]  # kept nothing
    assert c["kept_inputs"] == 0 and c["idc_gained"] == 0 and c["median_l2"] is None
    assert c["idc_gained_pp_per_linf"] is None
    # the same in a [0, 255] range: the changes are in widths of the range, so nothing moves
    campaign.value_range, corpus.x = (0.0, 255.0), x * 255
    assert mutator_credit(campaign)[0]["median_linf"] == pytest.approx(0.2)
    text = list(csv.DictReader(credit_csv(mutator_credit(campaign)).splitlines()))
    assert text[0]["mutator"] == "a" and float(text[0]["idc_gained_pp_per_linf"]) == pytest.approx(50)
    assert text[2]["median_l2"] == "" and text[2]["kept_inputs"] == "0"


def test_report_and_exports_show_the_change_per_mutator(setup, tmp_path):
    from idcgen.export import export_campaign
    from idcgen.quality import distances
    from idcgen.report import write_report

    analysis, x, y = setup
    c = _campaign(analysis, x, y, tmp_path / "c")
    summary = export_campaign(c, images=False)
    text = write_report(c, exports=summary).read_text()
    assert "### IDC gained for the change it makes" in text

    # one row by hand, from the saved manifest and the exported grown set
    manifest = [json.loads(line) for line in (c.folder / "manifest.jsonl").read_text().splitlines()]
    name = max(c.mutator_stats, key=lambda k: c.mutator_stats[k].kept)  # the mutator that kept most
    grown = np.load(c.folder / "exports" / "grown.npz")
    ids = [r["id"] for r in manifest if r["chain"] and r["chain"][-1] == name]
    assert len(ids) >= 3, "the campaign is too short to test"
    d = distances(grown["x"][ids], grown["x"][grown["root"][ids]], (0.0, 1.0))
    gained = 100 * len(ids) / c.tracker.total  # guided by IDC, every kept input reached a new combination
    median_linf = float(np.median(d["linf"]))
    row = f"| `{name}` | {len(ids)} | {gained:+.2f} pp | {np.median(d['l2']):.3g} | {median_linf:.3g} | "
    row += f"{gained / median_linf:+.3g} pp |"
    assert row in text.splitlines()
    exported = {r["mutator"]: r for r in csv.DictReader((c.folder / "exports" / "mutators.csv").open())}
    assert int(exported[name]["kept_inputs"]) == len(ids)
    assert float(exported[name]["idc_gained_pp_per_linf"]) == pytest.approx(gained / median_linf, rel=1e-5)
    assert {r["mutator"] for r in summary["mutators"]} == set(c.mutator_stats)
    assert summary["files"]["mutators"] == "mutators.csv"
    # every combination is the seeds' or a mutator's: the gains add up to the grown set's IDC
    seeds_idc = c.stats_rows()[0]["idc"]
    assert seeds_idc + sum(r["idc_gained"] for r in summary["mutators"]) == pytest.approx(c.tracker.score)


def test_unguided_campaign_credits_only_new_combinations(setup):
    from idcgen.fuzz.credit import mutator_credit
    from idcgen.report import mutator_table

    analysis, x, y = setup
    c = _campaign(analysis, x, y, guide="none", budget=256)
    rows = mutator_credit(c)
    # guided by nothing, every valid mutant is kept, most of them in combinations already reached
    assert sum(r["kept_inputs"] for r in rows) == len(c.corpus) - c.corpus.n_seeds
    assert sum(r["kept_inputs"] for r in rows) > sum(r["idc_gained"] for r in rows) * c.tracker.total
    seeds = len(set(c.corpus.combination[: c.corpus.n_seeds].tolist())) / c.tracker.total
    assert seeds + sum(r["idc_gained"] for r in rows) == pytest.approx(c.tracker.score)
    table = {r["mutator"]: r["idc_gain"] for r in mutator_table(c)}
    assert table == pytest.approx({r["mutator"]: r["idc_gained"] for r in rows})

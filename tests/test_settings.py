"""Typed campaign settings (idcgen.fuzz.settings): the record campaign.json holds, what files of earlier
versions ran with, and the field a resume names when it differs."""

import dataclasses
import json

import pytest

from idcgen.fuzz.settings import CampaignSettings, Sources, ValiditySettings


def settings(**changes):
    base = CampaignSettings(
        budget=1000,
        mutators=("gauss(std=0.05)", "rotate(limit=30)"),
        oracle="misclassification",
        validity=ValiditySettings(True, 0.02, 0.2),
        value_range=(0.0, 1.0),
        input_shape=(28, 28, 1),
        layer="fc2",
        m=8,
        sources=Sources(model="/m/lenet5.keras", seeds="/d/seeds.npz", crop="1,2,3,4", resize="8x8"),
    )
    return base.replace(**changes)


def test_the_record_round_trips_through_json():
    s = settings(
        measure=("nc",),
        measure_specs=("nc(threshold=0.5)",),
        task="regression",
        parallel={"workers": 2, "budget": 2000},
    )
    again = CampaignSettings.from_dict(json.loads(json.dumps(s.to_dict())))
    assert again == s and again.input_convention == s.input_convention
    record = s.to_dict()  # the flat keys earlier readers know
    assert record["validity"] == {"enabled": True, "alpha": 0.02, "beta": 0.2} and record["task"] == "regression"
    assert record["crop"] == "1,2,3,4" and record["model"] == "/m/lenet5.keras" and "labels" not in record


def test_a_record_of_an_earlier_version_reads_with_what_it_ran_with():
    old = {
        "budget": 500,
        "mutators": ["gauss(std=0.05)"],
        "oracle": "misclassification",
        "scheduler": "prioritized",
        "batch_size": 64,
        "random_state": 3,
        "value_range": [0, 1],
        "validity": {"enabled": True, "alpha": 0.02, "beta": 0.2},
        "input_shape": [28, 28, 1],
        "model": "lenet5.keras",
        "seeds": "seeds.npz",
    }
    s = CampaignSettings.from_dict(old)
    assert s.guide == "idc" and s.measure == () and s.rounding is False and s.storage == "float32"
    assert s.task == "classification" and s.sources.scale == "auto" and s.sources.model == "lenet5.keras"


def test_differences_name_each_field_and_the_budget_may_change():
    a = settings()
    assert a.differences(a.replace(budget=5000)) == []
    changed = a.differences(
        a.replace(
            batch_size=32, sources=Sources(model="/m/lenet5.keras", seeds="/d/other.npz", crop="1,2,3,4", resize="8x8")
        )
    )
    assert changed == [("batch_size", 256, 32), ("seeds", "/d/seeds.npz", "/d/other.npz")]
    assert a.differences(a.replace(budget=5000), ignore=()) == [("budget", 1000, 5000)]


def test_settings_are_frozen():
    # the assignment itself is refused (any other error, such as a typo'd attribute, would not be this one)
    s = settings()
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'budget'"):
        s.budget = 3
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'alpha'"):
        s.validity.alpha = 0.5
    assert s.budget == 1000 and s.validity.alpha == 0.02

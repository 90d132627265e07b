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


def test_a_setting_written_only_when_set_leaves_the_record_as_it_was():
    """max_mutations (a campaign option added later): no key unless set, so campaign.json of a campaign
    without it is what earlier idcgens wrote; a record without the key reads as no cap."""
    s = settings()
    assert "max_mutations" not in s.to_dict() and s.max_mutations is None
    capped = s.replace(max_mutations=3)
    record = capped.to_dict()
    assert record["max_mutations"] == 3 and list(record)[:5] == [
        "budget",
        "mutators",
        "oracle",
        "scheduler",
        "max_mutations",
    ]
    assert CampaignSettings.from_dict(json.loads(json.dumps(record))) == capped
    assert s.differences(capped) == [("max_mutations", None, 3)]


def test_the_record_keeps_the_keys_in_the_order_of_earlier_versions():
    s = settings(parallel={"workers": 2}, sources=Sources(model="/m", seeds="/s", limit=5, crop="1,2,3,4"))
    assert (
        list(s.to_dict())
        == (
            "budget mutators oracle scheduler batch_size random_state value_range validity guide measure layer m "
            "input_shape input_convention storage rounding measure_specs model other_models architectures seeds train "
            "analysis_source notes scale resize class_names limit crop parallel"
        ).split()
    )


def test_the_report_lists_a_setting_it_does_not_tell_otherwise():
    from idcgen.report import _other_settings

    assert _other_settings(settings()) == []  # every setting of today is told in the report's own words
    assert _other_settings(settings(max_mutations=3)) == ["- settings: max mutations 3"]

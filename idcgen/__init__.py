"""idcgen: coverage-guided test-input generation for Keras and PyTorch classifiers, built on Importance-Driven
Coverage (DeepImportance, ICSE 2020).

    import idcgen
    model = idcgen.load_model("m.h5")
    train = idcgen.load_inputs("mnist:train")
    analysis = idcgen.analyze(model, train.x, train.y, m=8)
    analysis.coverage(idcgen.load_inputs("mnist:test").x)   # CoverageResult(score=..., covered=..., total=...)

TensorFlow (or PyTorch) is imported only by the framework package (idcgen/framework), when a model is
loaded or wrapped, so the numpy-only parts, analyses and campaigns load without it.
"""

import os
from importlib import import_module

# albumentations asks PyPI for a newer version on import: a network call on every run, and a hang
# where there is no network. idcgen never reaches out at run time.
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

__version__ = "0.1.0"

_NAMES = {
    "load_inputs": "data",
    "fit_to_model": "data",
    "Dataset": "data",
    "silhouette_1d": "clusters",
    "kmeans_1d": "clusters",
    "cluster_neuron": "clusters",
    "Combinations": "coverage",
    "CoverageTracker": "coverage",
    "CoverageResult": "coverage",
    "load_model": "framework",
    "Network": "framework",
    "convert": "framework",
    "InputConvention": "convention",
    "parse_preprocess": "convention",
    "Relevance": "relevance",
    "input_relevance": "relevance",
    "analyze": "analysis",
    "Analysis": "analysis",
    "Clustering": "analysis",
    "RelevanceSettings": "analysis",
    "Fuzzer": "fuzz.fuzzer",
    "Campaign": "fuzz.campaign",
    "Validity": "fuzz.validity",
    "make_mutator": "fuzz.mutators",
    "parse_mutators": "fuzz.mutators",
    "export_campaign": "export",
    "write_report": "report",
    "harden": "hardening",
    "make_criterion": "criteria",
    "inspect": "deepinspect",
    "InspectResult": "deepinspect",
    "affinity": "deepbase",
    "AffinityResult": "deepbase",
    "prioritize": "prioritization",
    "Ranking": "prioritization",
    "apfd": "prioritization",
    "IdcgenError": "errors",
    "ModelError": "errors",
    "LayerError": "errors",
    "InputError": "errors",
    "ParameterError": "errors",
    "AnalysisMismatchError": "errors",
    "DeviceError": "errors",
}

__all__ = sorted(_NAMES) + ["__version__"]


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'idcgen' has no attribute {name!r}")

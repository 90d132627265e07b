"""The framework boundary: one protocol (idcgen.framework.Network) between idcgen and Keras. Saved analyses
and finished campaigns are read, measured in numpy and reported where TensorFlow cannot be imported; the
input convention is a field of the network; LRP rules are classes registered per layer kind."""

import json
import subprocess
import sys

import numpy as np
import pytest

#: run first in a child interpreter: any import of TensorFlow or Keras fails from then on
BLOCK_FRAMEWORKS = "import sys\nfor blocked in ('tensorflow', 'keras', 'tf_keras'):\n    sys.modules[blocked] = None\n"


@pytest.fixture(scope="module")
def finished(trained_lenet, digits, tmp_path_factory):
    """A saved analysis and a finished campaign of LeNet-1: (analysis folder, campaign folder, the IDC of
    a test slice and its combination ids as measured here)."""
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:800], y_train[:800], layer="block2_conv1", m=5, progress=False)
    folder = analysis.save(tmp_path_factory.mktemp("a") / "analysis")
    fuzzer = Fuzzer(analysis, mutators=["rotate", "gauss(std=0.05)"], batch_size=32, random_state=0)
    campaign = fuzzer.start(x_test[::25], y_test[::25], tmp_path_factory.mktemp("c") / "campaign", budget=96)
    fuzzer.run(campaign, progress=False)
    campaign.close()
    acts = analysis.activations(x_test[:200])
    return folder, campaign.folder, acts, analysis.combinations.ids(acts), campaign.state()


def run_without_tensorflow(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", BLOCK_FRAMEWORKS + code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_analysis_and_campaign_read_and_reported_without_tensorflow(finished, tmp_path):
    analysis_folder, campaign_folder, acts, ids, state = finished
    np.save(tmp_path / "acts.npy", acts)
    out = run_without_tensorflow(
        "import json, numpy as np\n"
        "import idcgen\n"
        "from idcgen.fuzz.campaign import Campaign\n"
        "from idcgen.report import write_report\n"
        f"analysis = idcgen.Analysis.load({str(analysis_folder)!r})\n"
        f"ids = analysis.combinations.ids(np.load({str(tmp_path / 'acts.npy')!r}))\n"
        f"campaign = Campaign.load({str(campaign_folder)!r})\n"
        "report = write_report(campaign)\n"
        "assert sys.modules['tensorflow'] is None and sys.modules['keras'] is None   # never imported\n"
        "print(json.dumps({'layer': analysis.layer, 'm': analysis.m, 'total': analysis.total, 'ids': ids.tolist(),\n"
        "                  'execs': campaign.state()['execs'], 'covered': campaign.coverage['idc'].covered,\n"
        "                  'report': str(report), 'text': report.read_text()}))\n"
    )
    got = json.loads(out.strip().splitlines()[-1])
    assert (got["layer"], got["m"]) == ("block2_conv1", 5) and got["total"] > 1
    assert got["ids"] == ids.tolist()
    assert got["execs"] == state["execs"] > 0
    assert got["covered"] > 0
    assert got["report"].endswith("report.md") and "# Fuzz campaign report" in got["text"]


def test_network_dispatches_to_the_framework_of_the_model(trained_lenet):
    from idcgen.framework import Network, as_network, load_network
    from idcgen.framework.keras_network import KerasNetwork

    model, path = trained_lenet
    network = Network(model)
    assert type(network) is KerasNetwork and isinstance(network, Network)
    assert as_network(network) is network
    loaded = load_network(path)
    assert isinstance(loaded, KerasNetwork) and loaded.fingerprint() == network.fingerprint()
    from idcgen.errors import ModelError

    with pytest.raises(ModelError, match="model file not found: not a model"):  # a path is loaded
        Network("not a model")
    with pytest.raises(ModelError, match="cannot run a builtins.object"):
        Network(object())


def test_the_input_convention_is_a_field_of_the_network(trained_lenet):
    import idcgen
    from idcgen.framework import Network, network_with_convention

    model, _ = trained_lenet
    plain = Network(model)
    assert plain.convention is None and plain.inner is plain.model
    network, convention = network_with_convention(plain)
    assert network is plain and network.convention == convention and convention.value_range == (0.0, 1.0)
    wrapped, convention = network_with_convention(model, preprocess="mean=0.5,std=0.25", value_range="0,1")
    assert wrapped.convention is convention and convention.preprocess.spec == "mean=0.5,std=0.25"
    assert wrapped.inner is model and wrapped.model is not model
    assert not any(name.startswith("_idcgen") for name in vars(wrapped.model))  # nothing set on Keras objects
    x = np.random.default_rng(0).random((4, 28, 28, 1), dtype=np.float32)
    np.testing.assert_allclose(wrapped.forward(x)[0], plain.forward((x - 0.5) / 0.25)[0], rtol=1e-5, atol=1e-6)
    again, same = network_with_convention(wrapped, recorded=convention)  # a wrapped network keeps its wrapper
    assert again is wrapped and same == convention
    assert idcgen.Network is Network


def test_an_lrp_rule_is_one_registered_class(monkeypatch):
    import keras

    from idcgen.framework import keras_lrp
    from idcgen.framework.keras_lrp import Epsilon, PassThrough, Rule, register, rule_of

    assert isinstance(rule_of(keras.layers.Dense(2)), Epsilon)
    assert isinstance(rule_of(keras.layers.ReLU()), PassThrough)
    assert rule_of(keras.layers.Softmax()) is None and "Softmax" not in keras_lrp.supported()

    class OwnDense(keras.layers.Dense):  # a subclass of a registered kind gets its rule
        pass

    assert isinstance(rule_of(OwnDense(2)), Epsilon)

    monkeypatch.setattr(keras_lrp, "_LAYER_RULES", dict(keras_lrp._LAYER_RULES))

    @register("Softmax")
    class Identity(Rule):
        def explain(self, step, inputs, relevance, lrp):
            return [relevance]

    assert isinstance(rule_of(keras.layers.Softmax()), Identity)
    assert "Softmax" in keras_lrp.supported()

"""PyTorch LRP rules as registered classes (idcgen/framework/torch_lrp.py), as the Keras ones are: every operation
with a rule has its class, an operation without one is reported as before, and a new rule is one class."""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from torch_styles import Masked, Squared  # noqa: E402

from idcgen.errors import LayerError  # noqa: E402
from idcgen.framework import as_network, torch_lrp  # noqa: E402
from idcgen.framework.torch_lrp import (  # noqa: E402
    ATTENTION,
    EPSILON,
    NORMALISATION,
    PASS_THROUGH,
    ROUTING,
    Attention,
    Constant,
    Epsilon,
    Gate,
    Normalisation,
    PassThrough,
    Product,
    Routing,
    Rule,
    WeightedValues,
    register,
    registered,
    rule_label,
    rule_of,
)
from torch_twins import TinyViT, images, randomise  # noqa: E402

#: the operations the graph gives a rule, by the class explaining them
KINDS = {
    Epsilon: EPSILON,
    Routing: ROUTING,
    PassThrough: PASS_THROUGH,
    Normalisation: NORMALISATION,
    Attention: ATTENTION,
    Product: {"mul", "div"},
    WeightedValues: {"matmul", "bmm"},
    Constant: {"softmax", "_softmax"},
}


def test_every_operation_with_a_rule_has_its_registered_class():
    rules = registered()
    assert set(rules) == set().union(*KINDS.values())
    for cls, ops in KINDS.items():
        assert issubclass(cls, Rule) and cls is not Rule
        assert all(type(rules[op]) is cls for op in ops), cls.__name__


@pytest.mark.parametrize("model", [TinyViT(need_weights=True), TinyViT(), Masked()], ids=["bmm", "sdpa", "masked"])
def test_every_layer_takes_its_rule_from_the_registry(model):
    network = as_network(randomise(model, 3))
    graph = network.graph
    for layer in graph.layers:
        rule = rule_of(layer, graph)
        if layer.op not in registered():
            assert rule is None and rule_label(layer, graph) == "none"
        elif rule is not None:  # a product or a matrix product: the rule of this call, by its arguments
            assert rule.label_of(layer) == rule_label(layer, graph) == network.rule_label(layer.name)
            assert type(rule) in (type(registered()[layer.op]), Epsilon, Gate, Attention)
    kinds = {type(rule_of(layer, graph)) for layer in graph.layers}
    if isinstance(model, TinyViT):
        assert {Attention, Normalisation, PassThrough, Routing, Epsilon} <= kinds
    else:  # a product with a boolean mask: a gate
        assert Gate in kinds


def test_the_rules_of_a_call_labelled_as_before():
    network = as_network(randomise(TinyViT(need_weights=True), 3))
    labels = {network.layer_graph.get(name).op: network.rule_label(name) for name in network.layer_names()}
    assert labels["softmax"] == "constant (attention weights: no relevance)"
    assert labels["layer_norm"] == "epsilon (normalising factor held constant, CP-LRP)"
    assert labels["gelu"] == "pass-through (gelu passed through unchanged)"
    assert labels["linear"] == "epsilon" and labels["transpose"] == "routing"
    bmm = [rule_label(s, network.graph) for s in network.graph.layers if s.op == "bmm"]
    assert "epsilon (attention weights held constant: relevance along the values, CP-LRP)" in bmm
    assert "none" in bmm  # the query-key product: no rule (it only feeds the weights)


def test_an_unregistered_operation_is_reported_as_before():
    network = as_network(randomise(Squared(), 7))
    (square,) = [s for s in network.graph.layers if s.op == "pow"]
    assert "pow" not in registered() and rule_of(square, network.graph) is None
    assert network.rule_label(square.name) == "none"
    assert "conv" not in network.subject_layers() and "conv2" in network.subject_layers()
    with pytest.raises(LayerError) as err:
        network.relevance(None)
    assert str(err.value) == (
        f"cannot propagate relevance to the input through layer {square.name!r} (pow): idcgen's LRP has no rule for pow"
    )
    with pytest.raises(LayerError, match="^cannot propagate relevance through layer .*; choose a subject layer after"):
        network.relevance("conv")


def test_a_new_rule_is_one_registered_class(monkeypatch):
    monkeypatch.setattr(torch_lrp, "_RULES", dict(torch_lrp._RULES))

    @register("pow")
    class Square(Rule):
        """x ** 2 as x * x with one factor held constant: a gate of the signal by itself, all relevance kept."""

        label = "square (one factor held constant)"

        def apply(self, node, args, value, lrp):
            return args[0] * args[0].detach()

    network = as_network(randomise(Squared(), 7))
    square = next(s for s in network.graph.layers if s.op == "pow")
    assert isinstance(rule_of(square, network.graph), Square)
    assert rule_label(square, network.graph) == "square (one factor held constant)"
    x = images(4)
    r_square = network.relevance(square.name, eps=1e-9)(x)[0]
    r_conv, _, logits = network.relevance("conv", eps=1e-9)(x)  # refused without the rule
    # x * stop(x) has gradient x: conv's relevance x * x * g is the square's, neuron by neuron
    np.testing.assert_allclose(r_conv, r_square, rtol=1e-4, atol=1e-6)
    assert network.relevance(None)(x)[0].shape == (4, 3) and logits.shape == (4, 3)

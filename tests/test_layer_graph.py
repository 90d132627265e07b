"""The framework-neutral layer graph (idcgen/framework/layers.py) on hand-built records, no framework: the queries
both backends answer through it, with their messages; last, a Keras model and its PyTorch twin answering alike."""

import pytest

from idcgen.errors import LayerError
from idcgen.framework import LayerInfo
from idcgen.framework.layers import GraphQueries, LayerGraph, LayerRecord


def cnn(**changes) -> list[LayerRecord]:
    """input -> conv -> bn -> relu -> pool -> drop -> flat -> dense -> act -> logits (10), and a side branch
    (side) off relu that the logits do not read."""
    rows = [
        LayerRecord("conv", "Conv2D", (8, 8, 4), ("",), weighted=True),
        LayerRecord("bn", "BatchNormalization", (8, 8, 4), ("conv",), weighted=True, role="follower"),
        LayerRecord("relu", "ReLU", (8, 8, 4), ("bn",), role="activation"),
        LayerRecord("side", "Conv2D", (8, 8, 2), ("relu",), weighted=True),
        LayerRecord("pool", "MaxPooling2D", (4, 4, 4), ("relu",)),
        LayerRecord("drop", "Dropout", (4, 4, 4), ("pool",), dropout=True, transparent=True, role="follower"),
        LayerRecord("flat", "Flatten", (64,), ("drop",), transparent=True),
        LayerRecord("dense", "Dense", (16,), ("flat",), weighted=True),
        LayerRecord("act", "Activation", (16,), ("dense",), role="activation"),
        LayerRecord("logits", "Dense", (10,), ("act",), weighted=True),
    ]
    for record in rows:
        record.rule = "epsilon"
        for key, value in changes.get(record.name, {}).items():
            setattr(record, key, value)
    return rows


def test_names_shapes_and_neurons():
    graph = LayerGraph(cnn(), logits="logits")
    assert graph.names()[:3] == ["conv", "bn", "relu"]
    assert graph.output_shape("pool") == (None, 4, 4, 4)
    assert graph.get("flat").neurons == 64 and graph.get("conv").neurons == 4  # the last axis unless given
    assert graph.layers_info(batch_axis=True)[0] == LayerInfo("conv", "Conv2D", (None, 8, 8, 4), 4)
    assert graph.layers_info(batch_axis=False)[0] == LayerInfo("conv", "Conv2D", (8, 8, 4), 4)


def test_an_unknown_layer_names_the_valid_ones():
    with pytest.raises(LayerError) as err:
        LayerGraph(cnn(), logits="logits").get("nope")
    assert str(err.value) == (
        "unknown layer 'nope'; valid layers: conv, bn, relu, side, pool, drop, flat, dense, act, logits"
    )
    many = [LayerRecord(f"l{i}", "Dense", (3,), (f"l{i - 1}",) if i else ("",), weighted=True) for i in range(45)]
    with pytest.raises(LayerError) as err:
        LayerGraph(many, logits="l44").get("nope")
    shown = ", ".join([f"l{i}" for i in range(20)] + ["..."] + [f"l{i}" for i in range(35, 45)])
    assert str(err.value) == f"unknown layer 'nope'; valid layers: {shown} (45 in all: see `idcgen layers`)"


def test_an_alias_names_its_layer():
    graph = LayerGraph(cnn(), logits="logits", aliases={"features": "relu"})
    assert graph.has("features") and graph.get("features").name == "relu" and graph.is_hidden("features")


def test_hidden_layers_and_the_default_subject_layer():
    graph = LayerGraph(cnn(), logits="logits")
    assert graph.classifier.name == "logits"
    assert graph.hidden == {"conv", "bn", "relu", "pool", "drop", "flat", "dense", "act"}
    assert not graph.is_hidden("side") and not graph.is_hidden("logits")
    assert graph.default_layer() == "act"
    # dropout and reshapes are walked over: the layer under them is the default
    no_dense = [r for r in cnn() if r.name not in ("dense", "act")]
    no_dense[-1].inputs = ("flat",)
    assert LayerGraph(no_dense, logits="logits").default_layer() == "pool"


def test_no_hidden_layer_before_the_logits():
    only = [LayerRecord("logits", "Dense", (10,), ("",), weighted=True)]
    with pytest.raises(LayerError, match="^the model has no hidden layer before its logits$"):
        LayerGraph(only, logits="logits").default_layer()
    flat_of_input = [
        LayerRecord("flat", "Flatten", (10,), ("",), transparent=True),
        LayerRecord("logits", "Dense", (10,), ("flat",), weighted=True),
    ]
    with pytest.raises(LayerError, match="no hidden layer"):  # a reshape of the input is no hidden layer
        LayerGraph(flat_of_input, logits="logits").default_layer()


def test_a_classifier_under_a_flatten():
    # MobileNet's end: a 1x1 convolution of 10 channels over a 1x1 map, then Flatten: the convolution is the classifier
    records = [
        LayerRecord("conv", "Conv2D", (1, 1, 8), ("",), weighted=True),
        LayerRecord("head", "Conv2D", (1, 1, 10), ("conv",), weighted=True),
        LayerRecord("flat", "Flatten", (10,), ("head",), transparent=True),
    ]
    graph = LayerGraph(records, logits="flat")
    assert graph.classifier.name == "head" and graph.hidden == {"conv"} and graph.default_layer() == "conv"
    assert graph.weighted_layers() == ("conv",)
    records[1].shape = (2, 2, 10)  # not the scores' size: the flatten stays the classifier
    assert LayerGraph(records, logits="flat").classifier.name == "flat"


def test_check_subject_layer_says_where_a_refused_layer_is():
    graph = LayerGraph(cnn(), logits="logits")
    assert graph.check_subject_layer("pool").name == "pool"
    hidden = "conv, bn, relu, pool, drop, flat, dense, act"
    with pytest.raises(LayerError) as err:
        graph.check_subject_layer("logits")
    assert str(err.value) == f"layer 'logits' is the logits or after them; choose a hidden layer: {hidden}"
    with pytest.raises(LayerError) as err:
        graph.check_subject_layer("side")
    assert str(err.value) == f"layer 'side' does not lead to the logits; choose a hidden layer: {hidden}"
    two = cnn(dense={"outputs": 2})  # hidden, but of two outputs: no subject layer
    with pytest.raises(LayerError, match="^layer 'dense' does not lead to the logits; choose a hidden layer: conv,"):
        LayerGraph(two, logits="logits").check_subject_layer("dense")


def test_a_long_hidden_list_is_cut():
    many = [LayerRecord(f"l{i}", "Dense", (3,), (f"l{i - 1}",) if i else ("",), weighted=True) for i in range(40)]
    with pytest.raises(LayerError) as err:
        LayerGraph(many, logits="l39").check_subject_layer("l39")
    shown = ", ".join([f"l{i}" for i in range(10)] + ["..."] + [f"l{i}" for i in range(29, 39)])
    assert str(err.value) == f"layer 'l39' is the logits or after them; choose a hidden layer: {shown}"


def test_a_layer_without_a_rule_blocks_every_layer_below_it():
    graph = LayerGraph(cnn(), logits="logits")
    assert graph.subject_layers() == ["conv", "bn", "relu", "pool", "drop", "flat", "dense", "act"]
    blocked = LayerGraph(cnn(pool={"rule": "none"}), logits="logits")
    assert blocked.subject_layers() == ["pool", "drop", "flat", "dense", "act"]
    assert blocked.subject_layers(rows={"pool", "dense"}) == ["pool", "dense"]  # rows: one row per input
    several = LayerGraph(cnn(flat={"outputs": 2}), logits="logits")  # a layer of two outputs blocks too,
    assert several.subject_layers() == ["dense", "act"]  # and is none itself
    not_per_input = LayerGraph(cnn(dense={"per_input": False}), logits="logits")
    assert "dense" not in not_per_input.subject_layers()


def test_relevance_reach_given_by_the_backend():
    # a backend whose LRP holds some inputs constant (attention weights) says which layers relevance reaches
    graph = LayerGraph(cnn(), logits="logits", reached=lambda: ["logits", "act", "dense", "flat", "drop", "pool"])
    assert graph.subject_layers() == ["pool", "drop", "flat", "dense", "act"]
    assert [r.name for r in graph.on_path()] == ["pool", "drop", "flat", "dense", "act", "logits"]
    assert [r.name for r in graph.on_path("dense")] == ["dense", "act", "logits"]
    assert [r.name for r in LayerGraph(cnn(), logits="logits").on_path()][:3] == ["conv", "bn", "relu"]


def test_neuron_layers_take_the_activation_after_a_weighted_layer():
    graph = LayerGraph(cnn(), logits="logits")
    # conv -> bn -> relu: relu; side is not hidden; dense -> act: act
    assert graph.neuron_layers() == ["relu", "act"]
    assert graph.neuron_layers(rows={"act"}) == ["act"]
    # a second reader of conv's output: the chain stops there, conv itself counts
    branched = cnn()
    branched.append(LayerRecord("probe", "Dense", (4,), ("conv",)))
    assert LayerGraph(branched, logits="logits").neuron_layers() == ["conv", "act"]
    with pytest.raises(LayerError) as err:
        graph.neuron_layers(rows=set())
    assert str(err.value) == (
        "the model has no hidden layer with weights before its logits; pass layers=[...] from: "
        "conv, bn, relu, side, pool, drop, flat, dense, act, logits"
    )


def test_weighted_and_dropout_layers():
    graph = LayerGraph(cnn(), logits="logits")
    assert graph.weighted_layers() == ("conv", "bn", "side", "dense")
    assert graph.dropout_layers() == ["drop"]


def test_a_plain_list_of_name_op_shape_inputs_fills_it():
    # what a forward-only backend (an ONNX graph) has: names, operator types, shapes, inputs
    rows = [("a", "Gemm", (8,), ("x",)), ("r", "Relu", (8,), ("a",)), ("z", "Gemm", (3,), ("r",))]
    graph = LayerGraph((LayerRecord(*row) for row in rows), logits="z")
    assert graph.hidden == {"a", "r"} and graph.default_layer() == "r"
    assert graph.subject_layers() == []  # no LRP rules given: relevance reaches nothing
    assert graph.get("z").neurons == 3 and graph.producers(graph.get("a")) == []


class _Network(GraphQueries):
    def __init__(self, graph):
        self.layer_graph = graph


def test_a_network_answers_the_queries_through_its_graph():
    records = cnn()
    network = _Network(LayerGraph(records, logits="logits", aliases={"features": "relu"}))
    assert network.layer_names() == [r.name for r in records]
    assert network.check_layer("features") == "relu" and network.step("dense") is None  # no framework object
    assert network.neuron_count("conv") == 4 and network.output_shape("flat") == (None, 64)
    assert network.default_layer() == "act" and network.is_hidden("conv") and not network.is_hidden("side")
    assert network.check_subject_layer("features") == "relu"
    assert network.subject_layers() == LayerGraph(records, logits="logits").subject_layers()
    assert network.neuron_layers() == ["relu", "act"] and network.weighted_layers()[-1] == "dense"
    assert network.dropout_layers() == ["drop"] and network.rule_label("dense") == "epsilon"
    with pytest.raises(LayerError, match="^unknown layer 'x'; valid layers: conv, bn"):
        network.check_layer("x")


def test_a_keras_model_and_its_pytorch_twin_answer_alike():
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent))
    from idcgen.framework import as_network
    from torch_twins import twins

    module, model = twins("residual")
    torch_net, keras_net = as_network(module), as_network(model)
    names = dict(zip(torch_net.layer_names(), keras_net.layer_names()))  # the twins' layers, in the same order
    assert len(names) == len(keras_net.layer_names()) == 11
    for query in ("default_layer", "subject_layers", "neuron_layers", "weighted_layers", "dropout_layers"):
        answer = getattr(torch_net, query)()
        expected = getattr(keras_net, query)()
        assert ([names[n] for n in answer] if isinstance(answer, (list, tuple)) else names[answer]) == (
            list(expected) if isinstance(expected, (list, tuple)) else expected
        ), query
    for net in (torch_net, keras_net):
        assert isinstance(net.layer_graph, LayerGraph) and net.neuron_count("conv1") == 8
        with pytest.raises(LayerError, match="^layer 'fc' is the logits or after them; choose a hidden layer: stem, "):
            net.check_subject_layer("fc")
        with pytest.raises(LayerError, match="^unknown layer 'nope'; valid layers: stem, "):
            net.check_layer("nope")

"""The framework boundary split by capability: running forward, taking gradients, training."""

import pytest

from idcgen.errors import ParameterError
from idcgen.framework import BACKENDS, DifferentiableNetwork, ForwardNetwork, Network, framework_of_path
from idcgen.fuzz.mutators import make_mutator


def test_a_forward_only_backend_needs_no_relevance_gradients_or_training():
    forward_only = ForwardNetwork.__abstractmethods__
    assert {"forward", "layers_info", "fingerprint", "own_convention", "recipe"} <= forward_only
    assert not {"relevance", "gradients", "attack", "retrained"} & forward_only
    assert {"relevance", "gradients", "attack"} <= DifferentiableNetwork.__abstractmethods__
    assert "retrained" in Network.__abstractmethods__ and "retrained" not in DifferentiableNetwork.__abstractmethods__
    assert issubclass(Network, DifferentiableNetwork) and issubclass(DifferentiableNetwork, ForwardNetwork)
    assert Network.capabilities == {"forward", "differentiable", "trainable"}


class _ForwardOnly:
    """What a mutator asks of a model it checks: the capabilities of a forward-only backend."""

    capabilities = frozenset({"forward"})


@pytest.mark.parametrize("spec", ["fgsm", "pgd", "relevant_pixels", "directed", "deepxplore"])
def test_mutators_that_take_gradients_refuse_a_forward_only_model(spec):
    with pytest.raises(ParameterError, match=f"^mutator {spec} takes the model's gradients"):
        make_mutator(spec).check_model(_ForwardOnly())


@pytest.mark.parametrize("spec", ["gauss", "random_pixels", "rotate", "brightness", "rain"])
def test_gradient_free_mutators_run_on_a_forward_only_model(spec):
    make_mutator(spec).check_model(_ForwardOnly())


def test_backends_are_found_by_suffix_and_name_their_extra():
    assert framework_of_path("m.keras") == "keras" and framework_of_path("m.pt2") == "torch"
    assert framework_of_path("pkg.module:make_model") == "torch"
    assert framework_of_path("m.unknown") == "keras"  # the Keras loader says what it cannot read
    assert framework_of_path("m.onnx") == "onnx"
    assert {b.extra for b in BACKENDS.values()} == {"keras", "torch", "onnx"}

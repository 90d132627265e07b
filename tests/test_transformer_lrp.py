"""LRP through transformers and modern CNNs (issue 22): normalisation layers, MultiHeadAttention, smooth
activations, layer scale; conservation and LRP-0 = gradient x input of the detached model on a tiny ViT."""

from types import SimpleNamespace

import numpy as np
import pytest


def _lrp(attention="cp", eps=1e-9):
    return SimpleNamespace(attention=attention, eps=eps)


# ---- the rule of each layer kind, by hand ---------------------------------------------------------


def test_layernorm_rule_by_hand():
    # x = [1, 2, 6]: mean 3, centred [-2, -1, 3], sigma = sqrt(14/3). With sigma held constant, y = C x / sigma
    # (C the centring matrix). Relevance [1, 0, 0] on y: R_i = x_i (delta_i0 - 1/3) / sigma * 1 / y_0, and
    # y_0 = -2 / sigma, so R = [1 * 2/3, 2 * -1/3, 6 * -1/3] / -2 = [-1/3, 1/3, 1]: it sums to 1 (conserved).
    import keras
    import tensorflow as tf

    from idcgen.framework.keras_lrp import epsilon_rule, held_normalisation

    layer = keras.layers.LayerNormalization(center=False, epsilon=0.0)
    x = tf.constant([[1.0, 2.0, 6.0]])
    layer(x)
    (r,) = epsilon_rule(lambda a: held_normalisation(layer, a[0]), [x], tf.constant([[1.0, 0.0, 0.0]]), 1e-9)
    np.testing.assert_allclose(r.numpy(), [[-1 / 3, 1 / 3, 1.0]], rtol=1e-5)


def test_layernorm_offset_absorbs_relevance_as_a_bias():
    # beta = [1, 1, 1]: z_0 = -2/sigma + 1; R_i = x_i (delta_i0 - 1/3) / sigma / z_0 (a bias takes the rest)
    import keras
    import tensorflow as tf

    from idcgen.framework.keras_lrp import epsilon_rule, held_normalisation

    layer = keras.layers.LayerNormalization(epsilon=0.0, beta_initializer="ones")
    x = tf.constant([[1.0, 2.0, 6.0]])
    layer(x)
    sigma = np.sqrt(14 / 3)
    z0 = -2 / sigma + 1
    expected = np.array([1.0, 2.0, 6.0]) * (np.array([1.0, 0, 0]) - 1 / 3) / sigma / z0
    (r,) = epsilon_rule(lambda a: held_normalisation(layer, a[0]), [x], tf.constant([[1.0, 0.0, 0.0]]), 1e-9)
    np.testing.assert_allclose(r.numpy()[0], expected, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
@pytest.mark.parametrize(
    "make",
    [
        lambda L: L.LayerNormalization(gamma_initializer="random_normal", beta_initializer="random_normal"),
        lambda L: L.LayerNormalization(rms_scaling=True, gamma_initializer="random_normal"),
        lambda L: L.LayerNormalization(axis=(1, 2), gamma_initializer="random_normal"),
        lambda L: L.RMSNormalization(),
        lambda L: L.GroupNormalization(groups=2, gamma_initializer="random_normal", beta_initializer="random_normal"),
        lambda L: L.UnitNormalization(),
    ],
    ids=["layernorm", "rms_scaling", "two-axes", "rmsnorm", "groupnorm", "unitnorm"],
)
def test_held_normalisation_has_the_layers_value_and_a_constant_scale(make):
    # the same output as the layer; with the factor frozen the map is linear but for the offset, so its
    # Jacobian applied to x itself gives y - offset (Euler); the layer itself is scale-invariant (J x ~ 0).
    import keras
    import tensorflow as tf

    from idcgen.framework.keras_lrp import held_normalisation

    layer = make(keras.layers)
    x = tf.constant(10 * np.random.default_rng(0).normal(size=(2, 3, 4)), tf.float32)  # var >> epsilon
    y = layer(x)
    held = held_normalisation(layer, x)
    np.testing.assert_allclose(held.numpy(), y.numpy(), rtol=1e-4, atol=1e-5)
    with tf.autodiff.ForwardAccumulator(x, x) as acc:  # J(x) . x
        out = held_normalisation(layer, x)
    beta = (
        getattr(layer, "beta", None)
        if getattr(layer, "center", False) and not getattr(layer, "rms_scaling", False)
        else None
    )
    linear_part = out - (0 if beta is None else tf.reshape(beta, [1] * (3 - len(beta.shape)) + list(beta.shape)))
    np.testing.assert_allclose(acc.jvp(out).numpy(), linear_part.numpy(), rtol=1e-4, atol=1e-5)
    with tf.autodiff.ForwardAccumulator(x, x) as acc:  # the layer itself is scale-invariant: J(x) . x = 0
        full = layer(x)
    assert np.abs(acc.jvp(full).numpy()).max() < 1e-2 * np.abs(linear_part.numpy()).max()


def _one_head_attention():
    """Self-attention over 2 tokens of 1 value, 1 head of size 1, every weight 1 and no bias: q = k = v = x,
    scores s_ij = x_i x_j, A = softmax_j(s), out_i = sum_j A_ij x_j."""
    import keras

    inputs = keras.Input((2, 1))
    attn = keras.layers.MultiHeadAttention(1, 1, use_bias=False, kernel_initializer="ones", name="attn")
    y = attn(inputs, inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax", name="out")(keras.layers.Flatten()(y)))
    return model, attn


def _attention_by_hand(x):
    s = np.outer(x, x)
    a = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    return s, a, a @ x


@pytest.mark.parametrize("attention", ["cp", "attnlrp"])
def test_attention_rules_by_hand(attention):
    import tensorflow as tf

    from idcgen.framework import Network
    from idcgen.framework.keras_lrp import Attention

    model, _ = _one_head_attention()
    x = np.array([1.0, 2.0])
    s, a, out = _attention_by_hand(x)
    step = Network(model).graph.by_name["attn"]
    value = tf.constant(x.reshape(1, 2, 1), tf.float32)
    relevance = tf.constant(out.reshape(1, 2, 1), tf.float32)  # R = out: R/z = 1 at every output
    got = sum(r.numpy().ravel() for r in Attention().explain(step, [value, value], relevance, _lrp(attention)))
    r_value = x * a.sum(axis=0)  # CP: R_j = x_j sum_i A_ij (R_i / out_i), conserving
    if attention == "cp":
        np.testing.assert_allclose(got, r_value, rtol=1e-5)
        np.testing.assert_allclose(got.sum(), out.sum(), rtol=1e-5)
        return
    # AttnLRP: the product A.v splits evenly; the softmax gives R_s = s (R_A - A sum_j R_A); s = q k splits evenly
    r_a = a * x[None, :] / 2
    r_s = s * (r_a - a * r_a.sum(axis=1, keepdims=True))
    r_q, r_k = r_s.sum(axis=1) / 2, r_s.sum(axis=0) / 2
    np.testing.assert_allclose(got, r_value / 2 + r_q + r_k, rtol=1e-4)


def test_attention_value_and_query_roles_are_kept_apart():
    # cross-attention: the query input gets no relevance under CP, the value input all of it
    import keras
    import tensorflow as tf

    from idcgen.framework.keras_lrp import Attention, attention_roles

    q_in, v_in = keras.Input((3, 4)), keras.Input((5, 4))
    layer = keras.layers.MultiHeadAttention(2, 3, name="cross")
    out = layer(q_in, v_in)
    model = keras.Model([q_in, v_in], out)
    step = [s for s in model._nodes_by_depth[0]][0]
    from idcgen.framework.keras_graph import Step

    st = Step("cross", layer, step, (0, 1), (2,), ((None, 3, 4),), "MultiHeadAttention")
    assert attention_roles(st) == {"query": 0, "value": 1, "key": 1}
    rng = np.random.default_rng(0)
    q, v = (tf.constant(rng.normal(size=s), tf.float32) for s in ((2, 3, 4), (2, 5, 4)))
    z = layer(q, v)
    r_q, r_v = Attention().explain(st, [q, v], z, _lrp("cp"))
    assert np.abs(r_q.numpy()).max() == 0
    z_no_bias = (
        z
        - layer._output_dense.bias
        - tf.einsum("bthk,hkd->btd", tf.ones((2, 3, 2, 3)) * layer._value_dense.bias, layer._output_dense.kernel)
    )
    np.testing.assert_allclose(r_v.numpy().sum(axis=(1, 2)), z_no_bias.numpy().sum(axis=(1, 2)), rtol=1e-3, atol=1e-4)


def test_masked_attention_is_refused():
    import keras

    from idcgen.errors import LayerError
    from idcgen.framework import Network

    inputs = keras.Input((4, 3))
    y = keras.layers.MultiHeadAttention(1, 2, name="attn")(inputs, inputs, use_causal_mask=True)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(keras.layers.Flatten()(y)))
    with pytest.raises(LayerError, match="'attn' .*use_causal_mask"):
        Network(model).relevance(None)


def test_layer_scale_and_smooth_activations():
    # keras.applications' LayerScale (x * gamma) passes relevance unchanged; GELU/SiLU take the identity rule
    import keras
    import tensorflow as tf
    from keras.src.applications.convnext import LayerScale

    from idcgen.framework.keras_lrp import Epsilon, PassThrough, epsilon_rule, rule_label, rule_of

    scale = LayerScale(0.5, 2)
    x = tf.constant([[1.0, 2.0]])
    scale(x)
    assert isinstance(rule_of(scale), Epsilon) and rule_label(scale) == "epsilon"
    (r,) = epsilon_rule(lambda a: scale(a[0]), [x], tf.constant([[0.3, 0.7]]), 1e-9)
    np.testing.assert_allclose(r.numpy(), [[0.3, 0.7]], rtol=1e-5)
    for kind in ("gelu", "silu", "hard_silu", "mish", "sigmoid"):
        # named: unnamed layers shift Keras' name counters other tests read
        layer = keras.layers.Activation(kind, name=f"act_{kind}")
        assert isinstance(rule_of(layer), PassThrough)
        assert rule_label(layer) == f"pass-through ({kind} passed through unchanged)"
    assert rule_label(keras.layers.Dense(3, activation="gelu")) == "epsilon (gelu passed through unchanged)"


def test_gelu_relevance_passes_unchanged_and_notes_cite_the_rule():
    import keras

    from idcgen.framework import Network

    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    h = keras.layers.Dense(4, name="h")(inputs)
    g = keras.layers.Activation("gelu", name="g")(h)
    model = keras.Model(inputs, keras.layers.Dense(2, use_bias=False, name="out")(g))
    net = Network(model)
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    r_h = net.relevance("h", eps=1e-9).batch(x)[0]
    r_g = net.relevance("g", eps=1e-9).batch(x)[0]
    np.testing.assert_allclose(r_h, r_g, rtol=1e-5, atol=1e-7)
    notes = " ".join(net.rule_notes(None))
    assert "gelu passed through unchanged" in notes and "identity rule CP-LRP and AttnLRP prescribe" in notes


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
@pytest.mark.parametrize(
    "make",
    [
        lambda L: L.LayerNormalization(center=False, gamma_initializer="random_uniform"),
        lambda L: L.LayerNormalization(rms_scaling=True),
        lambda L: L.GroupNormalization(groups=2, center=False, gamma_initializer="random_uniform"),
        lambda L: L.RMSNormalization(),
        lambda L: L.UnitNormalization(),
    ],
    ids=["layernorm", "rms_scaling", "groupnorm", "rmsnorm", "unitnorm"],
)
def test_normalisation_layers_conserve_relevance_in_a_bias_free_cnn(make):
    import keras

    from idcgen.framework import Network

    L = keras.layers
    keras.utils.set_random_seed(1)
    inputs = keras.Input((6, 6, 2))
    x = L.Conv2D(4, 3, use_bias=False, name="conv")(inputs)
    x = L.Activation("relu", name="relu")(make(L)(x))
    out = L.Dense(3, activation="softmax", use_bias=False)(L.GlobalAveragePooling2D()(x))
    net = Network(keras.Model(inputs, out))
    x = np.random.default_rng(5).normal(size=(4, 6, 6, 2)).astype(np.float32)
    for layer in ("conv", None):
        r, _, z = net.relevance(layer, eps=1e-9).batch(x)
        np.testing.assert_allclose(r.sum(axis=1), z.max(axis=1), rtol=1e-3)


def test_attention_over_image_axes_conserves_relevance_under_cp():
    # MultiHeadAttention over (height, width) of a feature map: the layer's own equations, any attention axes
    import keras

    from idcgen.framework import Network

    L = keras.layers
    keras.utils.set_random_seed(2)
    inputs = keras.Input((4, 4, 8))
    y = L.MultiHeadAttention(2, 4, attention_axes=(1, 2), use_bias=False, name="attn")(inputs, inputs)
    x = L.Add(name="res")([inputs, y])
    net = Network(keras.Model(inputs, L.Dense(3, activation="softmax", use_bias=False)(L.GlobalAveragePooling2D()(x))))
    x = np.random.default_rng(6).normal(size=(4, 4, 4, 8)).astype(np.float32)
    r, _, z = net.relevance(None, eps=1e-9, attention="cp").batch(x)
    np.testing.assert_allclose(r.sum(axis=1), z.max(axis=1), rtol=1e-3)
    r, _, _ = net.relevance(None, eps=1e-9, attention="attnlrp").batch(x)
    assert np.all(np.isfinite(r))


# ---- a tiny ViT --------------------------------------------------------------------------------------


def tiny_vit(bias: bool = True, depth: int = 2, seed: int = 0):
    """8x8x3 images, 4x4 patches (4 tokens of 8 values), ``depth`` pre-norm blocks with 2 heads and GELU MLPs,
    final LayerNorm, token mean, dense 3 + softmax. ``bias=False``: no biases, LayerNorms without offset."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(seed)
    norm = dict(epsilon=1e-6, center=bias, gamma_initializer=keras.initializers.RandomUniform(0.5, 1.5, seed=seed))
    inputs = keras.Input((8, 8, 3))
    x = L.Conv2D(8, 4, strides=4, use_bias=bias, name="patch_embed")(inputs)
    x = L.Reshape((4, 8), name="tokens")(x)
    for i in range(1, depth + 1):
        y = L.LayerNormalization(name=f"block{i}_ln1", **norm)(x)
        y = L.MultiHeadAttention(2, 4, use_bias=bias, name=f"block{i}_attn")(y, y)
        x = L.Add(name=f"block{i}_add1")([x, y])
        y = L.LayerNormalization(name=f"block{i}_ln2", **norm)(x)
        y = L.Dense(16, activation="gelu", use_bias=bias, name=f"block{i}_mlp1")(y)
        y = L.Dense(8, use_bias=bias, name=f"block{i}_mlp2")(y)
        x = L.Add(name=f"block{i}_add2")([x, y])
    x = L.LayerNormalization(name="final_ln", **norm)(x)
    x = L.GlobalAveragePooling1D(name="avg_pool")(x)
    model = keras.Model(inputs, L.Dense(3, activation="softmax", use_bias=bias, name="logits")(x))
    rng = np.random.default_rng(seed)
    for v in model.weights:  # biases and offsets away from zero, so that they matter
        if v.path.endswith(("bias", "beta")):
            v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32))
    return model


CUTS = ["tokens", "block1_add1", "block1_add2", "block2_add1", "block2_add2", "final_ln", "avg_pool", None]


def test_tiny_vit_conserves_relevance_at_every_cut():
    from idcgen.framework import Network

    net = Network(tiny_vit(bias=False))
    x = np.random.default_rng(1).random((6, 8, 8, 3), dtype=np.float32)
    for layer in CUTS:
        r, _, z = net.relevance(layer, eps=1e-9, attention="cp").batch(x)
        np.testing.assert_allclose(r.sum(axis=1), z.max(axis=1), rtol=1e-3, err_msg=str(layer))


def test_attnlrp_is_not_conservative_but_cp_is():
    # AttnLRP's softmax rule lets relevance leave (to its bias term): the two rules differ at the input
    from idcgen.framework import Network

    net = Network(tiny_vit(bias=False))
    x = np.random.default_rng(2).random((4, 8, 8, 3), dtype=np.float32)
    cp = net.relevance(None, eps=1e-9, attention="cp").batch(x)[0].sum(axis=1)
    attn = net.relevance(None, eps=1e-9, attention="attnlrp").batch(x)[0].sum(axis=1)
    assert np.abs(cp - attn).max() > 1e-3


def _detached_forward(model, x, tap=None, value=None):
    """The tiny ViT computed from its weights with plain TensorFlow, every LayerNorm's 1/std, every attention
    weight and every GELU's gate Phi(z) = gelu(z)/z held constant (stop_gradient); the tensor named ``tap``
    replaced by ``value``. Returns the logits."""
    import tensorflow as tf

    def get(name):
        return model.get_layer(name)

    def put(name, t):
        return value if name == tap else t

    def ln(name, t):
        layer = get(name)
        mean, var = tf.nn.moments(t, [-1], keepdims=True)
        y = (t - mean) * tf.stop_gradient(tf.math.rsqrt(var + layer.epsilon)) * layer.gamma
        return y + layer.beta if layer.center else y

    def dense(layer, t):
        y = tf.tensordot(t, layer.kernel, 1)
        return y + layer.bias if layer.use_bias else y

    def gelu_held(z):
        gate = tf.where(tf.abs(z) > 1e-12, tf.nn.gelu(z, approximate=False) / tf.where(z == 0, 1.0, z), 0.5)
        return z * tf.stop_gradient(gate)

    def attention(layer, t):
        def proj(d):
            y = tf.einsum("btd,dhk->bthk", t, d.kernel)
            return y if d.bias is None else y + d.bias

        q, k, v = proj(layer._query_dense) / np.sqrt(4.0), proj(layer._key_dense), proj(layer._value_dense)
        weights = tf.stop_gradient(tf.nn.softmax(tf.einsum("bthk,bshk->bhts", q, k), axis=-1))
        o = tf.einsum("bhts,bshk->bthk", weights, v)
        y = tf.einsum("bthk,hkd->btd", o, layer._output_dense.kernel)
        return y if layer._output_dense.bias is None else y + layer._output_dense.bias

    pe = get("patch_embed")
    t = tf.nn.conv2d(x, pe.kernel, 4, "VALID") + (pe.bias if pe.use_bias else 0)
    t = put("tokens", tf.reshape(t, (-1, 4, 8)))
    for i in (1, 2):
        y = put(f"block{i}_ln1", ln(f"block{i}_ln1", t))
        y = put(f"block{i}_attn", attention(get(f"block{i}_attn"), y))
        t = put(f"block{i}_add1", t + y)
        y = put(f"block{i}_ln2", ln(f"block{i}_ln2", t))
        y = put(f"block{i}_mlp1", gelu_held(dense(get(f"block{i}_mlp1"), y)))
        y = put(f"block{i}_mlp2", dense(get(f"block{i}_mlp2"), y))
        t = put(f"block{i}_add2", t + y)
    t = put("avg_pool", tf.reduce_mean(ln("final_ln", t), axis=1))
    return dense(get("logits"), t)


@pytest.mark.parametrize("layer", ["block1_ln1", "block1_attn", "block2_mlp1", "block2_ln2"])
def test_lrp0_equals_gradient_times_input_of_the_detached_vit(layer):
    import keras
    import tensorflow as tf

    from idcgen.framework import Network

    model = tiny_vit(bias=True)
    x = tf.constant(np.random.default_rng(3).random((5, 8, 8, 3)), tf.float32)
    logits = _detached_forward(model, x)  # the by-hand model computes the Keras model's values
    np.testing.assert_allclose(softmax(logits.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-6)
    tap = keras.Model(model.inputs[0], model.get_layer(layer).output)(x)
    value = tf.Variable(tap)
    with tf.GradientTape() as tape:
        chosen = tf.reduce_max(_detached_forward(model, x, layer, value), axis=1)
    expected = tf.reduce_sum(value * tape.gradient(chosen, value), axis=1).numpy()
    r, _, _ = Network(model).relevance(layer, eps=1e-9, attention="cp").batch(x.numpy())
    np.testing.assert_allclose(r, expected, rtol=1e-3, atol=1e-5)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_token_neuron_is_a_dim_averaged_and_summed_over_tokens():
    import keras

    from idcgen.framework import Network

    net = Network(tiny_vit(bias=True, depth=1))
    x = np.random.default_rng(7).random((3, 8, 8, 3), dtype=np.float32)
    rel = net.relevance("block1_mlp2", eps=1e-9)
    r, a, _ = rel.batch(x)
    raw = rel.maps(x)  # (3, 4 tokens, 8 dims)
    out = keras.Model(net.model.inputs[0], net.model.get_layer("block1_mlp2").output)(x).numpy()
    assert raw.shape == (3, 4, 8) and r.shape == a.shape == (3, 8)
    np.testing.assert_allclose(r, raw.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a, out.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.forward(x, ("block1_mlp2",))[1][0], out.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_attention_option_is_checked_and_recorded():
    from idcgen.errors import InputError
    from idcgen.framework import Network

    net = Network(tiny_vit(bias=False, depth=1))
    with pytest.raises(InputError, match="attention rule must be one of cp, attnlrp"):
        net.relevance("block1_ln1", attention="softmax")
    assert any(n.startswith("LRP attention rule: attnlrp") for n in net.rule_notes("block1_ln1", attention="attnlrp"))
    notes = net.rule_notes("block1_ln1")
    assert any(n.startswith("LRP attention rule: cp: attention weights held constant") for n in notes)
    assert any(n.startswith("a neuron of a token layer (batch, tokens, dims) is one of its dims") for n in notes)
    assert any("normalising statistics (1/std, 1/rms) held constant" in n for n in notes)
    assert net.subject_layers()[0] == "patch_embed"  # nothing on the way to the logits blocks a layer now


# ---- input convention from a leading Normalization ----------------------------------------------------


def _normalised_model(mean, variance, nested=False):
    import keras

    L = keras.layers
    inputs = keras.Input((8, 8, 3))
    x = L.Normalization(mean=mean, variance=variance, name="norm")(inputs)
    x = L.GlobalAveragePooling2D()(L.Conv2D(4, 3)(x))
    model = keras.Model(inputs, L.Dense(2, activation="softmax")(x))
    if nested:
        outer = keras.Input((8, 8, 3))
        model = keras.Model(outer, model(outer))
    return model


@pytest.mark.parametrize("nested", [False, True])
def test_normalization_in_0_255_units_means_0_255_images(nested):
    from idcgen.framework.keras_convention import from_model

    imagenet = ([123.675, 116.28, 103.53], [58.395**2, 57.12**2, 57.375**2])
    found = from_model(_normalised_model(*imagenet, nested=nested))
    assert tuple(found.value_range) == (0.0, 255.0)
    assert found.source.startswith("read from the model's Normalization layer 'norm', mean 123.675, 116.28, 103.53")
    unit = from_model(_normalised_model([0.485, 0.456, 0.406], [0.229**2, 0.224**2, 0.225**2], nested=nested))
    assert tuple(unit.value_range) == (0.0, 1.0) and unit.source == "default [0, 1]"


def test_convnext_tiny_expects_0_255_and_is_explained_inside_its_blocks():
    import keras

    from idcgen.framework import Network
    from idcgen.framework.keras_convention import from_model

    model = keras.applications.ConvNeXtTiny(
        weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation="softmax"
    )
    assert tuple(from_model(model).value_range) == (0.0, 255.0)
    net = Network(model)
    assert len(net.subject_layers()) == len([s for s in net.layer_names() if net.is_hidden(s)])
    assert net.rule_label("convnext_tiny_stage_0_block_0_layer_scale") == "epsilon"
    assert net.rule_label("convnext_tiny_stage_0_block_0_layernorm") == "normalisation"


def test_keras_ops_activations_and_token_mean_in_a_functional_graph():
    # ops.gelu / ops.transpose / ops.mean recorded as op steps: pass-through, routing, epsilon; conserving
    import keras

    from idcgen.framework import Network

    inputs = keras.Input((4, 3))
    h = keras.layers.Dense(5, use_bias=False, name="h")(inputs)
    t = keras.ops.transpose(keras.ops.gelu(h), (0, 2, 1))
    pooled = keras.ops.mean(keras.ops.transpose(t, (0, 2, 1)), axis=1)
    net = Network(keras.Model(inputs, keras.layers.Dense(2, activation="softmax", use_bias=False)(pooled)))
    assert any(net.rule_label(n) == "pass-through (gelu passed through unchanged)" for n in net.layer_names())
    x = np.random.default_rng(4).normal(size=(6, 4, 3)).astype(np.float32)
    for layer in ("h", None):
        r, _, z = net.relevance(layer, eps=1e-9).batch(x)
        np.testing.assert_allclose(r.sum(axis=1), z.max(axis=1), rtol=1e-3)


def test_layers_cli_says_0_255_for_imagenet_statistics(tmp_path):
    from typer.testing import CliRunner

    from idcgen.cli import app

    imagenet = ([123.675, 116.28, 103.53], [58.395**2, 57.12**2, 57.375**2])
    _normalised_model(*imagenet).save(tmp_path / "m.keras")
    out = CliRunner().invoke(app, ["layers", "--model", str(tmp_path / "m.keras")]).output
    assert "expects: images in [0, 255] (read from the model's Normalization layer 'norm', mean 123.675" in out


CIFAR10 = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"


@pytest.mark.slow
@pytest.mark.skipif(not (CIFAR10 / "yoongikim_cifar10_train_jpg.zip").exists(), reason="needs ../shared/data/cifar10")
def test_transformer_recipes_smoke(tmp_path, monkeypatch):
    """train_transformers on 256 images for one epoch, then attention_rules on 20 test images."""
    import csv
    import importlib
    import sys

    recipes = __import__("pathlib").Path(__file__).resolve().parents[1] / "recipes"
    monkeypatch.setenv("IDCGEN_OUTPUTS", str(tmp_path))
    monkeypatch.syspath_prepend(str(recipes))
    for name in ("common", "train_models", "train_transformers", "attention_rules"):
        sys.modules.pop(name, None)
    try:
        train = importlib.import_module("train_transformers")
        monkeypatch.setattr(sys, "argv", ["recipes/train_transformers.py"])
        train.main(["--epochs", "1", "--limit", "256"])
        rows = list(csv.DictReader(open(tmp_path / "train_models" / "accuracy_transformers.csv")))
        assert [(r["model"], r["epochs"], r["train images"]) for r in rows] == [
            ("vit_tiny", "1 of 1", "256"),
            ("convnext_micro", "1 of 1", "256"),
        ]
        rules = importlib.import_module("attention_rules")
        rules.main(["--n", "20", "--random", "1", "--layers", "block4_ln1"])
        rows = list(csv.DictReader(open(tmp_path / "attention_rules" / "faithfulness.csv")))
        assert [int(r["k"]) for r in rows] == [1, 2, 4, 8]
        assert all(np.isfinite(float(r[c])) for r in rows for c in ("cp per-input drop", "attnlrp per-input drop"))
    finally:
        for name in ("common", "train_models", "train_transformers", "attention_rules"):
            sys.modules.pop(name, None)

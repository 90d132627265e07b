"""Subject models: the paper's MNIST LeNets and CIFAR-10 network, and a modern CIFAR-10 ResNet-20.

The LeNet-1, LeNet-4 and LeNet-5 builders use DeepXplore's layer names; its weights files
(MNIST_Model1-3.h5) load into them with ``model.load_weights(path)``. ``cifar10_cnn`` is the paper's
CIFAR-10 subject (Keras' classic cifar10_cnn example) and ``resnet20`` the standard CIFAR ResNet-20,
a graph model with ``Add`` and batch normalisation (docs/results.md, CIFAR-10 section). ``dave2`` and its
variants are steering (regression) models for the Udacity driving frames.
"""

from __future__ import annotations

from .keras_network import keras


class _Init:
    """Kernel initialisers seeded per layer from ``random_state``: the same random_state builds the same
    model, without touching Keras' global generator (None: unseeded, Keras' default)."""

    def __init__(self, random_state: int | None):
        self.random_state, self.layers = random_state, 0

    def __call__(self, he: bool = False) -> dict:
        """Glorot-uniform (Keras' default), or He-normal for the ReLU convolutions of ResNets."""
        if self.random_state is None:
            return {"kernel_initializer": "he_normal"} if he else {}
        self.layers += 1
        kind = keras.initializers.HeNormal if he else keras.initializers.GlorotUniform
        return {"kernel_initializer": kind(seed=self.random_state * 1000 + self.layers)}


def _features(x, filters: tuple[int, int], init: _Init):
    L = keras.layers
    x = L.Conv2D(filters[0], 5, padding="same", activation="relu", name="block1_conv1", **init())(x)
    x = L.MaxPooling2D(2, name="block1_pool1")(x)
    x = L.Conv2D(filters[1], 5, padding="same", activation="relu", name="block2_conv1", **init())(x)
    x = L.MaxPooling2D(2, name="block2_pool1")(x)
    return L.Flatten(name="flatten")(x)


def _head(inputs, x, n_classes: int, name: str, init: _Init):
    x = keras.layers.Dense(n_classes, name="before_softmax", **init())(x)
    out = keras.layers.Activation("softmax", name="predictions")(x)
    return keras.Model(inputs, out, name=name)


def lenet1(input_shape=(28, 28, 1), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    inputs, init = keras.Input(input_shape, name="input"), _Init(random_state)
    return _head(inputs, _features(inputs, (4, 12), init), n_classes, "lenet1", init)


def lenet4(input_shape=(28, 28, 1), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    inputs, init = keras.Input(input_shape, name="input"), _Init(random_state)
    x = keras.layers.Dense(84, activation="relu", name="fc1", **init())(_features(inputs, (6, 16), init))
    return _head(inputs, x, n_classes, "lenet4", init)


def lenet5(input_shape=(28, 28, 1), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    inputs, init = keras.Input(input_shape, name="input"), _Init(random_state)
    x = keras.layers.Dense(120, activation="relu", name="fc1", **init())(_features(inputs, (6, 16), init))
    x = keras.layers.Dense(84, activation="relu", name="fc2", **init())(x)
    return _head(inputs, x, n_classes, "lenet5", init)


def cifar10_cnn(input_shape=(32, 32, 3), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    """The paper's CIFAR-10 network: Keras' classic cifar10_cnn example, with separate Activation layers.

    Two blocks of two 3x3 convolutions (32 then 64 filters, the first of each padded "same"), each block
    ending in max-pooling and dropout 0.25; then dense 512 + ReLU (``fc1_relu``, the paper's penultimate
    subject layer), dropout 0.5 and dense 10 + softmax. 19 layers with the input, 1.25 M parameters.
    """
    L, init = keras.layers, _Init(random_state)
    inputs = keras.Input(input_shape, name="input")
    x = inputs
    for block, filters in ((1, 32), (2, 64)):
        for conv, padding in ((1, "same"), (2, "valid")):
            x = L.Conv2D(filters, 3, padding=padding, name=f"block{block}_conv{conv}", **init())(x)
            x = L.Activation("relu", name=f"block{block}_relu{conv}")(x)
        x = L.MaxPooling2D(2, name=f"block{block}_pool")(x)
        x = L.Dropout(0.25, name=f"block{block}_dropout")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(512, name="fc1", **init())(x)
    x = L.Activation("relu", name="fc1_relu")(x)
    x = L.Dropout(0.5, name="fc1_dropout")(x)
    return _head(inputs, x, n_classes, "cifar10_cnn", init)


def _residual_block(x, filters: int, stride: int, name: str, init: _Init):
    """conv-BN-ReLU-conv-BN plus the shortcut (a 1x1 convolution + BN where the shape changes), then ReLU."""
    L = keras.layers
    y = L.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1", **init(he=True))(x)
    y = L.BatchNormalization(name=f"{name}_bn1")(y)
    y = L.Activation("relu", name=f"{name}_relu1")(y)
    y = L.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2", **init(he=True))(y)
    y = L.BatchNormalization(name=f"{name}_bn2")(y)
    if stride != 1 or x.shape[-1] != filters:
        x = L.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_proj", **init(he=True))(x)
        x = L.BatchNormalization(name=f"{name}_proj_bn")(x)
    x = L.Add(name=f"{name}_add")([x, y])
    return L.Activation("relu", name=f"{name}_out")(x)


def resnet20(input_shape=(32, 32, 3), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    """The standard CIFAR ResNet-20 (He et al. 2016, section 4.2): a 3x3 convolution with 16 filters, three
    stages of three basic blocks with 16, 32 and 64 filters (stride 2 at the start of stages 2 and 3,
    projection shortcuts there), global average pooling (``avg_pool``) and dense 10 + softmax. 0.27 M
    parameters; blocks are named ``stage<s>_block<b>_*``."""
    L, init = keras.layers, _Init(random_state)
    inputs = keras.Input(input_shape, name="input")
    x = L.Conv2D(16, 3, padding="same", use_bias=False, name="stem_conv", **init(he=True))(inputs)
    x = L.BatchNormalization(name="stem_bn")(x)
    x = L.Activation("relu", name="stem_relu")(x)
    for stage, filters in ((1, 16), (2, 32), (3, 64)):
        for block in (1, 2, 3):
            stride = 2 if stage > 1 and block == 1 else 1
            x = _residual_block(x, filters, stride, f"stage{stage}_block{block}", init)
    x = L.GlobalAveragePooling2D(name="avg_pool")(x)
    return _head(inputs, x, n_classes, "resnet20", init)


def dave2(input_shape=(66, 200, 3), random_state: int | None = 0, variant: str = "orig") -> keras.Model:
    """NVIDIA's Dave-2 steering model (Bojarski et al. 2016), a regression model (docs/design.md,
    "Regression models"): inputs in [0, 1] (frames with the sky cropped, resized to 66x200), normalised
    inside the model to [-1, 1]; five convolutions (24, 36, 48 filters 5x5 stride 2; 64, 64 3x3), flatten
    (1,152 values at 66x200), dense 1164-100-50-10, then one linear unit (the steering angle in radians;
    DeepXplore's ``atan(x) * 2`` head is left out, so the model loads without --unsafe). Hidden layers use
    ELU with He-normal kernels: with ReLU the model collapsed to a constant output on the Udacity frames
    (Glorot or He kernels, Adam lr 1e-4 to 1e-3; docs/results.md, "Dave-2 on Udacity").

    ``variant`` gives DeepXplore-style siblings for differential testing: "orig" (He-normal kernels),
    "norminit" (kernels drawn from a truncated normal distribution, stddev 0.1, as DeepXplore's
    Dave-norminit; stddev 0.01 collapsed to a constant output), "dropout" (dropout 0.5 after the
    1164- and 100-unit layers). They follow DeepXplore's idea of three differently trained Daves, not its
    exact layers.
    """
    if variant not in ("orig", "norminit", "dropout"):
        raise ValueError(f"variant must be orig, norminit or dropout; got {variant!r}")
    L, init = keras.layers, _Init(random_state)

    def kernel() -> dict:
        if variant != "norminit":
            return init(he=True)
        seed = None if random_state is None else random_state * 1000 + 500 + len(layers)
        return {"kernel_initializer": keras.initializers.TruncatedNormal(stddev=0.1, seed=seed)}

    layers: list = []
    inputs = keras.Input(input_shape, name="input")
    x = L.Rescaling(2.0, offset=-1.0, name="normalise")(inputs)
    for i, (filters, size, stride) in enumerate(((24, 5, 2), (36, 5, 2), (48, 5, 2), (64, 3, 1), (64, 3, 1)), 1):
        layers.append(i)
        x = L.Conv2D(filters, size, strides=stride, activation="elu", name=f"conv{i}", **kernel())(x)
    x = L.Flatten(name="flatten")(x)
    for i, units in enumerate((1164, 100, 50, 10), 1):
        layers.append(i)
        x = L.Dense(units, activation="elu", name=f"fc{i}", **kernel())(x)
        if variant == "dropout" and units in (1164, 100):
            x = L.Dropout(0.5, name=f"fc{i}_dropout")(x)
    layers.append(0)
    out = L.Dense(1, name="steering", **kernel())(x)
    return keras.Model(inputs, out, name="dave2" if variant == "orig" else f"dave2_{variant}")


def dave2_norminit(input_shape=(66, 200, 3), random_state: int | None = 0) -> keras.Model:
    return dave2(input_shape, random_state, "norminit")


def dave2_dropout(input_shape=(66, 200, 3), random_state: int | None = 0) -> keras.Model:
    return dave2(input_shape, random_state, "dropout")


#: steering models (regression, MSE loss): recipes/train_models.py --dataset udacity
DRIVING_MODELS = {"dave2": dave2, "dave2_norminit": dave2_norminit, "dave2_dropout": dave2_dropout}

MODELS = {"lenet1": lenet1, "lenet4": lenet4, "lenet5": lenet5, "cifar10_cnn": cifar10_cnn, "resnet20": resnet20}


def train(
    model: keras.Model,
    x,
    y,
    *,
    epochs: int = 10,
    batch_size: int = 256,
    optimizer: str = "adadelta",
    validation=None,
    verbose: int = 0,
    random_state: int = 0,
) -> keras.callbacks.History:
    """Train with the paper's settings (adadelta lr 1.0, rho 0.95, batch 256) or ``optimizer="adam"``."""
    keras.utils.set_random_seed(random_state)
    opt = keras.optimizers.Adadelta(learning_rate=1.0, rho=0.95) if optimizer == "adadelta" else optimizer
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model.fit(x, y, epochs=epochs, batch_size=batch_size, validation_data=validation, verbose=verbose)


def vit_tiny(
    input_shape=(32, 32, 3),
    n_classes: int = 10,
    random_state: int | None = 0,
    *,
    patch: int = 4,
    dim: int = 64,
    depth: int = 4,
    heads: int = 4,
    mlp_ratio: int = 2,
) -> keras.Model:
    """A ViT-Tiny for 32x32 images (Dosovitskiy et al. 2021, scaled down): 4x4 patches embedded by a strided
    convolution (``patch_embed``, 64 tokens of ``dim`` values), a conditional position encoding added to
    them (``pos_conv``: a depthwise 3x3 convolution over the token grid, CPVT's PEG, Chu et al. 2023, so that
    every layer is a built-in Keras layer and the file loads without custom objects), ``depth`` pre-norm
    blocks (``block<i>_ln1`` -> ``block<i>_attn`` (MultiHeadAttention) -> ``block<i>_add1``; ``block<i>_ln2``
    -> ``block<i>_mlp1`` (Dense, GELU) -> ``block<i>_mlp2`` -> ``block<i>_add2``), a final LayerNorm
    (``final_ln``), the mean over tokens (``avg_pool``) and dense 10 + softmax.

    A neuron of a token layer (batch, tokens, dims) is one of its ``dims`` units: activation averaged and
    relevance summed over tokens, as a channel's over positions (docs/design.md, "Relevance")."""
    L, init = keras.layers, _Init(random_state)
    side = input_shape[0] // patch
    inputs = keras.Input(input_shape, name="input")
    x = L.Conv2D(dim, patch, strides=patch, name="patch_embed", **init())(inputs)
    x = L.Add(name="pos_add")([x, L.DepthwiseConv2D(3, padding="same", name="pos_conv", **_depthwise(init))(x)])
    x = L.Reshape((side * side, dim), name="tokens")(x)
    for i in range(1, depth + 1):
        y = L.LayerNormalization(epsilon=1e-6, name=f"block{i}_ln1")(x)
        y = L.MultiHeadAttention(heads, dim // heads, name=f"block{i}_attn", **init())(y, y)
        x = L.Add(name=f"block{i}_add1")([x, y])
        y = L.LayerNormalization(epsilon=1e-6, name=f"block{i}_ln2")(x)
        y = L.Dense(dim * mlp_ratio, activation="gelu", name=f"block{i}_mlp1", **init())(y)
        y = L.Dense(dim, name=f"block{i}_mlp2", **init())(y)
        x = L.Add(name=f"block{i}_add2")([x, y])
    x = L.LayerNormalization(epsilon=1e-6, name="final_ln")(x)
    x = L.GlobalAveragePooling1D(name="avg_pool")(x)
    return _head(inputs, x, n_classes, "vit_tiny", init)


def _depthwise(init: _Init) -> dict:
    """A depthwise kernel initialiser seeded like `_Init`'s (Keras names it ``depthwise_initializer``)."""
    kw = init()
    return {"depthwise_initializer": kw["kernel_initializer"]} if kw else {}


def convnext_block(x, dim: int, name: str, init: _Init, layer_scale: float = 1e-6):
    """ConvNeXt's block (Liu et al. 2022): depthwise 7x7 -> LayerNorm -> Dense 4x (GELU) -> Dense -> layer
    scale -> + input. The layer scale (a learned per-channel factor) is a bias-free 1x1 depthwise
    convolution: the same arithmetic as keras.applications' LayerScale, with built-in layers only."""
    L = keras.layers
    y = L.DepthwiseConv2D(7, padding="same", name=f"{name}_dwconv", **_depthwise(init))(x)
    y = L.LayerNormalization(epsilon=1e-6, name=f"{name}_ln")(y)
    y = L.Dense(4 * dim, activation="gelu", name=f"{name}_pw1", **init())(y)
    y = L.Dense(dim, name=f"{name}_pw2", **init())(y)
    y = L.DepthwiseConv2D(
        1, use_bias=False, name=f"{name}_scale", depthwise_initializer=keras.initializers.Constant(layer_scale)
    )(y)
    return L.Add(name=f"{name}_add")([x, y])


def convnext_micro(
    input_shape=(32, 32, 3),
    n_classes: int = 10,
    random_state: int | None = 0,
    *,
    dims: tuple = (32, 64, 128),
    depths: tuple = (1, 1, 2),
) -> keras.Model:
    """A small ConvNeXt for 32x32 images: a 2x2 stride-2 stem with LayerNorm (16x16), three stages of
    `convnext_block` (``stage<s>_block<b>_*``) with ``dims`` channels, each later stage entered through
    LayerNorm and a 2x2 stride-2 convolution (``stage<s>_down_*``); global average pooling, LayerNorm
    (``head_ln``) and dense 10 + softmax. Layer scale starts at 1e-6 as in the paper."""
    L, init = keras.layers, _Init(random_state)
    inputs = keras.Input(input_shape, name="input")
    x = L.Conv2D(dims[0], 2, strides=2, name="stem_conv", **init())(inputs)
    x = L.LayerNormalization(epsilon=1e-6, name="stem_ln")(x)
    for s, (dim, depth) in enumerate(zip(dims, depths), 1):
        if s > 1:
            x = L.LayerNormalization(epsilon=1e-6, name=f"stage{s}_down_ln")(x)
            x = L.Conv2D(dim, 2, strides=2, name=f"stage{s}_down_conv", **init())(x)
        for b in range(1, depth + 1):
            x = convnext_block(x, dim, f"stage{s}_block{b}", init)
    x = L.GlobalAveragePooling2D(name="avg_pool")(x)
    x = L.LayerNormalization(epsilon=1e-6, name="head_ln")(x)
    return _head(inputs, x, n_classes, "convnext_micro", init)


def efficientnet_b0(input_shape=(32, 32, 3), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    """keras.applications' EfficientNet-B0 (swish, squeeze-excitation gates), weights=None. It starts with
    Rescaling(1/255) and ImageNet normalisation: it takes 0..255 images. ``random_state`` is unused (seed
    Keras' generator before building)."""
    return keras.applications.EfficientNetB0(weights=None, input_shape=input_shape, classes=n_classes)


def mobilenet_v3_small(input_shape=(32, 32, 3), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    """keras.applications' MobileNetV3-Small (hard swish, squeeze-excitation gates), weights=None; it starts
    with Rescaling(1/127.5, offset -1): it takes 0..255 images. ``random_state`` is unused."""
    return keras.applications.MobileNetV3Small(weights=None, input_shape=input_shape, classes=n_classes)


#: CIFAR-10 transformers and modern CNNs (recipes/train_transformers.py)
TRANSFORMER_MODELS = {
    "vit_tiny": vit_tiny,
    "convnext_micro": convnext_micro,
    "efficientnet_b0": efficientnet_b0,
    "mobilenet_v3_small": mobilenet_v3_small,
}

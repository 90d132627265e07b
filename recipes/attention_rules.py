"""Which attention rule is more faithful on the trained ViT: zero the top-k neurons by relevance (CP-LRP or
AttnLRP) at a layer inside a block and see how far the explained logit falls, beside k random neurons.

    python recipes/attention_rules.py [--model vit_tiny] [--layers block2_ln1 block2_add1 block3_mlp1 block4_ln1]
                                      [--n 500] [--random 5]

For each test image (the first ``--n`` of CIFAR-10's test split) the explained logit is the predicted
class's, as an analysis explains it. A neuron of a token layer is one of its dims; zeroing it sets that
dim to 0 at every token of the layer's output and runs the rest of the model. Two rankings per rule:
"per input" (each image's own top-k by signed relevance) and "global" (the top-k of the mean relevance over
the images, the same for all: what an analysis' important neurons are). Random: ``--random`` draws of k
neurons per image. The drop is logit(original) - logit(zeroed), averaged over the images; "wins" is the
share of images whose drop under the rule's per-input top-k exceeds the mean drop of the random draws;
"attnlrp - cp" the paired difference of the per-input drops (mean ± standard error over the images);
the relevance pass's seconds over the images for each rule.
Writes ``outputs/attention_rules/faithfulness.{md,csv}``.
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import OUTPUTS, Timer, command_line, load_data, model_path, write_table

KS = (1, 2, 4, 8)


def zeroed_logits(network, x, layer: str, mask: np.ndarray) -> np.ndarray:
    """The explained model's logits with ``layer``'s output multiplied by ``mask`` (n, neurons), broadcast over
    tokens or positions."""
    import tensorflow as tf

    graph, key = network.graph, network.key_of(layer)
    values = {graph.input_key: tf.convert_to_tensor(x)}
    last = graph.steps.index(network.logits_step)
    for step in graph.steps[: last + 1]:
        outs = step.call(
            [values[k] for k in step.inputs], linear=step is network.logits_step and network.softmax_in_last_layer
        )
        if step.outputs[0] == key:
            m = tf.convert_to_tensor(mask, outs[0].dtype)
            outs[0] = outs[0] * tf.reshape(m, [len(mask)] + [1] * (len(outs[0].shape) - 2) + [mask.shape[1]])
        values.update(zip(step.outputs, outs))
    return values[network.logits_key].numpy()


def drop(network, x, layer, chosen, cls, base) -> np.ndarray:
    """Per image: the explained logit's fall when the neurons ``chosen`` (n, k) are zeroed."""
    mask = np.ones((len(x), network.neuron_count(layer)), np.float32)
    np.put_along_axis(mask, chosen, 0.0, axis=1)
    z = zeroed_logits(network, x, layer, mask)
    return base - z[np.arange(len(x)), cls]


def measure(network, x, layer: str, *, draws: int, rng) -> list[dict]:
    r, seconds = {}, {}
    for rule in ("cp", "attnlrp"):
        rel = network.relevance(layer, attention=rule, batch_size=100)
        rel(x[:100])  # traced before timing
        with Timer() as t:
            r[rule] = rel(x)[0]
        seconds[rule] = t.seconds
    z = zeroed_logits(network, x, layer, np.ones((len(x), network.neuron_count(layer)), np.float32))
    cls = z.argmax(axis=1)
    base = z[np.arange(len(x)), cls]
    n_neurons = network.neuron_count(layer)
    rows = []
    for k in KS:
        random = np.mean(
            [
                drop(network, x, layer, np.stack([rng.choice(n_neurons, k, replace=False) for _ in x]), cls, base)
                for _ in range(draws)
            ],
            axis=0,
        )
        row = {"layer": layer, "k": k, "random drop": float(random.mean())}
        own = {}
        for rule in ("cp", "attnlrp"):
            own[rule] = drop(network, x, layer, np.argsort(-r[rule], axis=1)[:, :k], cls, base)
            top = np.argsort(-r[rule].mean(axis=0))[:k]
            shared = drop(network, x, layer, np.tile(top, (len(x), 1)), cls, base)
            row.update(
                {
                    f"{rule} per-input drop": float(own[rule].mean()),
                    f"{rule} global drop": float(shared.mean()),
                    f"{rule} wins %": round(100 * float((own[rule] > random).mean()), 1),
                }
            )
        diff = own["attnlrp"] - own["cp"]  # paired over the same images
        row["attnlrp - cp per-input"] = f"{diff.mean():+.4f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.4f}"
        overlap = np.mean(
            [len(set(np.argsort(-r["cp"][i])[:k]) & set(np.argsort(-r["attnlrp"][i])[:k])) / k for i in range(len(x))]
        )
        row["top-k shared %"] = round(100 * float(overlap), 1)
        row["relevance s (cp / attnlrp)"] = f"{seconds['cp']:.1f} / {seconds['attnlrp']:.1f}"
        rows.append(row)
        print(row, flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_tiny")
    parser.add_argument("--layers", nargs="+", default=["block2_ln1", "block2_add1", "block3_mlp1", "block4_ln1"])
    parser.add_argument("--n", type=int, default=500, help="test images")
    parser.add_argument("--random", type=int, default=5, help="random draws of k neurons per image")
    args = parser.parse_args(argv)
    from idcgen.framework import load_network

    network = load_network(model_path(args.model, "cifar10"))
    x, _ = load_data("test", "cifar10", limit=args.n)
    rng = np.random.default_rng(0)
    rows = []
    with Timer() as t:
        for layer in args.layers:
            rows += measure(network, x, layer, draws=args.random, rng=rng)
    write_table(
        OUTPUTS / "attention_rules",
        "faithfulness",
        rows,
        command=command_line(),
        title=f"Attention rules on {args.model}: logit drop when the top-k neurons by relevance are zeroed",
        notes=f"{args.n} CIFAR-10 test images, the predicted class's logit; {args.random} random draws per "
        f"image; {t.seconds:.0f} s.",
    )
    return rows


if __name__ == "__main__":
    main()

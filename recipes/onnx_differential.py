"""Differential testing of a deployed ONNX export against its source (docs/models.md, "Deployed ONNX exports"):
a PyTorch LeNet-5 trained briefly on the 4,000 embedded MNIST digits, saved as a ``.pt2`` program, exported to
ONNX and dynamically quantised to int8; then the source is analysed, the export measured with that analysis,
and each export fuzzed against the source with the disagreement oracle.

    python recipes/onnx_differential.py [--epochs 10] [--budget 10000]

Writes ``outputs/onnx/`` afresh (the three models, the analysis, the campaigns ``fp32`` and ``int8``) and prints each
command's last line; needs the torch and onnx extras.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from kit import OUTPUTS


def idcgen(*args) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "idcgen.cli", *map(str, args)], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(done.stdout + done.stderr)
    return done.stdout.strip().splitlines()[-2 if args[0] == "fuzz" else -1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--budget", type=int, default=10000)
    args = parser.parse_args()

    import numpy as np
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from idcgen.data import embedded_mnist
    from idcgen.framework.torch_zoo import LeNet5, accuracy, export_program, train

    folder = OUTPUTS / "onnx"
    shutil.rmtree(folder, ignore_errors=True)  # a fresh run: the analysis and campaigns are made again
    folder.mkdir(parents=True)
    x, y = embedded_mnist("train")
    x_test, y_test = embedded_mnist("test")
    x, x_test = (np.asarray(a, np.float32)[..., None] / 255.0 for a in (x, x_test))
    torch.manual_seed(0)
    module = LeNet5(input_shape=x.shape[1:])
    train(module, x, y, epochs=args.epochs, lr=2e-3)
    module.eval()
    print(f"LeNet-5: test accuracy {accuracy(module, x_test, y_test):.3f}")
    export_program(module, folder / "lenet5.pt2")
    # the TorchScript-based exporter needs only onnx; dynamo=True (torch's default) needs onnxscript too
    torch.onnx.export(
        module, (torch.zeros(1, 1, 28, 28),), str(folder / "lenet5.onnx"),
        dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "n"}},
    )  # fmt: skip
    quantize_dynamic(str(folder / "lenet5.onnx"), str(folder / "lenet5_int8.onnx"), weight_type=QuantType.QInt8)
    analysis = folder / "analysis"
    print(idcgen("analyze", "--model", folder / "lenet5.pt2", "--train", "embedded-mnist:train", "--out", analysis))
    for name in ("lenet5.pt2", "lenet5.onnx", "lenet5_int8.onnx"):
        line = idcgen("coverage", "--model", folder / name, "--analysis", analysis, "--inputs", "embedded-mnist:test")
        print(f"{name}: {line}")
    for name, export in (("fp32", "lenet5.onnx"), ("int8", "lenet5_int8.onnx")):
        line = idcgen(
            "fuzz", "--model", folder / "lenet5.pt2", "--model", folder / export, "--seeds", "embedded-mnist:test",
            "--analysis", analysis, "--oracle", "disagreement", "--budget", args.budget, "--out", folder / name,
        )  # fmt: skip
        print(f"{name} export vs source: {line}")


if __name__ == "__main__":
    main()

"""Each framework is an extra of its own: a model whose framework is missing is refused in one line naming the
extra, and the other framework's models do not need it."""

import subprocess
import sys

import pytest

BLOCK = "import sys\nfor name in {names}:\n    sys.modules[name] = None   # as if not installed\n"


def run(code: str, *names: str):
    return subprocess.run(
        [sys.executable, "-c", BLOCK.format(names=list(names)) + code], capture_output=True, text=True
    )


def test_a_keras_model_without_tensorflow_is_one_line_naming_the_extra(tmp_path):
    (tmp_path / "m.keras").write_bytes(b"not read: the framework is checked first")
    done = run(
        "from idcgen.cli import main\nsys.argv = ['idcgen', 'layers', '--model', "
        f"{str(tmp_path / 'm.keras')!r}]\nmain()",
        "tensorflow",
        "keras",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == 'error: Keras models need TensorFlow and Keras: pip install "idcgen[keras]"'


def test_a_pytorch_model_runs_where_tensorflow_cannot_be_imported(tmp_path):
    pytest.importorskip("torch")
    code = (
        "import torch, numpy as np\n"
        "from torch import nn\n"
        "net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 26 * 26, 16), nn.ReLU(),\n"
        "                    nn.Linear(16, 10)).eval()\n"
        f"torch.export.save(torch.export.export(net, (torch.zeros(1, 1, 28, 28),)), {str(tmp_path / 'm.pt2')!r})\n"
        "from idcgen import analyze\n"
        "from idcgen.framework import load_network\n"
        f"network = load_network({str(tmp_path / 'm.pt2')!r})\n"
        "x = np.random.default_rng(0).random((64, 28, 28, 1), dtype=np.float32)\n"
        "analysis = analyze(network, x, m=2, clusters=(2,), progress=False)\n"
        "print(analysis.layer, analysis.total, 'tensorflow' in sys.modules and sys.modules['tensorflow'] is not None)\n"
    )
    done = run(code, "tensorflow", "keras")
    assert done.returncode == 0, done.stderr
    layer, total, imported = done.stdout.split()
    assert int(total) == 4 and imported == "False"

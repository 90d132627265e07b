"""TensorFlow's start-up lines are dropped; anything else written to stderr during the import still shows; ART's
import leaves the process' logging alone."""

import os
import subprocess
import sys

from idcgen.framework.quiet import NOISE, quiet_start


def test_caught_lines_that_are_not_noise_are_written_back(capfd):
    with quiet_start():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on. You may see slightly different results\n")
        os.write(2, b"E0000 cuda_executor.cc] failed call to cuInit: INTERNAL: CUDA error: (303)\n")
        os.write(2, b"a real problem: libfoo.so not found\n")
    err = capfd.readouterr().err
    assert err == "a real problem: libfoo.so not found\n"


def test_a_keras_model_loads_without_tensorflows_start_up_lines(tmp_path):
    script = (
        f"import keras\n"  # noqa: ISC003
        f"m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])\n"
        f"m.save({str(tmp_path / 'm.keras')!r})\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from idcgen.framework import load_network\n"
            f"print(load_network({str(tmp_path / 'm.keras')!r}).input_shape)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == "(4,)"
    assert not [line for line in run.stderr.splitlines() if NOISE.search(line)], run.stderr


def test_taps_of_several_layer_sets_print_no_retracing_warning(trained_lenet, digits, caplog):
    # each set of layers a command taps is a tf.function traced once per batch shape; TensorFlow counted them
    # together (one code object) and printed "N out of the last M calls ... triggered tf.function retracing"
    import logging

    from idcgen.framework import Network

    model, _ = trained_lenet
    x = digits[2][:70]
    network = Network(model)
    network.batch_size = 32  # full batches and a shorter last one: two traces per tap
    names = ["block1_conv1", "block1_pool1", "block2_conv1", "block2_pool1", "flatten"]
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        for i in range(len(names)):
            network.forward(x, tuple(names[: i + 1]))
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]


def test_importing_art_for_jsma_leaves_the_process_logging_alone():
    # ART's first import ran logging.config.dictConfig, which closes every handler of the process; absl's
    # (TensorFlow's) then closed the stream it held, and under pytest that was the capture of stderr, so a
    # later test (one with capsys) failed with "I/O operation on closed file". A fresh process, as ART's
    # import happens once.
    script = """
import logging, os, sys
capture = sys.stderr = open(os.devnull, "w")  # a test runner's capture of stderr, when absl is first imported
import absl.logging
from idcgen.framework.quiet import import_art

closed = []
class Kept(logging.Handler):
    def emit(self, record):
        pass
    def close(self):
        closed.append(self)
        super().close()

logging.getLogger("user").addHandler(Kept())
sys.stderr = open(os.devnull, "w")  # the runner's next capture (pytest's capsys)
jsma, wrapper = import_art("TensorFlowV2Classifier")
print(jsma.__name__, wrapper.__name__, len(closed), capture.closed, logging.getLogger("art").level)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["SaliencyMapMethod", "TensorFlowV2Classifier", "0", "False", "40"]

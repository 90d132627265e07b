"""Frameworks started without their start-up noise (docs/design.md, "The framework boundary").

TensorFlow writes lines to the process' stderr (file descriptor 2, from C++, past Python's ``sys.stderr``)
when it is first imported: the oneDNN notice, absl's "All log messages before absl::InitializeLog()", the CPU
instruction notice, and on a machine with a CUDA build but no GPU "failed call to cuInit". None of them is
something a user can act on. :func:`quiet_start` runs the import with descriptor 2 caught and writes back
every caught line that is not one of these, so a real error or warning still shows.

ART (the JSMA attack) configures the process' logging when first imported; :func:`import_art` imports it
without that.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tempfile
import threading
import warnings
from contextlib import contextmanager

#: the start-up lines dropped; anything else written during the import is written back
NOISE = re.compile(
    "|".join(
        [
            r"oneDNN custom operations are on",
            r"All log messages before absl::InitializeLog\(\) is called",
            r"This TensorFlow binary is optimized to use available CPU instructions",
            r"rebuild TensorFlow with the appropriate compiler flags",
            r"failed call to cuInit",
            r"Could not find cuda drivers on your machine",
            r"Unable to register cu(DNN|FFT|BLAS) factory",
            r"computation placer already registered",
            r"TF-TRT Warning: Could not find TensorRT",
        ]
    )
)


@contextmanager
def quiet_start():
    """Run the block (a framework's first import) with stderr's descriptor caught; write back what is not noise."""
    try:
        descriptor = sys.__stderr__.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (an embedding host): nothing to catch
        yield
        return
    sys.stderr.flush()
    saved = os.dup(descriptor)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), descriptor)
        try:
            yield
        finally:
            os.dup2(saved, descriptor)
            os.close(saved)
            caught.seek(0)
            kept = [
                line
                for line in caught.read().decode(errors="replace").splitlines(keepends=True)
                if not NOISE.search(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


#: one import of ART at a time: its first import swaps a function of the logging module for a while
_ART_IMPORT = threading.Lock()


def import_art(estimator: str):
    """ART's ``SaliencyMapMethod`` (JSMA) and its classifier wrapper ``estimator`` (a class name in
    ``art.estimators.classification``), imported quietly.

    ART's first import runs ``logging.config.dictConfig``, and that closes every logging handler the process
    has. absl's handler (TensorFlow's) then closes the stream it was given if that no longer is
    ``sys.stderr``, e.g. a test runner's capture of stderr from before the runner swapped in another. So that
    first import runs with ``dictConfig`` held off (under a lock; a ``dictConfig`` call of another thread in
    those seconds would be dropped too): the user's logging stays as it was, and ART's logger is set to ERROR.
    Its import-time warnings (e.g. that PyTorch, for its certification tools, is missing) are dropped."""
    import logging.config

    with _ART_IMPORT, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "art" not in sys.modules:
            configure = logging.config.dictConfig
            logging.config.dictConfig = lambda config: None
            try:
                import art  # noqa: F401
            finally:
                logging.config.dictConfig = configure
        from art.attacks.evasion import SaliencyMapMethod

        wrapper = getattr(importlib.import_module("art.estimators.classification"), estimator)
    logging.getLogger("art").setLevel(logging.ERROR)
    return SaliencyMapMethod, wrapper

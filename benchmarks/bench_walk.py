"""The walk into the core: which idcgen functions (and files) run before the first kept mutant of a campaign.

    python benchmarks/bench_walk.py [--budget 512] [--by-file]

Runs ``idcgen fuzz --model m.pt2 --seeds DIR --budget N`` in this process on a small PyTorch CNN (exported with
torch.export, random weights, 200 random seed images) under ``sys.setprofile`` and counts the distinct idcgen
functions and files called until the first step that keeps a mutant, and how many of them before the loop's
first step, and the calls of the option parsers and of ``Analysis.load`` over the whole run. Prints one line
and records it (benchmarks/record.py: benchmarks/results/bench_walk.jsonl).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import record  # noqa: E402


def small_cnn():
    import torch
    from torch import nn

    class Net(nn.Module):
        input_shape = (28, 28, 1)

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 8, 3, padding=1)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)
            self.flat = nn.Flatten()
            self.fc1 = nn.Linear(8 * 14 * 14, 32)
            self.act = nn.ReLU()
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(self.flat(self.pool(self.relu(self.conv(x)))))))

    torch.manual_seed(0)
    return Net().eval()


KINDS = ("functions and methods", "class and module bodies", "comprehensions and lambdas")


def kind_of(code) -> str:
    """Which of KINDS a code object is: a body runs in a namespace dict, not in fresh locals."""
    if not code.co_flags & inspect.CO_NEWLOCALS:
        return KINDS[1]
    return KINDS[2] if code.co_name.startswith("<") else KINDS[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=512)
    parser.add_argument("--by-file", action="store_true", help="also print the functions counted per file")
    args = parser.parse_args()
    import torch

    import idcgen
    from idcgen.cli import main as cli
    from idcgen.fuzz.campaign import Campaign

    package = str(Path(idcgen.__file__).parent)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        program = torch.export.export(small_cnn(), (torch.zeros(1, 1, 28, 28),))
        torch.export.save(program, tmp / "m.pt2")
        rng = np.random.default_rng(0)
        np.savez(tmp / "seeds.npz", x=rng.integers(0, 256, (200, 28, 28), dtype=np.uint8), y=rng.integers(0, 10, 200))
        seen, files, state = {}, set(), {"counting": True, "loop": None}  # seen: (file, qualname) -> kind
        parses = {}  # calls of the option parsers and of Analysis.load, over the whole run

        def profile(frame, event, arg):
            if event != "call" or not frame.f_code.co_filename.startswith(package):
                return
            code = frame.f_code
            if code.co_name.startswith("parse_") or code.co_qualname == "Analysis.load":
                parses[code.co_qualname] = parses.get(code.co_qualname, 0) + 1
            if state["counting"]:
                seen[(code.co_filename, code.co_qualname)] = kind_of(code)
                files.add(code.co_filename)

        campaign_record = Campaign.record

        def counted(self, step, seconds):
            if state["loop"] is None:
                state["loop"] = len(seen)  # functions before the loop's first step was recorded
            campaign_record(self, step, seconds)
            if step.error is None and step.keep.any():
                state["counting"] = False

        Campaign.record = counted
        sys.argv = [
            "idcgen",
            "fuzz",
            "--model",
            str(tmp / "m.pt2"),
            "--seeds",
            str(tmp / "seeds.npz"),
            "--budget",
            str(args.budget),
            "--mutators",
            "gauss,rotate",
            "--out",
            str(tmp / "c"),
        ]
        sys.setprofile(profile)
        try:
            cli()
        except SystemExit:
            pass
        finally:
            sys.setprofile(None)
            Campaign.record = campaign_record
    kinds = {kind: list(seen.values()).count(kind) for kind in KINDS}
    print(
        f"{len(seen)} idcgen functions in {len(files)} files before the first kept mutant "
        f"({state['loop']} before the loop's first step; "
        + ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        + "); calls: "
        + ", ".join(f"{k} {v}" for k, v in sorted(parses.items()))
    )
    if args.by_file:  # where the walk goes: the files with the most functions first, and which functions
        per_file: dict = {}
        for filename, qualname in seen:
            per_file.setdefault(str(Path(filename).relative_to(package)), []).append(qualname)
        for name, names in sorted(per_file.items(), key=lambda item: (-len(item[1]), item[0])):
            print(f"{len(names):5d}  {name}: {' '.join(sorted(names))}")
    record(
        "idcgen functions before the first kept mutant",
        len(seen),
        unit="functions",
        bench="bench_walk",
        files=len(files),
        functions_before_loop=state["loop"],
        kinds=kinds,
        calls=dict(sorted(parses.items())),
        budget=args.budget,
    )


if __name__ == "__main__":
    main()

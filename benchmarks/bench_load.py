"""PyTorch under CPU contention (issues 35, 50): a fuzz campaign of a PyTorch model and its Keras twin (the
same network and weights in both) alone and beside ``--hogs`` busy processes, each campaign in a fresh
process. ``--subject twin``: tests/torch_twins.py's small residual net, six cheap mutators; ``--subject
lenet5``: docs/usage.md's PyTorch example (LeNet-5 moved into PyTorch, the embedded test digits, the default
mutators). PyTorch runs with idcgen's thread settings (intra-op threads cut to the usable and free CPUs,
OpenMP waiting passively; idcgen/framework/torch_load.py), with torch's own defaults (torch imported before
idcgen, so OpenMP starts with the default wait policy, and its thread count kept), and with idcgen's
settings at a fixed one and two intra-op threads.

    python benchmarks/bench_load.py [--budget 6000] [--hogs 2] [--subject twin|lenet5]

Prints seconds and ratios, and one JSON line per measurement (``{"bench": "load", ...}``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import record  # noqa: E402  (benchmarks/record.py: one JSON line per figure, results/bench_load.jsonl)

ROOT = Path(__file__).resolve().parents[1]

#: the campaign every measurement runs (in memory: the loop, not the disk)
MUTATORS = ["gauss", "random_pixels", "shift", "rotate", "brightness", "contrast"]


def prepare(folder: Path, subject: str) -> None:
    """The twins as files (``twin``: tests/torch_twins.py's residual net, 200 seeds labelled by its Keras
    twin; ``lenet5``: docs/usage.md's PyTorch example, LeNet-5 trained 2 epochs on the embedded digits and
    moved into PyTorch, the 1,000 embedded test digits), and one analysis per twin."""
    sys.path.insert(0, str(ROOT / "tests"))
    import numpy as np

    import idcgen
    from idcgen.framework.torch_zoo import export_program, from_keras

    if subject == "twin":
        from torch_twins import images, twins

        module, model = twins()
        x = images(200)
        y = model.predict(x, verbose=0).argmax(axis=1)
        x_train, y_train, m = x, y, 4
    else:
        from idcgen.data import fit_to_model, load_inputs
        from idcgen.framework.keras_zoo import lenet5, train

        train_ds, test_ds = load_inputs("embedded-mnist:train"), load_inputs("embedded-mnist:test")
        x_train, y_train = fit_to_model(train_ds, (28, 28, 1)), train_ds.y
        x, y = fit_to_model(test_ds, (28, 28, 1)), test_ds.y
        model = lenet5()
        train(model, x_train, y_train, epochs=2, optimizer="adam", verbose=0)
        module, m = from_keras(model), 8
    export_program(module, folder / "twin.pt2")
    model.save(folder / "twin.keras")
    np.savez(folder / "seeds.npz", x=x, y=y)
    for name in ("twin.pt2", "twin.keras"):
        network = idcgen.Network(idcgen.load_model(folder / name))
        analysis = idcgen.analyze(network, x_train, y_train, m=m, random_state=0, progress=False)
        analysis.save(folder / f"analysis_{name.replace('.', '_')}")


def child(folder: Path, name: str, settings: str, budget: int, mutators: str) -> None:
    """One campaign in this fresh process: {"seconds", "execs", "threads"} on stdout."""
    policy = None  # the wait policy OpenMP starts with
    if settings == "torch-defaults":
        os.environ.pop("OMP_WAIT_POLICY", None)  # (the parent passes none either)
        import torch  # noqa: F401  (before idcgen: OpenMP starts with torch's defaults)

        import idcgen.framework.torch_load as torch_load

        torch_load.fit_threads = lambda: torch.get_num_threads()
        import idcgen.framework.torch_network as torch_network

        torch_network.fit_threads = torch_load.fit_threads
    if settings in ("one-thread", "two-threads"):  # idcgen's settings with a fixed intra-op thread count
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as idcgen sets it, torch being imported first
        import torch

        import idcgen.framework.torch_load as torch_load
        import idcgen.framework.torch_network as torch_network

        count = 1 if settings == "one-thread" else 2
        torch.set_num_threads(count)
        torch_load.fit_threads = torch_network.fit_threads = lambda: count  # not cut to the free CPUs
    import numpy as np

    import idcgen
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import default_mutators

    network = idcgen.Network(idcgen.load_model(folder / name))
    if name.endswith(".pt2") and settings != "torch-defaults":
        policy = os.environ.get("OMP_WAIT_POLICY")
    analysis = idcgen.Analysis.load(folder / f"analysis_{name.replace('.', '_')}", model=network)
    seeds = np.load(folder / "seeds.npz")
    chosen = MUTATORS if mutators == "six" else default_mutators(network)[0]  # the CLI's default for the model
    fuzzer = Fuzzer(analysis, mutators=chosen, random_state=0)
    fuzzer.run(seeds["x"][:8], seeds["y"][:8], budget=256, progress=False)  # warm-up: tracing, first calls
    start = time.perf_counter()
    campaign = fuzzer.run(seeds["x"], seeds["y"], budget=budget, progress=False)
    seconds = time.perf_counter() - start
    threads = None
    if name.endswith(".pt2"):
        import torch

        threads = torch.get_num_threads()
    print(json.dumps({"seconds": seconds, "execs": int(campaign.execs), "threads": threads, "wait_policy": policy}))


def measure(folder: Path, name: str, settings: str, budget: int, timeout: float, mutators: str) -> dict:
    command = [sys.executable, __file__, "--child", str(folder), name, settings, str(budget), mutators]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("OMP_WAIT_POLICY", None)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "timed_out": timeout}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{name} ({settings}) failed:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def start_hog(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_hog(hogs: list) -> None:
    for process in hogs:
        process.kill()
        process.wait()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=4096, help="execs per campaign")
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the loaded runs")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds before a run is given up")
    parser.add_argument(
        "--subject",
        choices=("twin", "lenet5"),
        default="twin",
        help="twin: the residual twins, six cheap mutators; lenet5: docs/usage.md's PyTorch LeNet-5, default mutators",
    )
    args = parser.parse_args()
    mutators = "six" if args.subject == "twin" else "default"
    torch_settings = ("idcgen", "torch-defaults", "one-thread", "two-threads")
    runs = [*(("twin.pt2", s) for s in torch_settings), ("twin.keras", "keras")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prepare(folder, args.subject)
        for load in ("alone", "hog"):
            hogs = start_hog(args.hogs) if load == "hog" else []
            try:
                for name, settings in runs:
                    row = measure(folder, name, settings, args.budget, args.timeout, mutators)
                    row.update(
                        bench="load",
                        model=name,
                        subject=args.subject,
                        settings=settings,
                        load=load,
                        hogs=len(hogs),
                        budget=args.budget,
                        cpus=os.cpu_count(),
                        loadavg=os.getloadavg()[0],
                    )
                    results[(settings, load)] = row
                    print(json.dumps(row), flush=True)
                    record(
                        "campaign seconds",
                        row.get("seconds"),
                        unit="s",
                        bench="bench_load",
                        **{k: v for k, v in row.items() if k not in ("seconds", "bench")},
                    )
            finally:
                stop_hog(hogs)
    print()
    for settings in (*torch_settings, "keras"):
        alone, hog = results[(settings, "alone")]["seconds"], results[(settings, "hog")]["seconds"]
        ratio = f"{hog / alone:.2f}x" if alone and hog else "n/a"
        print(
            f"{settings:>15}: alone {alone or float('nan'):.2f} s, beside {args.hogs} busy processes "
            f"{hog or float('nan'):.2f} s ({ratio})"
        )
    torch_hog, keras_hog = results[("idcgen", "hog")]["seconds"], results[("keras", "hog")]["seconds"]
    if torch_hog and keras_hog:
        print(f"under load, PyTorch (idcgen's settings) / Keras: {torch_hog / keras_hog:.2f}")
    before = results[("torch-defaults", "hog")]["seconds"]
    if torch_hog and before:
        print(f"under load, torch's defaults / idcgen's settings: {before / torch_hog:.2f}")


if __name__ == "__main__":
    main()

"""``idcgen fuzz --workers N [--ray ADDRESS]`` and its ``--resume``: the command-line session of a parallel
campaign (model, seeds and analysis on the driver; :func:`idcgen.distributed.parallel.fuzz` on Ray; then the
merged view's exports and report), beside :mod:`idcgen.session` for one process.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from ..analysis import Analysis
from ..clusters import parse_cluster_range
from ..convention import infer_image_shape, parse_image_shape
from ..data import fit_to_model, load_for_model
from ..errors import InputError, ParameterError
from ..export import export_campaign
from ..fuzz.campaign import Campaign, check_budget
from ..fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
from ..fuzz.oracle import make_oracle
from ..framework import Network, load_model, network_with_convention
from ..report import write_report
from ..session import OUTPUTS
from .parallel import PARALLEL_FILE, fuzz


def is_parallel(folder) -> bool:
    """Whether ``folder`` holds a parallel campaign (resumed with this module)."""
    return folder is not None and (Path(folder) / PARALLEL_FILE).is_file()


def _seeds(cfg: dict, network, convention, echo):
    ds, x = load_for_model(cfg["seeds"], network.input_shape, scale=cfg.get("scale", "auto"), limit=cfg.get("limit"),
                           value_range=convention.value_range, resize=cfg.get("resize"),
                           class_names=cfg.get("class_names"), n_classes=network.n_classes, labels=cfg.get("labels"),
                           crop=cfg.get("crop"), task=network.task)
    for note in ds.notes:
        echo(note if note.startswith("labels: ") else f"note: {note}")
    return ds, x


def parallel_campaign(*, models, seeds, budget, workers, ray=None, train=None, analysis=None, layer=None, m=None,
                      clusters=None, cluster_method=None, mutators=None, oracle=None, scheduler="prioritized",
                      batch_size=256, validity=True, alpha=0.02, beta=0.2, random_state=0, limit=None, out=None,
                      scale="auto", value_range=None, preprocess=None, image_shape=None, resize=None,
                      class_names=None, guide="idc", measure=None, rounding=True, labels=None, crop=None, task=None,
                      safe_mode=True, architectures=None, echo=print) -> dict | None:
    """A new parallel campaign: ``workers`` campaigns on Ray in ``out/worker-<i>``, merged in ``out/merged``."""
    check_budget(budget)
    if models is None or len(models) != 1 or architectures:
        raise ParameterError("--workers takes one --model (a .keras or full .h5 file): the other models of a "
                             "disagreement oracle and --architecture are for one process")
    if guide != "idc" or measure:
        raise ParameterError("--workers share IDC's combinations: --guide idc only, without --measure")
    if (train is None) == (analysis is None):
        raise InputError("--workers needs --analysis DIR (reuse) or --train DATA (analysed first on the workers)")
    mutators = [repr(mu) for mu in parse_mutators(mutators or DEFAULT_MUTATORS)]
    recorded = None if analysis is None else dataclasses.replace(Analysis.load(analysis).convention, image_shape=None)
    network = Network(load_model(models[0], safe_mode=safe_mode), task=task)
    network, convention = network_with_convention(network, value_range=value_range, preprocess=preprocess,
                                                  recorded=recorded)
    cfg = {"model": str(Path(models[0]).resolve()), "seeds": str(Path(seeds).resolve()) if Path(seeds).exists()
           else str(seeds), "scale": scale, "limit": limit, "resize": None if resize is None else str(resize),
           "class_names": class_names, "labels": labels, "crop": crop, "task_given": task,
           "train": None if train is None else (str(Path(train).resolve()) if Path(train).exists() else str(train))}
    seeds_ds, x_seeds = _seeds(cfg, network, convention, echo)
    image_shape = parse_image_shape(image_shape)
    if image_shape is None and len(network.input_shape) != 3:
        image_shape = infer_image_shape(network.input_shape, seeds_ds.x.shape[1:])
    x_train = y_train = None
    if analysis is not None:
        found, source = Analysis.load(analysis, model=network), f"loaded from {analysis}"
    else:
        from .workers import Workers
        train_ds, x_train = load_for_model(train, network.input_shape, scale=scale, value_range=convention.value_range,
                                           class_names=class_names, n_classes=network.n_classes, task=network.task)
        y_train = train_ds.y
        with Workers(network, ray=ray or "local", workers=workers, safe_mode=safe_mode, what="--workers") as pool:
            found = pool.analyze(x_train, y_train, layer=layer, m=8 if m is None else m,
                                 clusters=parse_cluster_range(clusters or "2-5"),
                                 cluster_method=cluster_method or "silhouette", random_state=random_state,
                                 data_summary=train_ds.summary())
        saved, _ = found.save_unique(OUTPUTS / "analyses" / found.default_name(Path(models[0]).stem))
        source = f"analysed on {train} ({len(x_train)} inputs) on {workers} Ray workers, saved to {saved}"
    echo(f"inputs: {convention.describe()}")
    echo(f"analysis: layer {found.layer}, m = {found.m}, {found.total} combinations ({source})")
    oracle = oracle or ("deviation" if network.task == "regression" else "misclassification")
    out = Path(out) if out else OUTPUTS / "campaigns" / f"{Path(models[0]).stem}_{time.strftime('%Y%m%d-%H%M%S')}"
    extra = dict(cfg, analysis_source=source, notes=[], other_models=[], architectures=[], measure_specs=[])
    echo(f"campaign: {out} ({workers} workers on Ray, {ray or 'local'}; each in {out}/worker-<i>, merged in {out}/merged)")
    return _run(network, found, x_seeds, seeds_ds.y, out, budget=budget, workers=workers, ray=ray,
                mutators=mutators, oracle=oracle, scheduler=scheduler, batch_size=batch_size,
                validity=dict(enabled=validity, alpha=alpha, beta=beta), random_state=random_state,
                value_range=convention.value_range, image_shape=image_shape, rounding=rounding, extra=extra,
                x_train=x_train, y_train=y_train, safe_mode=safe_mode, echo=echo)


def resume_parallel(folder, *, budget=None, ray=None, workers=None, safe_mode=True, echo=print) -> dict | None:
    """Resume every worker of a parallel campaign from its last commit, to ``budget`` execs in all."""
    folder = Path(folder)
    record = json.loads((folder / PARALLEL_FILE).read_text())
    if workers is not None and workers != record["workers"]:
        raise ParameterError(f"{folder} runs {record['workers']} workers; resume it with --workers "
                             f"{record['workers']} or without --workers")
    cfg = record["extra_config"]
    analysis = Analysis.load(folder / "worker-0" / "analysis")
    recorded = dataclasses.replace(analysis.convention, image_shape=None)
    network, convention = network_with_convention(Network(load_model(cfg["model"], safe_mode=safe_mode),
                                                          task=cfg.get("task_given")), recorded=recorded)
    analysis.bind(network)
    seeds_ds, x_seeds = _seeds(cfg, network, convention, echo)
    settings = record["settings"]
    budget = record["budget"] if budget is None else budget
    echo(f"resuming {folder}: {record['workers']} workers, {budget} execs in all")
    return _run(network, analysis, x_seeds, seeds_ds.y, folder, budget=budget, workers=record["workers"], ray=ray,
                mutators=settings["mutators"], oracle=settings["oracle"], scheduler=settings["scheduler"],
                batch_size=settings["batch_size"], validity=settings["validity"],
                random_state=settings["random_state"], value_range=settings["value_range"],
                image_shape=settings.get("image_shape"), rounding=settings["rounding"], extra=cfg,
                x_train=None, y_train=None, safe_mode=safe_mode, echo=echo)


def _run(network, analysis, x_seeds, y_seeds, out, *, budget, workers, ray, mutators, oracle, scheduler, batch_size,
         validity, random_state, value_range, image_shape, rounding, extra, x_train, y_train, safe_mode, echo):
    from tqdm.auto import tqdm
    with tqdm(total=budget, unit="exec", desc="fuzz", dynamic_ncols=True) as bar:
        def progress(status):
            states, covered = status
            bar.n = sum(s["execs"] for s in states.values())
            bar.set_postfix(IDC=f"{covered / analysis.total:.1%}", workers=len(states), refresh=False)
            bar.refresh()
        try:
            result = fuzz(network, analysis, x_seeds, y_seeds, budget=budget, out=out, workers=workers, ray=ray,
                          mutators=mutators, oracle=oracle, scheduler=scheduler, batch_size=batch_size,
                          validity=validity, random_state=random_state, value_range=value_range,
                          image_shape=image_shape, rounding=rounding, extra_config=extra, safe_mode=safe_mode,
                          on_progress=progress, echo=echo)
        except KeyboardInterrupt:
            return None
    merged = Campaign.load(Path(out) / "merged", network)
    if x_train is not None:
        x_train = fit_to_model(x_train, merged.corpus.input_shape)
    exports = export_campaign(merged, train_x=x_train, train_y=y_train, oracle=make_oracle(oracle))
    report = write_report(merged, notes=[f"merged view of {workers} parallel campaigns (worker-0 .. "
                                         f"worker-{workers - 1}), which exchanged the entries that reached new "
                                         "combinations"], exports=exports)
    per = "; ".join(f"worker {i}: {w['execs']} execs, IDC {w['idc']:.1%}, {w['imports']} imported"
                    for i, w in enumerate(result["workers"]))
    seeds_idc = merged.stats_rows()[0]["idc"]
    echo(f"IDC {seeds_idc:.1%} (seeds) -> {merged.tracker.score:.1%} (merged, {len(merged.corpus)} inputs); "
         f"{merged.n_findings} findings; {result['execs']} execs in {result['elapsed_seconds']:.1f} s ({per})")
    for r in result["restarts"]:
        echo(f"note: worker {r['worker']} was restarted and resumed at step {r['resumed_at']}")
    echo(f"report: {report} (and report.html); exports: {merged.folder / 'exports'}")
    return {"state": merged.state(), "exports": exports, "seeds_idc": seeds_idc, "report": str(report),
            "workers": result["workers"], "restarts": result["restarts"]}

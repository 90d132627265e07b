"""A whole fuzz session as the CLI runs it: models, seeds, analysis, loop, exports, report.

The analysis comes from ``--analysis``, or from ``--train`` (analysed first), or from a saved analysis
of the same model, or, as a last resort, from the seeds themselves (said plainly in the output and the
report).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from .analysis import Analysis, analyze, find_analysis
from .clusters import check_cluster_method, parse_cluster_range
from .convention import InputConvention, infer_image_shape, parse_image_shape
from .data import fit_to_model, load_for_model, parse_class_names
from .checks import check_int
from .errors import AnalysisMismatchError, InputError, ModelError, ParameterError
from .export import export_campaign
from .framework import Network, load_model, network_with_convention
from .report import write_report
from .fuzz.campaign import check_budget
from .fuzz.fuzzer import Fuzzer
from .fuzz.store import read_meta
from .fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
from .fuzz.validity import Validity

OUTPUTS = Path("outputs")


def _load(spec, network, scale, limit=None, *, convention=None, resize=None, class_names=None, echo=print,
          labels=None, crop=None):
    """(Dataset, x) for the model; the label mapping and conversions are echoed once."""
    value_range = (0.0, 1.0) if convention is None else convention.value_range
    ds, x = load_for_model(spec, network.input_shape, scale=scale, limit=limit, value_range=value_range,
                           resize=resize, class_names=class_names, n_classes=network.n_classes, labels=labels,
                           crop=crop, task=network.task)
    for note in ds.notes:
        echo(note if note.startswith("labels: ") else f"note: {note}")
    return ds, x


def _networks(models, architectures, safe_mode, task=None) -> list:
    """One Network per model file; ``architectures`` (JSON files for weights-only files) pair with ``models``
    in order, one per model, ``-`` for a model file that holds its own architecture."""
    architectures = [None if str(a) == "-" else a for a in architectures or []]
    if architectures and len(architectures) != len(models):
        raise InputError(f"{len(architectures)} --architecture files for {len(models)} models: give one per --model "
                         "(- for a model file that holds its architecture)")
    pairs = zip(models, architectures or [None] * len(models))
    return [Network(load_model(p, safe_mode=safe_mode, architecture=a), task=task) for p, a in pairs]


def _folder_only(spec, **options) -> dict:
    """--labels and --crop for a folder of images (the frames); other training data is taken as it is."""
    return options if Path(spec).is_dir() else {}


def _absolute(path) -> str:
    """A path as a campaign records it: absolute when it names a file or folder, so that a resume from
    another directory finds it; a dataset name such as ``embedded-mnist:train`` as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else str(path)


def _folders(paths) -> str:
    """Folders as a person reads them in a message: './' rather than '.'."""
    return ", ".join(f"{p}/" for p in paths)


def new_campaign(*, models, seeds, budget, train=None, analysis=None, layer=None, m=None, clusters=None, cluster_method=None,
                 mutators=None, oracle=None, scheduler="prioritized", batch_size=256,
                 validity=True, alpha=0.02, beta=0.2, random_state=0, limit=None, out=None, scale="auto",
                 value_range=None, preprocess=None, image_shape=None, resize=None, class_names=None,
                 guide="idc", measure=None, rounding=True, labels=None, crop=None, task=None,
                 safe_mode=True, architectures=None, echo=print, progress=True) -> dict | None:
    check_budget(budget)  # before any model is loaded
    specs = measure_specs(guide, measure)
    if train is not None and analysis is not None:
        raise InputError("give --train (analyse first) or --analysis (reuse), not both")
    mutator_list = parse_mutators(mutators or DEFAULT_MUTATORS)
    if m is not None:
        check_int("m", m, 1)
    wanted_m, m = m, 8 if m is None else m  # a saved analysis is looked up with the m asked for, any m if none
    wanted_clusters, clusters = clusters, "2-5" if clusters is None else clusters
    wanted_method, cluster_method = cluster_method, check_cluster_method(cluster_method or "silhouette")  # likewise
    image_shape = parse_image_shape(image_shape)
    if analysis is not None:  # a saved analysis is used as it is: refuse settings it was not made with
        check_analysis_options(Analysis.load(analysis), analysis, layer=layer, m=wanted_m, clusters=wanted_clusters,
                               cluster_method=wanted_method)
    recorded = None if analysis is None else dataclasses.replace(Analysis.load(analysis).convention, image_shape=None)
    networks = _networks(models, architectures, safe_mode, task)
    # the default oracle: misclassification, or for a regression model deviation (DeepTest's, 0.2)
    oracle = oracle or ("deviation" if networks[0].task == "regression" else "misclassification")
    network, convention = network_with_convention(networks[0], value_range=value_range, preprocess=preprocess,
                                                  recorded=recorded)
    networks = [network] + [network_with_convention(n, recorded=convention)[0] for n in networks[1:]]
    seeds_ds, x_seeds = _load(seeds, network, scale, limit, convention=convention, resize=resize,
                              class_names=class_names, echo=echo, labels=labels, crop=crop)
    if image_shape is None and len(network.input_shape) != 3:  # flat or channel-less: fuzzed as images
        image_shape = infer_image_shape(network.input_shape, seeds_ds.x.shape[1:])
    notes, train_ds, x_train = [], None, None
    if analysis is not None:
        found = Analysis.load(analysis, model=network)
        source = f"loaded from {analysis}"
    elif train is not None:
        train_ds, x_train = _load(train, network, scale, convention=convention, resize=resize,
                                  class_names=class_names, echo=echo, **_folder_only(train, labels=labels, crop=crop))
        found = analyze(network, x_train, train_ds.y, layer=layer, m=m, clusters=parse_cluster_range(clusters),
                        cluster_method=cluster_method, random_state=random_state, data_summary=train_ds.summary(),
                        progress=progress)
        wanted = OUTPUTS / "analyses" / found.default_name(Path(models[0]).stem)
        saved, written = found.save_unique(wanted)  # never over another analysis
        source = f"analysed on {train} ({len(x_train)} inputs), " + (
            f"the same as the one saved in {saved}" if not written else f"saved to {saved}" if saved == wanted
            else f"saved to {saved} ({wanted} holds another analysis)")
    else:
        places = [OUTPUTS / "analyses", Path(models[0]).parent, Path(models[0]).parent / "analysis"]
        found, where, searched = find_analysis(network, places, layer=layer, m=wanted_m, cluster_method=wanted_method,
                                               clusters=None if wanted_clusters is None else parse_cluster_range(clusters))
        if found is not None:
            source = f"the saved analysis of this model in {where}/, the newest found in {_folders(searched)}"
        else:
            found = analyze(network, x_seeds, seeds_ds.y, layer=layer, m=m, clusters=parse_cluster_range(clusters),
                            cluster_method=cluster_method, random_state=random_state, data_summary=seeds_ds.summary(), progress=progress)
            source = "analysed on the seeds themselves"
            notes.append(f"no --train or --analysis given and no saved analysis of this model in "
                         f"{_folders(searched)}; the analysis was made on the SEEDS, so IDC is measured against "
                         "the seeds' own clusters, not the training data's. Pass --train for the paper's setting.")
    echo(f"inputs: {convention.describe()}")
    for note in notes:
        echo(f"note: {note}")
    echo(f"analysis: layer {found.layer}, m = {found.m}, {found.total} combinations ({source})")

    criteria = fit_criteria(specs, network, x_seeds if x_train is None else x_train, echo,
                            "the training inputs" if x_train is not None else "the SEEDS (no --train given)")
    fuzzer = Fuzzer(found, mutators=mutator_list, oracle=oracle, others=networks[1:], scheduler=scheduler,
                    validity=Validity(alpha=alpha, beta=beta, enabled=validity), batch_size=batch_size,
                    random_state=random_state, value_range=convention.value_range, image_shape=image_shape,
                    guide=guide, measure=criteria, rounding=rounding)
    echo(fuzzer.validity.describe(fuzzer.mutators))
    echo("mutators: " + ", ".join(repr(mu) for mu in fuzzer.mutators))
    out = Path(out) if out else OUTPUTS / "campaigns" / f"{Path(models[0]).stem}_{time.strftime('%Y%m%d-%H%M%S')}"
    extra = {"model": _absolute(models[0]), "other_models": [_absolute(p) for p in models[1:]],
             "seeds": _absolute(seeds), "train": None if train is None else _absolute(train), "analysis_source": source, "notes": notes,
             "scale": scale, "resize": None if resize is None else str(resize),
             **({"labels": _absolute(labels)} if labels else {}), **({"crop": str(crop)} if crop else {}),
             **({"task_given": task} if task else {}),
             "class_names": None if class_names is None else list(parse_class_names(class_names)),
             "architectures": [str(a) if str(a) == "-" else _absolute(a) for a in architectures or []], "measure_specs": specs}
    campaign = fuzzer.start(x_seeds, seeds_ds.y, out, budget=budget, extra_config=extra)
    echo(f"campaign: {out}; seeds reach IDC {campaign.tracker.score:.1%} ({campaign.tracker.covered} of "
         f"{campaign.tracker.total})")
    return _run_and_finish(fuzzer, campaign, x_train, None if train_ds is None else train_ds.y, notes, echo, progress)


def resume_campaign(folder, *, models=None, budget=None, safe_mode=True, architectures=None, options=None,
                    echo=print, progress=True) -> dict | None:
    """Continue a campaign with its own settings; ``options`` (by parameter name) are other settings
    given with the resume: refused where they differ from the campaign's."""
    folder = Path(folder)
    cfg = read_meta(folder)["config"]   # checked (the state's copy if campaign.json is lost, a whole analysis)
    check_resume_options(folder, cfg, options or {})
    paths = models or [cfg["model"], *cfg.get("other_models", [])]
    try:
        networks = _networks(paths, architectures or (None if models else cfg.get("architectures")), safe_mode,
                             cfg.get("task_given"))
    except ModelError as exc:
        if models:
            raise
        relative = "" if Path(cfg["model"]).is_absolute() else ", relative to the directory it was started in"
        raise ModelError(f"{exc} (the model campaign {folder} recorded{relative}); give the 'model' parameter "
                         "to override it") from None
    recorded = InputConvention.from_dict(cfg.get("input_convention"))
    recorded = dataclasses.replace(recorded, image_shape=None, value_range=tuple(cfg["value_range"]))
    networks = [network_with_convention(n, recorded=recorded)[0] for n in networks]
    try:
        found = Analysis.load(folder / "analysis", model=networks[0])
    except AnalysisMismatchError as exc:
        raise AnalysisMismatchError(f"cannot resume {folder}: {exc}") from None
    x_train = y_train = None
    if cfg.get("train"):
        train_ds, x_train = _load(cfg["train"], networks[0], cfg.get("scale", "auto"), convention=recorded,
                                  class_names=cfg.get("class_names"), echo=echo,
                                  resize=cfg.get("resize"), **_folder_only(cfg["train"], labels=cfg.get("labels"),
                                                                           crop=cfg.get("crop")))
        y_train = train_ds.y
    criteria = []
    if cfg.get("measure_specs"):   # fitted again on the data they were fitted on (deterministic)
        x_fit = x_train if x_train is not None else _load(cfg["seeds"], networks[0], cfg.get("scale", "auto"),
                                                          convention=recorded, class_names=cfg.get("class_names"),
                                                          echo=echo, resize=cfg.get("resize"),
                                                          **_folder_only(cfg["seeds"], crop=cfg.get("crop")))[1]
        criteria = fit_criteria(cfg["measure_specs"], networks[0], x_fit, echo,
                                f"{cfg['train'] or cfg['seeds']} again, as when the campaign started")
    v = cfg["validity"]
    fuzzer = Fuzzer(found, mutators=parse_mutators(",".join(cfg["mutators"])), oracle=cfg["oracle"],
                    guide=cfg.get("guide", "idc"), measure=criteria,
                    others=networks[1:], scheduler=cfg["scheduler"],
                    validity=Validity(alpha=v["alpha"], beta=v["beta"], enabled=v["enabled"],
                                      value_range=tuple(cfg["value_range"])),
                    batch_size=cfg["batch_size"], random_state=cfg["random_state"], value_range=cfg["value_range"],
                    image_shape=tuple(cfg["input_shape"]))
    campaign = fuzzer.resume(folder)
    if budget is not None:
        try:
            campaign.set_budget(budget)
        except BaseException:
            campaign.close()
            raise
    echo(f"resuming {folder} at step {campaign.step}: {campaign.execs} of {campaign.budget} execs done, "
         f"IDC {campaign.tracker.score:.1%}")
    for note in campaign.store.notes:   # damage found on reading, and what was rebuilt
        echo(f"note: {note}")
    echo(fuzzer.validity.describe(fuzzer.mutators))
    return _run_and_finish(fuzzer, campaign, x_train, y_train, cfg.get("notes", []), echo, progress)


def measure_specs(guide: str, measure: str | None) -> list[str]:
    """The criterion specs to fit and measure besides IDC: ``measure`` (comma-separated specs such as
    'nc,kmnc:k=10'), plus the guiding criterion when it is not among them."""
    from .criteria import parse_criteria
    from .fuzz.guidance import GUIDES
    if guide not in GUIDES:
        raise ParameterError(f"The 'guide' parameter must be one of {', '.join(GUIDES)}. Got {guide!r} instead.")
    specs = [s for s in parse_criteria(measure) if s.split(":")[0] != "idc"] if measure else []
    if guide not in ("idc", "none") and guide not in (s.split(":")[0] for s in specs):
        specs.insert(0, guide)
    return specs


def fit_criteria(specs: list[str], network, x, echo, data: str) -> list:
    """Each criterion spec fitted on ``x`` (one batched pass each), said once."""
    from .criteria import make_criterion
    if not specs:
        return []
    echo(f"criteria measured besides IDC: {', '.join(specs)} (fitted on {data}, {len(x)} inputs)")
    return [make_criterion(spec).fit(network, x) for spec in specs]


def _run_and_finish(fuzzer, campaign, x_train, y_train, notes, echo, progress) -> dict | None:
    try:
        fuzzer.run(campaign, progress=progress)
    except KeyboardInterrupt:
        echo(f"interrupted at step {campaign.step}; continue with: idcgen fuzz --resume {campaign.folder}")
        return None
    if x_train is not None:  # the retraining data in the corpus' image shape (flat or channel-less models)
        x_train = fit_to_model(x_train, fuzzer.network.input_shape)
    campaign.open()   # the writer lock again: a second session must not export into the same folder at once
    try:
        exports = export_campaign(campaign, train_x=x_train, train_y=y_train, oracle=fuzzer.oracle)
        report = write_report(campaign, notes=notes, exports=exports)
    finally:
        campaign.close()
    state = campaign.state()
    seeds_idc = campaign.stats_rows()[0]["idc"]
    echo(f"IDC {seeds_idc:.1%} (seeds) -> {campaign.tracker.score:.1%} (grown set, {len(campaign.corpus)} inputs); "
         f"{campaign.n_findings} findings ({exports['findings']['surviving_uint8']} survive uint8 rounding); "
         f"{state['execs']} execs in {state['elapsed_seconds']:.1f} s")
    echo(f"report: {report} (and report.html); exports: {campaign.folder / 'exports'}")
    return {"state": state, "exports": exports, "seeds_idc": seeds_idc, "report": str(report)}


# ---- options that conflict with saved work ---------------------------------------------------------
# The library names parameters; the CLI turns "name=value" and "the 'name' parameter" into its flags.

def _shown(value) -> str:
    """A setting's value as a message shows it: lists as the comma list an option takes."""
    if isinstance(value, (list, tuple)):
        value = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return repr(value) if isinstance(value, str) else str(value)


def _refuse_changes(what: str, conflicts: list, advice: str) -> None:
    """One line naming each saved setting beside the value asked for: ``conflicts`` holds (name, saved,
    asked); a saved None reads "without ...", True a flag."""
    def saved(name, value):
        if value is None or value is False:
            return f"without the '{name}' parameter"
        return f"{name}=True" if value is True else f"{name}={_shown(value)}"
    shown = ", ".join(saved(n, s) + ("" if a is True else f" (not {_shown(a)})") for n, s, a in conflicts)
    raise ParameterError(f"{what} {shown}; {advice}")


def _same_path(a, b) -> bool:
    return a is not None and b is not None and (str(a) == str(b) or Path(a).resolve() == Path(b).resolve())


def check_analysis_options(analysis, where, *, layer=None, m=None, clusters=None, cluster_method=None) -> None:
    """Refuse a layer, m, cluster range or cluster method given with a saved analysis made otherwise:
    the saved analysis is used as it is, so a different value would be silently ignored."""
    saved = {"layer": analysis.layer, "m": analysis.m, "clusters": analysis.config.get("clusters"),
             "cluster_method": analysis.config.get("cluster_method", "silhouette")}
    asked = {"layer": layer, "m": m, "clusters": None if clusters is None else list(parse_cluster_range(clusters)),
             "cluster_method": cluster_method}
    conflicts = [(k, saved[k], v) for k, v in asked.items() if v is not None and v != saved[k]]
    if conflicts:
        _refuse_changes(f"analysis={str(where)!r} was made with", conflicts,
                        "leave these out to use it, or analyse again with the 'train' parameter")


def check_resume_options(folder: Path, cfg: dict, options: dict) -> None:
    """Refuse options given with a resume that differ from the campaign's own (it keeps the settings it
    was made with); ``options`` holds only what was given, by parameter name."""
    from .convention import parse_preprocess, parse_value_range
    from .data import parse_resize
    from .fuzz.oracle import make_oracle
    from .fuzz.scheduler import make_scheduler
    try:
        made = json.loads((folder / "analysis" / "analysis.json").read_text()).get("config", {})
    except (OSError, ValueError):
        made = {}
    convention = cfg.get("input_convention") or {}
    validity = cfg.get("validity") or {}
    # parameter -> (the campaign's value, the given value in the same form)
    forms = {
        "seeds": lambda v: cfg.get("seeds"), "train": lambda v: cfg.get("train"),
        "layer": lambda v: cfg.get("layer"), "m": lambda v: cfg.get("m"),
        "clusters": lambda v: made.get("clusters"), "cluster_method": lambda v: made.get("cluster_method"),
        "mutators": lambda v: cfg.get("mutators"), "oracle": lambda v: cfg.get("oracle"),
        "scheduler": lambda v: cfg.get("scheduler"), "batch_size": lambda v: cfg.get("batch_size"),
        "random_state": lambda v: cfg.get("random_state"), "no_validity": lambda v: not validity.get("enabled", True),
        "alpha": lambda v: validity.get("alpha"), "beta": lambda v: validity.get("beta"),
        "scale": lambda v: cfg.get("scale", "auto"), "resize": lambda v: cfg.get("resize"),
        "value_range": lambda v: cfg.get("value_range"), "preprocess": lambda v: convention.get("preprocess"),
        "image_shape": lambda v: cfg.get("input_shape"), "class_names": lambda v: cfg.get("class_names"),
        "guide": lambda v: cfg.get("guide", "idc"), "measure": lambda v: cfg.get("measure_specs", []),
        "no_round": lambda v: not cfg.get("rounding", False),
        "labels": lambda v: cfg.get("labels"), "crop": lambda v: cfg.get("crop"), "task": lambda v: cfg.get("task_given"),
    }
    normal = {
        "clusters": lambda v: list(parse_cluster_range(v)),
        "mutators": lambda v: [repr(mu) for mu in parse_mutators(v)],
        "oracle": lambda v: str(make_oracle(v, others=[None] * len(cfg.get("other_models", [])))),
        "scheduler": lambda v: make_scheduler(v).name,
        "resize": lambda v: "x".join(map(str, parse_resize(v))),
        "value_range": lambda v: list(parse_value_range(v)),
        "preprocess": lambda v: None if parse_preprocess(v) is None else parse_preprocess(v).spec,
        "image_shape": lambda v: list(parse_image_shape(v)),
        "class_names": lambda v: list(parse_class_names(v)),
        "labels": _absolute, "crop": lambda v: str(v),
        "measure": lambda v: measure_specs(cfg.get("guide", "idc"), v),
    }
    conflicts = []
    for name, value in options.items():
        if name == "out":
            if not _same_path(value, folder):
                raise ParameterError(f"a resumed campaign stays in its folder {folder}: drop the 'out' parameter")
            continue
        if name in ("limit", "analysis"):
            raise ParameterError(f"a resumed campaign keeps its seeds and its analysis ({folder / 'analysis'}): "
                                 f"drop the '{name}' parameter")
        if name not in forms:
            raise ParameterError(f"a resumed campaign keeps the settings it was made with: drop the '{name}' parameter")
        saved = forms[name](value)
        try:
            asked = normal[name](value) if name in normal else value
        except Exception:  # noqa: BLE001 (a value the option would refuse anyway: shown as given)
            asked = value
        if name == "resize" and saved is not None:
            saved = "x".join(map(str, parse_resize(saved)))
        same = _same_path(saved, asked) if name in ("seeds", "train") else asked == saved
        if isinstance(saved, float) or isinstance(asked, float):
            same = saved is not None and abs(float(asked) - float(saved)) <= 1e-12
        if not same:
            conflicts.append((name, saved, asked))
    if conflicts:
        _refuse_changes(f"campaign {folder} was made with", conflicts,
                        "a resumed campaign keeps its settings: leave these out, or start a new campaign")

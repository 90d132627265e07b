"""What the commands share: models, inputs and analyses loaded one way, and whole fuzz sessions.

``analyze``, ``coverage``, ``inspect``, ``affinity``, ``harden`` and ``fuzz`` load a model with its input
convention (:func:`open_model`) and their inputs (:func:`load_inputs`: resize, crop, labels and class names
for every input set alike). A fuzz session (:func:`new_campaign`, :func:`resume_campaign`) runs in this
process or, with ``workers``, as parallel campaigns on Ray: the two differ only in the runner
(:class:`LocalRunner`, :class:`ParallelRunner`), never in how models, seeds, training data and the
analysis are found.

The analysis comes from ``analysis`` (reuse), or from ``train`` (analysed first), or from a saved
analysis of the same model, or, as a last resort, from the seeds themselves (said plainly in the output
and the report).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import time
from pathlib import Path

from .analysis import Analysis, analyze, find_analysis
from .checks import check_int
from .clusters import check_cluster_method, parse_cluster_range
from .convention import infer_image_shape, parse_image_shape
from .data import check_source, fit_to_model, load_for_model, parse_class_names
from .data import load_inputs as load_inputs_of
from .errors import AnalysisMismatchError, InputError, InputShapeError, ModelError, ParameterError
from .distributed.parallel import PARALLEL_FILE, ParallelRecord
from .export import export_campaign
from .framework import Network, is_factory, load_model, network_with_convention
from .report import write_report
from .fuzz.campaign import Campaign, check_budget
from .fuzz.fuzzer import Fuzzer
from .fuzz.mutators import DEFAULT_MUTATORS, check_tasks, default_mutators, parse_mutators
from .fuzz.oracle import make_oracle
from .fuzz.settings import CampaignSettings, Sources
from .fuzz.store import read_meta
from .fuzz.validity import Validity

OUTPUTS = Path("outputs")


# ---- models and inputs, for every command ---------------------------------------------------------
def load_networks(models, *, architectures=None, safe_mode: bool = True, task=None, images=None) -> list:
    """One Network per model file; ``architectures`` (JSON files for weights-only files) pair with ``models``
    in order, one per model, ``-`` for a model file that holds its own architecture; a file that records no
    input shape (a TorchScript file) takes the shape of the inputs ``images`` (a source spec) where given."""
    architectures = [None if str(a) == "-" else a for a in architectures or []]
    if architectures and len(architectures) != len(models):
        raise InputError(f"{len(architectures)} --architecture files for {len(models)} models: give one per --model "
                         "(- for a model file that holds its architecture)")
    for path in [*models, *(a for a in architectures if a is not None)]:   # all, before the framework loads one
        if not Path(path).exists() and not is_factory(path):   # a PyTorch factory names code, not a file
            raise ModelError(f"{'architecture' if path not in models else 'model'} file not found: {path}")
    pairs = zip(models, architectures or [None] * len(models))
    return [Network(_load_model(p, a, safe_mode, images), task=task) for p, a in pairs]


def _load_model(path, architecture, safe_mode: bool, images):
    try:
        return load_model(path, safe_mode=safe_mode, architecture=architecture)
    except InputShapeError:
        if images is None:
            raise
        shape = load_inputs_of(images, limit=1).x.shape[1:]   # the images the command is given
        return load_model(path, safe_mode=safe_mode, architecture=architecture,
                          input_shape=tuple(shape) if len(shape) == 3 else (*shape, 1))


def open_model(model, *, safe_mode: bool = True, architecture=None, task=None, value_range=None, preprocess=None,
               analysis=None, images=None):
    """(Network measured in image space, its input convention, the Analysis or None) for a command: the
    model file loaded, the saved ``analysis`` (a folder) read, its recorded convention applied (an explicit
    ``value_range``/``preprocess`` that contradicts it is refused) and the analysis bound to the model."""
    found = None if analysis is None else Analysis.load(analysis)
    recorded = None if found is None else dataclasses.replace(found.convention, image_shape=None)
    network = load_networks([model], architectures=None if architecture is None else [architecture],
                            safe_mode=safe_mode, task=task, images=images)[0]
    network, convention = network_with_convention(network, value_range=value_range, preprocess=preprocess,
                                                  recorded=recorded)
    if found is not None:
        found.bind(network)
    return network, convention, found


def load_inputs(spec, network, convention=None, *, scale="auto", limit=None, resize=None, crop=None, labels=None,
                class_names=None, echo=print):
    """(Dataset, x) for the model, in its convention's value range; the label mapping and conversions are
    echoed once."""
    value_range = (0.0, 1.0) if convention is None else convention.value_range
    ds, x = load_for_model(spec, network.input_shape, scale=scale, limit=limit, value_range=value_range,
                           resize=resize, class_names=class_names, n_classes=network.n_classes, labels=labels,
                           crop=crop, task=network.task)
    for note in ds.notes:
        echo(note if note.startswith("labels: ") else f"note: {note}")
    return ds, x


def save_analysis(analysis, model, out=None, *, force: bool = False) -> tuple[Path, str]:
    """Save ``analysis`` in ``out`` (replacing one there only with ``force``), or by default under
    outputs/analyses/ with a name that tells analyses apart, never over another one; returns the folder and
    what happened, as a line says it ("saved to ...", "already in ..., unchanged")."""
    if out is not None:
        folder = analysis.save(out, overwrite=force)
        return folder, f"saved to {folder}"
    wanted = OUTPUTS / "analyses" / analysis.default_name(Path(model).stem)
    folder, written = analysis.save_unique(wanted)
    return folder, (f"already in {folder}, unchanged" if not written else f"saved to {folder}" if folder == wanted
                    else f"saved to {folder} ({wanted} holds another analysis)")


def measure_coverage(network, x, criteria: dict, *, analysis=None, x_train=None, y_train=None, pool=None):
    """(results, notes, missing) of an input set: IDC (with ``analysis``; on Ray workers with ``pool``) and each
    criterion of ``criteria`` (spec -> unfitted criterion), fitted on ``x_train``. A criterion that cannot be
    computed here (LSC's densities on a layer wider than the training inputs are many, DSC without two classes)
    does not take the others with it: ``missing`` says why, one line per criterion."""
    import numpy as np
    from .errors import IdcgenError
    results, notes, missing = {}, {}, {}
    if analysis is not None:
        results["idc"] = analysis.coverage(x) if pool is None else pool.coverage(analysis, x)
    for spec, criterion in criteria.items():
        try:
            fitted = criterion.fit(network, x_train if x_train is not None else x[:1],
                                   y_train if x_train is not None else None)
            results[spec] = fitted.coverage(network, x)
        except (IdcgenError, ValueError, np.linalg.LinAlgError) as exc:
            missing[spec] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            continue
        if getattr(criterion, "notes_", None):  # e.g. LSC classes without a density: their inputs get no score
            notes[spec] = list(criterion.notes_)
    return results, notes, missing


def default_oracle(network) -> str:
    """Misclassification, or for a regression model deviation (DeepTest's, 0.2)."""
    return "deviation" if network.task == "regression" else "misclassification"


def _absolute(path) -> str:
    """A path as a campaign records it: absolute when it names a file or folder, so that a resume from
    another directory finds it; a dataset name such as ``embedded-mnist:train`` as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else str(path)


def _folders(paths) -> str:
    """Folders as a person reads them in a message: './' rather than '.'."""
    return ", ".join(f"{p}/" for p in paths)


def _training_inputs(spec, network, convention, sources: Sources, echo):
    """The training data of a campaign, loaded as its seeds are (labels and crop apply to a folder of frames;
    other training data is taken as it is)."""
    options = sources.load_options()
    if not Path(spec).is_dir():
        options.update(labels=None, crop=None)
    return load_inputs(spec, network, convention, echo=echo, **options)


# ---- fuzz sessions ----------------------------------------------------------------------------------
def new_campaign(*, models, seeds, budget, train=None, analysis=None, layer=None, m=None, clusters=None,
                 cluster_method=None, mutators=None, oracle=None, scheduler="prioritized", batch_size=256,
                 validity=True, alpha=0.02, beta=0.2, random_state=0, limit=None, out=None, scale="auto",
                 value_range=None, preprocess=None, image_shape=None, resize=None, class_names=None,
                 guide="idc", measure=None, rounding=True, labels=None, crop=None, task=None,
                 safe_mode=True, architectures=None, workers=None, ray=None, echo=print,
                 progress=True) -> dict | None:
    """A new campaign as the command line runs it: models, seeds and analysis found, the loop run (in this
    process, or ``workers`` campaigns on Ray), then exports and report. None if interrupted."""
    check_budget(budget)   # every option is checked before any model is loaded
    if not validity and (alpha, beta) != (0.02, 0.2):   # the bounds would be ignored silently
        which = "'alpha' parameter sets a validity bound" if alpha != 0.02 else "'beta' parameter sets a validity bound"
        raise ParameterError(f"the {which}, which no_validity=True turns off: drop one of them")
    specs = measure_specs(guide, measure)
    if train is not None and analysis is not None:
        raise InputError("give --train (analyse first) or --analysis (reuse), not both")
    mutator_list = parse_mutators(mutators or DEFAULT_MUTATORS)
    for spec in (seeds, train):   # before the framework is imported and the models loaded
        if spec is not None:
            check_source(spec)
    runner = LocalRunner() if workers is None else ParallelRunner(workers, ray, safe_mode)
    runner.check(models=models, architectures=architectures, guide=guide, specs=specs)
    if m is not None:
        check_int("m", m, 1)
    wanted_m, m = m, 8 if m is None else m  # a saved analysis is looked up with the m asked for, any m if none
    wanted_clusters, clusters = clusters, "2-5" if clusters is None else clusters
    wanted_method, cluster_method = cluster_method, check_cluster_method(cluster_method or "silhouette")  # likewise
    ks = parse_cluster_range(clusters)
    image_shape = parse_image_shape(image_shape)
    if analysis is not None:  # a saved analysis is used as it is: refuse settings it was not made with
        check_analysis_options(Analysis.load(analysis), analysis, layer=layer, m=wanted_m, clusters=wanted_clusters,
                               cluster_method=wanted_method)
    recorded = None if analysis is None else dataclasses.replace(Analysis.load(analysis).convention, image_shape=None)
    networks = load_networks(models, architectures=architectures, safe_mode=safe_mode, task=task, images=seeds)
    check_tasks(mutator_list, networks[0].task)   # before the analysis and the campaign, not 50 failed steps in
    oracle = oracle or default_oracle(networks[0])
    network, convention = network_with_convention(networks[0], value_range=value_range, preprocess=preprocess,
                                                  recorded=recorded)
    networks = [network] + [network_with_convention(n, recorded=convention)[0] for n in networks[1:]]
    if mutators is None:   # the default set less what cannot run on this model, each said once
        mutator_list, dropped = default_mutators(network)
        for note in dropped:
            echo(f"note: {note}")
    sources = Sources(model=_absolute(models[0]), other_models=tuple(_absolute(p) for p in models[1:]),
                      architectures=tuple(str(a) if str(a) == "-" else _absolute(a) for a in architectures or []),
                      seeds=_absolute(seeds), train=None if train is None else _absolute(train), limit=limit,
                      scale=scale, resize=None if resize is None else str(resize),
                      crop=None if crop is None else str(crop), labels=None if labels is None else _absolute(labels),
                      class_names=None if class_names is None else tuple(parse_class_names(class_names)),
                      task_given=task)
    seeds_ds, x_seeds = load_inputs(seeds, network, convention, limit=limit, echo=echo, **sources.load_options())
    if image_shape is None and len(network.input_shape) != 3:  # flat or channel-less: fuzzed as images
        image_shape = infer_image_shape(network.input_shape, seeds_ds.x.shape[1:])
    analyse = dict(layer=layer, m=m, clusters=ks, cluster_method=cluster_method, random_state=random_state,
                   progress=progress)
    lookup = dict(layer=layer, m=wanted_m, cluster_method=wanted_method, clusters=None if wanted_clusters is None else ks)
    found, source, notes, x_train, y_train = _campaign_analysis(runner, network, convention, sources, models[0],
                                                                analysis, train, (seeds_ds, x_seeds), analyse, lookup,
                                                                echo)
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
    settings = fuzzer.settings(budget, sources=dataclasses.replace(sources, analysis_source=source, notes=tuple(notes)),
                               measure_specs=specs)
    out = Path(out) if out else OUTPUTS / "campaigns" / f"{Path(models[0]).stem}_{time.strftime('%Y%m%d-%H%M%S')}"
    return runner.start(fuzzer, settings, x_seeds, seeds_ds.y, out, x_train=x_train, y_train=y_train, echo=echo,
                        progress=progress)


def _campaign_analysis(runner, network, convention, sources: Sources, model, analysis, train, seeds, analyse: dict,
                       lookup: dict, echo):
    """(analysis, where it came from, notes, x_train, y_train) of a new campaign: the saved ``analysis`` folder;
    else an analysis of the training data (by ``runner``, saved); else a saved analysis of this model; else,
    said plainly, one of the seeds themselves."""
    if analysis is not None:
        return Analysis.load(analysis, model=network), f"loaded from {analysis}", [], None, None
    if train is not None:
        train_ds, x_train = _training_inputs(train, network, convention, sources, echo)
        found = runner.analyze(network, x_train, train_ds.y, data_summary=train_ds.summary(), **analyse)
        _, where = save_analysis(found, model)
        return found, f"analysed on {train} ({len(x_train)} inputs{runner.where}), {where}", [], x_train, train_ds.y
    places = [OUTPUTS / "analyses", Path(model).parent, Path(model).parent / "analysis"]
    found, where, searched = find_analysis(network, places, **lookup)
    if found is not None:
        return found, f"the saved analysis of this model in {where}/, the newest found in {_folders(searched)}", [], \
            None, None
    seeds_ds, x_seeds = seeds
    found = runner.analyze(network, x_seeds, seeds_ds.y, data_summary=seeds_ds.summary(), **analyse)
    note = (f"no --train or --analysis given and no saved analysis of this model in {_folders(searched)}; the "
            "analysis was made on the SEEDS, so IDC is measured against the seeds' own clusters, not the training "
            "data's. Pass --train for the paper's setting.")
    return found, "analysed on the seeds themselves", [note], None, None


def resume_campaign(folder, *, models=None, budget=None, safe_mode=True, architectures=None, options=None,
                    workers=None, ray=None, echo=print, progress=True) -> dict | None:
    """Continue a campaign with its own settings (a parallel one on as many Ray workers as it had);
    ``options`` (by parameter name) are other settings given with the resume: refused where they differ
    from the campaign's."""
    folder = Path(folder)
    parallel = (folder / PARALLEL_FILE).is_file()
    if workers is not None and not parallel:
        read_meta(folder)   # a folder that is no campaign at all is said to be none
        raise ParameterError(f"{folder} is a campaign of one process: resume it without --workers")
    if parallel:
        record = ParallelRecord.read(folder)
        if workers is not None and workers != record.workers:
            raise ParameterError(f"{folder} runs {record.workers} workers; resume it with --workers "
                                 f"{record.workers} or without --workers")
        settings, runner = record.settings, ParallelRunner(record.workers, ray, safe_mode)
        analysis_folder = folder / "worker-0" / "analysis"
    else:
        settings, runner = CampaignSettings.from_dict(read_meta(folder)["config"]), LocalRunner()
        analysis_folder = folder / "analysis"
    check_resume_options(folder, settings, options or {}, analysis_folder)
    src = settings.sources
    paths = models or [src.model, *src.other_models]
    try:
        networks = load_networks(paths, architectures=architectures or (None if models else src.architectures),
                                 safe_mode=safe_mode, task=src.task_given)
    except ModelError as exc:
        if models:
            raise
        relative = "" if Path(src.model).is_absolute() else ", relative to the directory it was started in"
        raise ModelError(f"{exc} (the model campaign {folder} recorded{relative}); give the 'model' parameter "
                         "to override it") from None
    found = Analysis.load(analysis_folder)
    recorded = dataclasses.replace(found.convention, image_shape=None, value_range=tuple(settings.value_range))
    networks = [network_with_convention(n, recorded=recorded)[0] for n in networks]
    try:
        found.bind(networks[0])
    except AnalysisMismatchError as exc:
        raise AnalysisMismatchError(f"cannot resume {folder}: {exc}") from None
    x_train = y_train = None
    if src.train:
        train_ds, x_train = _training_inputs(src.train, networks[0], recorded, src, echo)
        y_train = train_ds.y
    criteria = []
    if settings.measure_specs:   # fitted again on the data they were fitted on (deterministic)
        x_fit = x_train if x_train is not None else load_inputs(src.seeds, networks[0], recorded, limit=src.limit,
                                                                echo=echo, **dict(src.load_options(), labels=None))[1]
        criteria = fit_criteria(list(settings.measure_specs), networks[0], x_fit, echo,
                                f"{src.train or src.seeds} again, as when the campaign started")
    fuzzer = Fuzzer.from_settings(found, settings, others=networks[1:], measure=criteria)
    return runner.resume(fuzzer, settings, folder, budget, x_train=x_train, y_train=y_train, echo=echo,
                         progress=progress)


# ---- runners: where the loop runs -------------------------------------------------------------------
class LocalRunner:
    """The loop in this process."""

    where = ""

    def check(self, **_) -> None:
        pass

    def analyze(self, network, x, y, **options):
        return analyze(network, x, y, **options)

    def start(self, fuzzer, settings, x_seeds, y_seeds, out, *, x_train, y_train, echo, progress):
        campaign = fuzzer.start(x_seeds, y_seeds, out, budget=settings.budget, sources=settings.sources,
                                measure_specs=settings.measure_specs)
        echo(f"campaign: {out}; seeds reach IDC {campaign.tracker.score:.1%} ({campaign.tracker.covered} of "
             f"{campaign.tracker.total})")
        return self._run(fuzzer, campaign, x_train, y_train, echo, progress)

    def resume(self, fuzzer, settings, folder, budget, *, x_train, y_train, echo, progress):
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
        return self._run(fuzzer, campaign, x_train, y_train, echo, progress)

    @staticmethod
    def _run(fuzzer, campaign, x_train, y_train, echo, progress) -> dict | None:
        try:
            fuzzer.run(campaign, progress=progress)
        except KeyboardInterrupt:
            echo(f"interrupted at step {campaign.step}; continue with: idcgen fuzz --resume {campaign.folder}")
            return None
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # the writer thread's error has no path of the user's; the committed steps are whole on disk
            raise InputError(f"no space left on the device of campaign {campaign.folder}"
                             + (f" (writing {exc.filename})" if exc.filename else "")
                             + f"; it stopped at its last commit: free some space, then continue with: "
                             f"idcgen fuzz --resume {campaign.folder}") from None
        campaign.open()   # the writer lock again: a second session must not export into the same folder at once
        try:
            return finish(campaign, x_train, y_train, fuzzer.oracle, list(campaign.settings.sources.notes), echo)
        finally:
            campaign.close()


#: said when parallel campaigns start (and in README.md): what --random-state does and does not fix there
PARALLEL_NOT_REPRODUCIBLE = ("parallel campaigns are not reproducible: the workers exchange inputs when they reach "
                             "them, which the machine's timing decides, so the same --random-state gives another "
                             "campaign; one process (no --workers) gives the same campaign for the same --random-state")


class ParallelRunner:
    """``workers`` campaigns on Ray that share what they cover (:mod:`idcgen.distributed.parallel`)."""

    def __init__(self, workers: int, ray: str | None, safe_mode: bool):
        from .distributed import require_ray
        self.workers = check_int("workers", workers, 1)
        require_ray("--ray" if ray is not None else "--workers")
        self.ray, self.safe_mode = ray, safe_mode
        self.where = f" on {self.workers} Ray workers"

    def check(self, *, models, architectures, guide, specs) -> None:
        if len(models) != 1 or architectures:
            raise ParameterError("--workers takes one --model (a .keras or full .h5 file): the other models of a "
                                 "disagreement oracle and --architecture are for one process")
        if guide != "idc" or specs:
            raise ParameterError("--workers share IDC's combinations: --guide idc only, without --measure")

    def analyze(self, network, x, y, *, progress=True, **options):
        from .distributed.workers import Workers
        with Workers(network, ray=self.ray or "local", workers=self.workers, safe_mode=self.safe_mode,
                     what="--workers") as pool:
            return pool.analyze(x, y, **options)

    def start(self, fuzzer, settings, x_seeds, y_seeds, out, *, x_train, y_train, echo, progress):
        echo(f"campaign: {out} ({self.workers} workers on Ray, {self.ray or 'local'}; each in {out}/worker-<i>, "
             f"merged in {out}/merged)")
        echo(f"note: {PARALLEL_NOT_REPRODUCIBLE}")
        return self._run(fuzzer, settings, x_seeds, y_seeds, out, x_train, y_train, echo)

    def resume(self, fuzzer, settings, folder, budget, *, x_train, y_train, echo, progress):
        budget = settings.budget if budget is None else budget
        echo(f"resuming {folder}: {self.workers} workers, {budget} execs in all")
        src = settings.sources
        seeds, x_seeds = load_inputs(src.seeds, fuzzer.network, fuzzer.analysis.convention, limit=src.limit,
                                     echo=echo, **src.load_options())
        return self._run(fuzzer, settings.replace(budget=budget), x_seeds, seeds.y, folder, x_train, y_train, echo)

    def _run(self, fuzzer, settings, x_seeds, y_seeds, out, x_train, y_train, echo):
        from tqdm.auto import tqdm
        from .distributed.parallel import fuzz
        with tqdm(total=settings.budget, unit="exec", desc="fuzz", dynamic_ncols=True) as bar:
            def progress(status):
                states, covered = status
                bar.n = sum(s["execs"] for s in states.values())
                bar.set_postfix(IDC=f"{covered / fuzzer.analysis.total:.1%}", workers=len(states), refresh=False)
                bar.refresh()
            try:
                result = fuzz(fuzzer.network, fuzzer.analysis, x_seeds, y_seeds, budget=settings.budget, out=out,
                              workers=self.workers, ray=self.ray, settings=settings, safe_mode=self.safe_mode,
                              on_progress=progress, echo=echo)
            except KeyboardInterrupt:
                return None
        merged = Campaign.load(Path(out) / "merged", fuzzer.network)
        per = "; ".join(f"worker {i}: {w['execs']} execs, IDC {w['idc']:.1%}, {w['imports']} imported"
                        for i, w in enumerate(result["workers"]))
        notes = [f"merged view of {self.workers} parallel campaigns (worker-0 .. worker-{self.workers - 1}), which "
                 "exchanged the entries that reached new combinations", *settings.sources.notes]
        done = finish(merged, x_train, y_train, make_oracle(settings.oracle), notes, echo, grown="merged", detail=per,
                      restarts=result["restarts"])
        return dict(done, workers=result["workers"], restarts=result["restarts"])


def finish(campaign, x_train, y_train, oracle, notes, echo, *, grown: str = "grown set", detail: str = "",
           restarts=()) -> dict:
    """Exports and report of a finished campaign, and the lines that sum it up."""
    if x_train is not None:  # the retraining data in the corpus' image shape (flat or channel-less models)
        x_train = fit_to_model(x_train, campaign.corpus.input_shape)
    exports = export_campaign(campaign, train_x=x_train, train_y=y_train, oracle=oracle)
    report = write_report(campaign, notes=notes, exports=exports)
    state = campaign.state()
    seeds_idc = campaign.stats_rows()[0]["idc"]
    echo(f"IDC {seeds_idc:.1%} (seeds) -> {campaign.tracker.score:.1%} ({grown}, {len(campaign.corpus)} inputs); "
         f"{campaign.n_findings} findings ({exports['findings']['surviving_uint8']} survive uint8 rounding); "
         f"{state['execs']} execs in {state['elapsed_seconds']:.1f} s" + (f" ({detail})" if detail else ""))
    for r in restarts:
        echo(f"note: worker {r['worker']} was restarted and resumed at step {r['resumed_at']}")
    echo(f"report: {report} (and report.html); exports: {campaign.folder / 'exports'}")
    return {"state": state, "exports": exports, "seeds_idc": seeds_idc, "report": str(report)}


def measure_specs(guide: str, measure: str | None) -> list[str]:
    """The criterion specs to fit and measure besides IDC: ``measure`` (comma-separated specs such as
    'nc,kmnc:k=10'), plus the guiding criterion when it is not among them."""
    from .criteria import parse_criteria, spec_name
    from .fuzz.guidance import guide_names
    if guide not in guide_names():
        raise ParameterError(f"The 'guide' parameter must be one of {', '.join(guide_names())}. Got {guide!r} instead.")
    specs = [s for s in parse_criteria(measure) if spec_name(s) != "idc"] if measure else []
    if guide not in ("idc", "none") and guide not in (spec_name(s) for s in specs):
        specs.insert(0, guide)
    return specs


def fit_criteria(specs: list[str], network, x, echo, data: str) -> list:
    """Each criterion spec fitted on ``x`` (one batched pass each), said once."""
    from .criteria import make_criterion
    if not specs:
        return []
    echo(f"criteria measured besides IDC: {', '.join(specs)} (fitted on {data}, {len(x)} inputs)")
    return [make_criterion(spec).fit(network, x) for spec in specs]


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


def check_resume_options(folder: Path, settings: CampaignSettings, options: dict, analysis_folder: Path) -> None:
    """Refuse options given with a resume that differ from the campaign's own (it keeps the settings it
    was made with); ``options`` holds only what was given, by parameter name."""
    from .convention import parse_preprocess, parse_value_range
    from .data import parse_resize
    from .fuzz.scheduler import make_scheduler, scheduler_spec
    try:
        made = json.loads((analysis_folder / "analysis.json").read_text()).get("config", {})
    except (OSError, ValueError):
        made = {}
    src, validity = settings.sources, settings.validity
    # parameter -> the campaign's value, in the form the given value is brought to
    saved = {
        "seeds": src.seeds, "train": src.train, "layer": settings.layer, "m": settings.m,
        "clusters": made.get("clusters"), "cluster_method": made.get("cluster_method"),
        "mutators": list(settings.mutators), "oracle": settings.oracle, "scheduler": settings.scheduler,
        "batch_size": settings.batch_size, "random_state": settings.random_state,
        "no_validity": not validity.enabled, "alpha": validity.alpha, "beta": validity.beta,
        "scale": src.scale, "resize": None if src.resize is None else "x".join(map(str, parse_resize(src.resize))),
        "value_range": list(settings.value_range), "preprocess": settings.preprocess,
        "image_shape": list(settings.input_shape),
        "class_names": None if src.class_names is None else list(src.class_names),
        "guide": settings.guide, "measure": list(settings.measure_specs), "no_round": not settings.rounding,
        "labels": src.labels, "crop": src.crop, "task": src.task_given,
    }
    normal = {
        "clusters": lambda v: list(parse_cluster_range(v)),
        "mutators": lambda v: [repr(mu) for mu in parse_mutators(v)],
        "oracle": lambda v: str(make_oracle(v, others=[None] * len(src.other_models))),
        "scheduler": lambda v: scheduler_spec(make_scheduler(v)),
        "resize": lambda v: "x".join(map(str, parse_resize(v))),
        "value_range": lambda v: list(parse_value_range(v)),
        "preprocess": lambda v: None if parse_preprocess(v) is None else parse_preprocess(v).spec,
        "image_shape": lambda v: list(parse_image_shape(v)),
        "class_names": lambda v: list(parse_class_names(v)),
        "labels": _absolute, "crop": lambda v: str(v),
        "measure": lambda v: measure_specs(settings.guide, v),
    }
    conflicts = []
    for name, value in options.items():
        if name == "out":
            if not _same_path(value, folder):
                raise ParameterError(f"a resumed campaign stays in its folder {folder}: drop the 'out' parameter")
            continue
        if name in ("limit", "analysis"):
            raise ParameterError(f"a resumed campaign keeps its seeds and its analysis ({analysis_folder}): "
                                 f"drop the '{name}' parameter")
        if name not in saved:
            raise ParameterError(f"a resumed campaign keeps the settings it was made with: drop the '{name}' parameter")
        try:
            asked = normal[name](value) if name in normal else value
        except Exception:  # noqa: BLE001 (a value the option would refuse anyway: shown as given)
            asked = value
        same = _same_path(saved[name], asked) if name in ("seeds", "train") else asked == saved[name]
        if isinstance(saved[name], float) or isinstance(asked, float):
            same = saved[name] is not None and abs(float(asked) - float(saved[name])) <= 1e-12
        if not same:
            conflicts.append((name, saved[name], asked))
    if conflicts:
        _refuse_changes(f"campaign {folder} was made with", conflicts,
                        "a resumed campaign keeps its settings: leave these out, or start a new campaign")

"""Parallel fuzzing on Ray: N campaigns that share what they cover, as AFL's -M/-S instances sync queues.

Each worker is a Ray actor running an ordinary campaign (:class:`idcgen.fuzz.fuzzer.Fuzzer` and its
store) in ``<folder>/worker-<i>``, with its own random stream (``SeedSequence(random_state)`` spawned
per worker). Every ``sync_every`` steps it publishes to a coordinator actor the corpus entries it kept
since the last sync (each reached a combination new to it) and takes what the others published. The
coordinator forwards only entries whose combination is new to the union; a worker runs an imported
entry through its model (it counts as an exec, as AFL's sync runs do) and records the ones still new to
it as one step of the pseudo-mutator ``sync``: from then on it keeps no mutant of that combination.

A killed worker is started again on its folder and resumes from its last commit (the store loses at
most the step in flight); the others go on. When all are done, ``<folder>/merged`` is written: the
union of the workers' own entries and findings, the coverage of the union over time, exports and
report. See docs/design.md, "Scale-out on Ray".
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError, ParameterError
from . import PARALLEL_FILE
from .cluster import LOCAL, ModelRecipe, cluster_workers, connect, fetch, hold_threads, network_of

if TYPE_CHECKING:
    from ..fuzz.settings import CampaignSettings

#: said when parallel campaigns start (and in README.md): what --random-state does and does not fix there
PARALLEL_NOT_REPRODUCIBLE = (
    "parallel campaigns are not reproducible: the workers exchange inputs when they reach "
    "them, which the machine's timing decides, so the same --random-state gives another "
    "campaign; one process (no --workers) gives the same campaign for the same --random-state"
)
#: the pseudo-mutator whose steps add entries imported from the other workers
SYNC = "sync"


def worker_seed(random_state: int, index: int) -> int:
    """Worker ``index``'s random_state: an independent stream derived from the campaign's."""
    return int(np.random.SeedSequence(int(random_state)).spawn(index + 1)[index].generate_state(1)[0])


def split_budget(budget: int, workers: int) -> list[int]:
    """Each worker's share of the execs, adding up to ``budget``."""
    return [budget // workers + (1 if i < budget % workers else 0) for i in range(workers)]


class Coordinator:
    """A Ray actor: the union of what the workers cover, the entries that reached it, their progress."""

    def __init__(self, total: int):
        from ..coverage import CoverageTracker

        self.tracker = CoverageTracker(total)
        self.log: list[tuple[int, dict]] = []
        self.progress: dict = {}

    def exchange(self, worker: int, entries: dict | None, cursor: int):
        """Take ``worker``'s new entries (those whose combination is new to the union go on the log); give
        back what the others logged from ``cursor`` on, and the new cursor."""
        if entries is not None and len(entries["combination"]):
            new = self.tracker.update(entries["combination"])
            if new.any():
                self.log.append((worker, {k: v[new] for k, v in entries.items()}))
        theirs = [e for w, e in self.log[cursor:] if w != worker]
        merged = {k: np.concatenate([e[k] for e in theirs]) for k in theirs[0]} if theirs else None
        return merged, len(self.log)

    def cover(self, combinations) -> None:
        """Add the seeds' combinations to the union (every worker has the same seeds): the progress bar's IDC
        is then the campaign's, as the merged view will have it, not only what the workers' own entries add.
        They go on no log: a worker keeps only what its seeds do not cover."""
        self.tracker.update(combinations)

    def report(self, worker: int, state: dict) -> None:
        self.progress[worker] = state

    def status(self) -> tuple[dict, int]:
        return dict(self.progress), self.tracker.covered


class FuzzWorker:
    """A Ray actor: one campaign, in its own folder, that syncs with the coordinator."""

    def __init__(self, index: int, recipe: ModelRecipe, analysis, settings, coordinator, threads, sync_every: int):
        hold_threads(threads)
        from ..fuzz.fuzzer import Fuzzer

        self.index, self.coordinator = index, coordinator
        self.settings, self.sync_every = settings, int(sync_every)
        network = recipe.build()
        self.fuzzer = Fuzzer.from_settings(
            analysis.bind(network), settings, random_state=worker_seed(settings.random_state, index)
        )
        self.published = self.cursor = 0
        self.imports = 0
        self.sync_wait = 0.0  # seconds spent waiting for the coordinator's answer
        self._warm_up(settings.batch_size)

    def _warm_up(self, batch_size: int) -> None:
        """Trace the forward pass the campaign runs (one full and one partial batch, so the trace takes any
        batch size) before the start barrier: otherwise one worker's tracing would run while the others fuzz,
        and the campaigns' clocks would count it."""
        network = self.fuzzer.network
        for n in (batch_size, max(1, batch_size // 2 - 1)):
            network.forward(np.zeros((n, *network.input_shape), np.float32), self.fuzzer.layers)

    def ready(self) -> int:
        return os.getpid()

    def run(self, folder: str, x, y, budget: int, parallel: dict) -> dict:
        """Start (or resume, when ``folder`` holds the campaign) and fuzz to ``budget`` execs."""
        from ..fuzz.campaign import MutatorStats
        from ..fuzz.statefile import STATE_FILES

        folder = Path(folder)
        resumed = any((folder / name).exists() for name in ("campaign.json", *STATE_FILES))
        if not resumed and folder.exists():  # killed while the folder was made: nothing was committed
            shutil.rmtree(folder)
        if resumed:
            campaign = self.fuzzer.resume(folder)
            campaign.set_budget(max(budget, campaign.execs))
        else:
            campaign = self.fuzzer.start(
                x,
                y,
                folder,
                budget=budget,
                sources=self.settings.sources,
                measure_specs=self.settings.measure_specs,
                parallel=parallel,
            )
        resumed_at = campaign.step if resumed else None
        campaign.mutator_stats.setdefault(SYNC, MutatorStats())
        self.published, self.cursor = campaign.corpus.n_seeds, 0  # (re)publish every own entry: a new coordinator
        self.coordinator.cover.remote(campaign.corpus.combination[: campaign.corpus.n_seeds])
        campaign.open()
        try:
            self._sync(campaign)
        finally:
            campaign.close()
        self.fuzzer.run(campaign, progress=False, on_step=self._on_step)
        self._publish(campaign)
        return dict(
            campaign.state(), resumed_at=resumed_at, imports=self.imports, sync_wait_seconds=round(self.sync_wait, 3)
        )

    # ---- syncing ------------------------------------------------------------------------------
    def _on_step(self, campaign) -> None:
        self.coordinator.report.remote(
            self.index,
            {"step": campaign.step, "execs": campaign.execs, "covered": campaign.tracker.covered, "pid": os.getpid()},
        )
        if campaign.step % self.sync_every == 0 and campaign.execs < campaign.budget:
            self._sync(campaign)

    def _own(self, campaign) -> dict | None:
        """The entries this worker kept (not imported) since it last published."""
        corpus = campaign.corpus
        ids = [
            i for i in range(self.published, len(corpus)) if corpus.parent[i] >= 0 and corpus.chains[i][-1:] != [SYNC]
        ]
        self.published = len(corpus)
        if not ids:
            return None
        entries = corpus.entries(np.asarray(ids))
        return {k: entries[k] for k in ("x", "reference", "root", "combination", "affine", "chain")}

    def _publish(self, campaign) -> None:
        import ray

        fetch(ray, self.coordinator.exchange.remote(self.index, self._own(campaign), 1 << 62))

    def _sync(self, campaign) -> None:
        import ray

        own = self._own(campaign)
        started = time.perf_counter()
        incoming, self.cursor = fetch(ray, self.coordinator.exchange.remote(self.index, own, self.cursor))
        self.sync_wait += time.perf_counter() - started
        if incoming is not None:
            self._import(campaign, incoming)
        self.published = len(campaign.corpus)  # what the import added is not this worker's to publish

    def _import(self, campaign, incoming: dict) -> None:
        """Run the others' entries through the model; record those still new here as ``sync`` steps."""
        from ..fuzz.campaign import Step

        started = time.perf_counter()
        fuzzer = self.fuzzer
        probs, (acts,) = fuzzer.network.forward(incoming["x"], (fuzzer.analysis.layer,))
        ids = fuzzer.analysis.combinations.ids(fuzzer.analysis.select(acts))
        predictions = probs[:, 0].astype(np.float64) if fuzzer.regression else probs.argmax(1)
        seconds = time.perf_counter() - started
        for affine in (False, True):  # an entry with an affine transform keeps its descendants from another
            rows = np.flatnonzero(incoming["affine"] == affine)
            if not len(rows):
                continue
            n = len(rows)
            step = Step(
                number=campaign.step + 1,
                mutator=SYNC,
                affine=affine,
                parents=incoming["root"][rows],
                mutants=incoming["x"][rows],
                references=incoming["reference"][rows],
                predictions=predictions[rows],
                combinations=ids[rows],
                features={"idc": ids[rows]},
                valid=np.ones(n, bool),
                flagged=np.zeros(n, bool),
            )
            step.keep = campaign.tracker.would_cover(ids[rows])
            self.imports += int(step.keep.sum())
            campaign.record(step, seconds * n / len(ids))


# ---- the driver ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ParallelRecord:
    """``parallel.json``: how many workers, the execs in all, the sync interval and the campaign's settings."""

    workers: int
    budget: int
    sync_every: int
    settings: CampaignSettings

    def to_dict(self) -> dict:
        return {
            "workers": self.workers,
            "budget": self.budget,
            "sync_every": self.sync_every,
            "settings": self.settings.to_dict(),
        }

    @classmethod
    def read(cls, out) -> "ParallelRecord":
        """The record in folder ``out`` (one of an earlier idcgen, with loose loop settings beside an
        ``extra_config`` of sources, read as the same)."""
        from ..fuzz.settings import CampaignSettings

        data = json.loads((Path(out) / PARALLEL_FILE).read_text())
        settings = data["settings"]
        if "extra_config" in data:  # the earlier format
            settings = dict(
                data["extra_config"], **settings, budget=data["budget"], input_shape=settings.get("image_shape") or ()
            )
        return cls(
            workers=int(data["workers"]),
            budget=int(data["budget"]),
            sync_every=int(data.get("sync_every", settings.get("sync_every", 4))),
            settings=CampaignSettings.from_dict(settings),
        )


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """How the workers of a parallel campaign run: on which Ray (``local``: started here), with how many CPU
    threads and what share of a GPU each, and every how many steps they sync with the coordinator."""

    ray: str | None = LOCAL
    threads: int = 1
    sync_every: int = 4
    gpus_per_worker: float | None = None


def fuzz(
    model,
    analysis,
    seeds,
    labels=None,
    *,
    budget: int,
    out,
    settings=None,
    workers: int = 2,
    runner: WorkerSettings = WorkerSettings(),
    safe_mode: bool = True,
    on_progress=None,
    echo=None,
) -> dict:
    """Run ``workers`` campaigns on Ray into ``out/worker-<i>`` and write the merged view ``out/merged``.

    ``model``: a model file, Keras model or Network (with the analysis' input convention); ``analysis``:
    an Analysis of it; ``seeds``/``labels``: the seed inputs (the same for every worker). The campaign's
    settings are ``settings`` (a :class:`~idcgen.fuzz.settings.CampaignSettings`, as the command line makes
    them or ``Fuzzer(analysis, ...).settings(budget)`` does; default: the default mutators), run as ``runner``
    says (a :class:`WorkerSettings`). A folder that already holds a parallel
    campaign is resumed (every worker from its last commit, with its recorded settings) to the new
    ``budget``. ``on_progress((states, covered))`` is called about four times a second with each worker's last
    step and the union's covered count.
    Returns the merged campaign's state with ``workers`` (each one's state) and ``restarts``.
    """
    budget, workers, sync_every, threads = _checked(budget, workers, runner)
    out = Path(out).resolve()  # the workers' own working directory may differ from this process'
    say = echo or (lambda *_: None)
    network, _ = network_of(
        model, safe_mode=safe_mode, recorded=dataclasses.replace(analysis.convention, image_shape=None)
    )
    analysis.bind(network)
    settings, sync_every = _settings_of(out, analysis, settings, budget, workers, sync_every)
    settings = settings.replace(budget=int(budget))
    out.mkdir(parents=True, exist_ok=True)
    record = ParallelRecord(workers=workers, budget=int(budget), sync_every=sync_every, settings=settings)
    (out / PARALLEL_FILE).write_text(json.dumps(record.to_dict(), indent=2) + "\n")

    pool_ray, started = connect(runner.ray, what="--ray" if runner.ray not in (None, LOCAL) else "--workers")
    crew = _Crew(pool_ray, record, out, threads, say)
    try:
        crew.spawn(network, analysis, runner, safe_mode, seeds, labels)
        results = crew.run(on_progress)
    except KeyboardInterrupt:
        say(f"interrupted; the workers' folders hold their last commits; continue with: idcgen fuzz --resume {out}")
        raise
    finally:  # also when a worker failed: the others stop at once (their folders keep their last commit)
        crew.kill()
        if started:
            pool_ray.shutdown()
    restarts = crew.restarts
    for r in restarts:
        r["resumed_at"] = results[r["worker"]].get("resumed_at")
    merged = merge(out, network, workers)
    return dict(
        merged.state(), workers=[results[i] for i in range(workers)], restarts=restarts, folder=str(merged.folder)
    )


class _Crew:
    """The Ray actors of one run of a parallel campaign: the workers (each started again from its last commit
    when it dies, at most three times per worker in all) and their coordinator."""

    def __init__(self, pool_ray, record: ParallelRecord, out: Path, threads: int, say):
        self.ray, self.record, self.threads, self.say = pool_ray, record, threads, say
        self.folders = [out / f"worker-{i}" for i in range(record.workers)]
        self.shares = split_budget(record.budget, record.workers)
        self.died = (pool_ray.exceptions.RayActorError, pool_ray.exceptions.WorkerCrashedError)
        self.actors: dict = {}
        self.restarts: list[dict] = []
        self.coordinator = None

    def spawn(self, network, analysis, runner: WorkerSettings, safe_mode: bool, seeds, labels) -> None:
        """The coordinator and one actor per worker, with the model, the analysis and the seeds put once."""
        put = self.ray.put
        recipe = ModelRecipe.of(network, safe_mode=safe_mode)
        self.recipe = put(recipe)
        self.light = put(dataclasses.replace(analysis, network=None))
        self.coordinator = self.ray.remote(Coordinator).options(num_cpus=0).remote(analysis.total)
        # each its own GPU share: the one given, else the cluster's GPUs spread over the workers (none where the
        # driver runs on the CPU), as an analysis pool's
        _, gpus = cluster_workers(self.ray, self.record.workers, runner.gpus_per_worker, on_gpus=recipe.device != "cpu")
        self.actor = self.ray.remote(FuzzWorker).options(num_cpus=self.threads, num_gpus=gpus)
        self.x_ref = put(None if seeds is None else np.asarray(seeds))
        self.y_ref = put(None if labels is None else np.asarray(labels))
        self.actors = {i: self._actor(i) for i in range(self.record.workers)}

    def _actor(self, i: int):
        r = self.record
        return self.actor.remote(i, self.recipe, self.light, r.settings, self.coordinator, self.threads, r.sync_every)

    def _start(self, i: int):
        r = self.record
        parallel = {
            "workers": r.workers,
            "budget": r.budget,
            "worker": i,
            "random_state": worker_seed(r.settings.random_state, i),
        }
        return self.actors[i].run.remote(str(self.folders[i]), self.x_ref, self.y_ref, self.shares[i], parallel)

    def _restart(self, i: int, exc: BaseException):
        if len(self.restarts) >= 3 * self.record.workers:
            raise exc
        self.say(f"worker {i} died ({type(exc).__name__}); starting it again from its last commit")
        self.restarts.append({"worker": i})
        self.actors[i] = self._actor(i)
        return self.actors[i]

    def run(self, on_progress) -> dict:
        """Every worker's final state by index, once all have fuzzed their share."""
        pool_ray = self.ray
        # a start barrier: every worker has loaded its model and traced its forward pass before any fuzzes
        starting = {a.ready.remote(): i for i, a in self.actors.items()}
        while starting:
            done, _ = pool_ray.wait(list(starting), num_returns=1)
            i = starting.pop(done[0])
            try:
                fetch(pool_ray, done[0])
            except self.died as exc:
                starting[self._restart(i, exc).ready.remote()] = i
        running, results = {self._start(i): i for i in self.actors}, {}
        while running:
            done, _ = pool_ray.wait(list(running), num_returns=1, timeout=0.25)
            if on_progress is not None:
                on_progress(fetch(pool_ray, self.coordinator.status.remote()))
            for ref in done:
                i = running.pop(ref)
                try:
                    results[i] = fetch(pool_ray, ref)
                except self.died as exc:
                    self._restart(i, exc)
                    running[self._start(i)] = i
        return results

    def kill(self) -> None:
        for a in [*self.actors.values(), *([self.coordinator] if self.coordinator is not None else [])]:
            self.ray.kill(a)


def _checked(budget, workers, runner: WorkerSettings) -> tuple[int, int, int, int]:
    """The budget, workers, sync period and threads, checked: a budget every worker gets a share of."""
    from ..checks import check_int
    from ..fuzz.campaign import check_budget

    check_budget(budget)
    workers = check_int("workers", workers, 1)
    sync_every = check_int("sync_every", runner.sync_every, 1)
    threads = check_int("threads", runner.threads, 1)
    if budget < workers:
        raise ParameterError(
            f"a budget of {budget} execs cannot be shared by {workers} workers; give at least {workers}"
        )
    return int(budget), workers, sync_every, threads


def _settings_of(out: Path, analysis, settings, budget: int, workers: int, sync_every: int):
    """The campaign's settings and sync period: those recorded in ``out`` (a resume), else ``settings`` (default:
    the settings a Fuzzer with the default mutators records)."""
    from ..fuzz.fuzzer import Fuzzer
    from ..fuzz.mutators import DEFAULT_MUTATORS, parse_mutators

    if (out / PARALLEL_FILE).exists():
        saved = ParallelRecord.read(out)
        if saved.workers != workers:
            raise ParameterError(f"{out} was run with {saved.workers} workers; resume it with as many")
        if saved.budget > budget:
            raise ParameterError(f"budget {budget} is below this campaign's {saved.budget}; give a larger one")
        return saved.settings, saved.sync_every
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} exists and is not empty: choose another --out")
    if settings is None:
        settings = Fuzzer(analysis, mutators=parse_mutators(DEFAULT_MUTATORS)).settings(budget)
    return settings, sync_every


def merge(out: Path, network, workers: int):
    """Write ``out/merged``: the workers' own entries in the order they were found (an import stands for the
    entry it came from), their findings once each, and the union's coverage after every worker step.
    Returns the merged Campaign (read it again with ``Campaign.load(out / "merged")``)."""
    from ..coverage import CoverageTracker
    from ..fuzz.campaign import PHASES, Campaign, MutatorStats
    from ..fuzz.corpus import Corpus

    parts = [Campaign.load(out / f"worker-{i}", network) for i in range(workers)]
    first = parts[0]
    n_seeds = first.corpus.n_seeds
    regression = first.corpus.regression
    times = [{row["step"]: row["time"] for row in c.stats} for c in parts]
    # every worker step, in time order: the merged campaign's steps (0 is the seeds)
    events = sorted((row["time"], w, row["step"]) for w, c in enumerate(parts) for row in c.stats if row["step"] > 0)
    event_times = np.asarray([t for t, _, _ in events], np.float64)

    def merged_step(w, step):
        return int(np.searchsorted(event_times, times[w].get(int(step), 0.0), side="left")) + 1

    own = sorted(
        (merged_step(w, c.corpus.step[i]), w, i)
        for w, c in enumerate(parts)
        for i in range(n_seeds, len(c.corpus))
        if c.corpus.chains[i][-1:] != [SYNC]
    )
    remap = [np.concatenate([np.arange(n_seeds), np.full(len(c.corpus) - n_seeds, -1)]).astype(np.int64) for c in parts]
    by_combination = {}
    for k, (_, w, i) in enumerate(own):
        remap[w][i] = n_seeds + k
        by_combination.setdefault(int(parts[w].corpus.combination[i]), n_seeds + k)
    for w, c in enumerate(parts):  # an import stands for the entry it came from
        for i in range(n_seeds, len(c.corpus)):
            if c.corpus.chains[i][-1:] == [SYNC]:
                remap[w][i] = by_combination.get(int(c.corpus.combination[i]), int(c.corpus.root[i]))
    corpus = Corpus(first.corpus.input_shape, regression=regression)
    corpus.add_entries(first.corpus.entries(np.arange(n_seeds)))
    for step, w, i in own:
        e = parts[w].corpus.entries(np.asarray([i]))
        e["parent"], e["step"] = remap[w][e["parent"]], np.asarray([step])
        corpus.add_entries(e)
    for w, c in enumerate(parts):
        np.add.at(corpus.fuzz_count, remap[w], c.corpus.fuzz_count)

    # findings once each: by (combination, label, prediction); for a regression model by (combination, root)
    found, seen = [], set()
    for w, c in enumerate(parts):
        f = c.findings()
        for j in range(len(f.get("id", ()))):
            key = (
                int(f["combination"][j]),
                int(f["root"][j]) if regression else int(f["label"][j]),
                -1 if regression else int(f["prediction"][j]),
            )
            if key not in seen:
                seen.add(key)
                row = {k: v[j : j + 1].copy() for k, v in f.items()}
                for col in ("corpus_id", "parent"):
                    row[col] = np.where(row[col] >= 0, remap[w][np.maximum(row[col], 0)], -1)
                row["step"] = np.asarray([merged_step(w, f["step"][j])])
                found.append(row)
    found.sort(key=lambda r: int(r["step"][0]))
    parts_found = []
    if found:
        part = {k: np.concatenate([r[k] for r in found]) for k in found[0]}
        part["id"] = np.arange(len(found))
        parts_found = [part]

    tracker = CoverageTracker(first.tracker.total, corpus.combination)
    stats = _merged_stats(parts, events, corpus, n_seeds, parts_found)
    mutator_stats = {}
    for c in parts:
        for name, s in c.mutator_stats.items():
            total = mutator_stats.setdefault(name, MutatorStats())
            for key in ("execs", "valid", "kept", "findings", "seconds", "steps", "errors"):
                setattr(total, key, getattr(total, key) + getattr(s, key))
            total.last_error = s.last_error or total.last_error
    recorded = ParallelRecord.read(out)
    settings = first.settings.replace(
        budget=sum(c.budget for c in parts),
        random_state=recorded.settings.random_state,
        parallel={"workers": workers, "budget": recorded.budget},
    )
    merged = Campaign(
        settings=settings,
        analysis=first.analysis,
        corpus=corpus,
        coverage={"idc": tracker},
        rng=np.random.default_rng(0),
        mutator_stats=mutator_stats,
        step=len(events),
        execs=sum(c.execs for c in parts),
        seed_execs=first.seed_execs,
        flagged=sum(c.flagged for c in parts),
        elapsed=max(c.elapsed for c in parts),
        phase_seconds={phase: sum(c.phase_seconds[phase] for c in parts) for phase in PHASES},  # all workers' time
        stats=stats,
        finding_parts=parts_found,
    )
    folder = out / "merged"
    shutil.rmtree(folder, ignore_errors=True)
    merged.save(folder)
    merged.close()
    return merged


def _merged_stats(parts, events, corpus, n_seeds: int, found: list) -> list[dict]:
    """stats.jsonl of the merged view: one row per worker step in time order, with the execs of all
    workers by then and the union's corpus, coverage and findings."""
    from ..coverage import CoverageTracker

    tracker = CoverageTracker(parts[0].tracker.total, corpus.combination[:n_seeds])
    entry_steps = corpus.step[n_seeds:]
    finding_steps = found[0]["step"] if found else np.zeros(0, np.int64)
    rows = [
        dict(
            parts[0].stats[0],
            step=0,
            execs=0,
            execs_per_s=0.0,
            corpus=n_seeds,
            idc=tracker.score,
            covered=tracker.covered,
            findings=0,
            flagged=0,
            unique_pairs=0,
        )
    ]
    latest = [{"execs": 0, "flagged": 0} for _ in parts]
    by_step = [{row["step"]: row for row in c.stats} for c in parts]
    done = 0
    for k, (t, w, step) in enumerate(events, start=1):
        latest[w] = row = by_step[w][step]
        upto = int(np.searchsorted(entry_steps, k, side="right"))
        tracker.update(corpus.combination[n_seeds + done : n_seeds + upto])
        done = upto
        execs = sum(r["execs"] for r in latest)
        rows.append(
            {
                "step": k,
                "time": t,
                "execs": execs,
                "execs_per_s": round(execs / t, 1) if t > 0 else 0.0,
                "corpus": n_seeds + upto,
                "idc": tracker.score,
                "covered": tracker.covered,
                "findings": int(np.searchsorted(finding_steps, k, side="right")),
                "flagged": sum(r["flagged"] for r in latest),
                "unique_pairs": 0,
                "mutator": row["mutator"],
                "seconds": row["seconds"],
                "worker": w,
            }
        )
    return rows

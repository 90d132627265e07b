"""Where a command's work runs: this process (:class:`LocalExecutor`) or Ray workers
(:class:`idcgen.distributed.workers.Workers`), behind one interface (docs/design.md, "Settings").

Both take the same calls (``analyze``, ``coverage``, ``inspect``, ``affinity``, ``fuzz``, ``resume``, ``close``),
so a command runs its work one way whichever executor the settings chose; only Ray workers read shard files
themselves, and on them a campaign is several that share what they cover (:mod:`idcgen.distributed.parallel`).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import InputError, ParameterError

if TYPE_CHECKING:
    from .fuzz.campaign import Campaign
    from .fuzz.fuzzer import Fuzzer


@dataclass
class Fuzzed:
    """A campaign run to its budget, handed back to be exported and reported the same way wherever it ran: the
    campaign (for Ray, the merged view) and what its summary and report say about how it ran."""

    campaign: Campaign
    oracle: Any  # the oracle its findings are judged by on export
    notes: tuple = ()  # what the report says about the setting
    grown: str = "grown set"  # what the summary calls the inputs it grew
    detail: str = ""  # how it ran, in the summary line's parentheses
    workers: list | None = None  # each Ray worker's state
    restarts: tuple = ()  # the workers started again from their last commit


class LocalExecutor:
    """The work in this process, on the model under test."""

    where = ""  # what a line about the work adds ("" here; " on N Ray workers" there)

    def __init__(self, network):
        self.network = network

    def analyze(self, x, y=None, **options):
        from .analysis import analyze

        return analyze(self.network, x, y, **options)

    def coverage(self, analysis, x, *, progress: bool = False):
        return analysis.coverage(x)

    def inspect(self, x, y=None, **options):
        from .deepinspect import inspect

        return inspect(self.network, x, y, **options)

    def affinity(self, x, y=None, **options):
        from .deepbase import affinity

        return affinity(self.network, x, y, **options)

    def shards(self, source, **_):
        raise ParameterError(f"shard files ({source}) are read by Ray workers: give --ray or --workers")

    # ---- campaigns -------------------------------------------------------------------------------
    def fuzz(self, fuzzer: Fuzzer, x_seeds, y_seeds, out: Path, *, echo: Callable, progress: bool) -> Fuzzed | None:
        """A new campaign in ``out``, fuzzed to its budget in this process; None if interrupted."""
        try:
            campaign = fuzzer.start(x_seeds, y_seeds, out)
        except OSError as exc:
            # before its first commit there is no campaign to resume: it starts again
            raise _no_space(
                exc,
                out,
                f"it stopped writing its seeds, before any fuzzing: free some space, remove {out}, then start the campaign again",
            ) from None
        echo(
            f"campaign: {out}; seeds reach IDC {campaign.tracker.score:.1%} ({campaign.tracker.covered} of "
            f"{campaign.tracker.total})"
        )
        return self._run(fuzzer, campaign, echo, progress)

    def resume(
        self, fuzzer: Fuzzer, folder: Path, budget: int | None, *, seeds: Callable, echo: Callable, progress: bool
    ) -> Fuzzed | None:
        """The campaign in ``folder`` continued to ``budget`` execs (default its own) from its last commit; its
        ``seeds`` (a call that loads them) are in the campaign already. None if interrupted."""
        campaign = fuzzer.resume(folder)
        if budget is not None:
            try:
                campaign.set_budget(budget)
            except BaseException:
                campaign.close()
                raise
        echo(
            f"resuming {folder} at step {campaign.step}: {campaign.execs} of {campaign.budget} execs done, "
            f"IDC {campaign.tracker.score:.1%}"
        )
        for note in campaign.store.notes if campaign.store is not None else ():  # damage found on reading
            echo(f"note: {note}")
        echo(fuzzer.validity.describe(fuzzer.mutators))
        return self._run(fuzzer, campaign, echo, progress)

    @staticmethod
    def _run(fuzzer: Fuzzer, campaign: Campaign, echo: Callable, progress: bool) -> Fuzzed | None:
        try:
            fuzzer.run(campaign, progress=progress)
        except KeyboardInterrupt:
            echo(f"interrupted at step {campaign.step}; continue with: idcgen fuzz --resume {campaign.folder}")
            return None
        except OSError as exc:
            # the writer thread's error has no path of the user's; the committed steps are whole on disk
            folder = campaign.folder
            raise _no_space(
                exc,
                folder,
                f"it stopped at its last commit: free some space, then continue with: idcgen fuzz --resume {folder}",
            ) from None
        campaign.open()  # the writer lock again: a second session must not export into the same folder at once
        return Fuzzed(campaign, fuzzer.oracle, notes=tuple(campaign.settings.sources.notes))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _no_space(exc: OSError, folder: Path | None, what_next: str) -> InputError:
    """A full disk under campaign ``folder`` as one line saying what to do next; any other OSError as it is."""
    if exc.errno != errno.ENOSPC:
        raise exc
    where = f" (writing {exc.filename})" if exc.filename else ""
    return InputError(f"no space left on the device of campaign {folder}{where}; {what_next}")

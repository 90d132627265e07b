"""The campaign report: ``report.md`` and ``report.html`` with plots, for a person to open.

Answers: how much did IDC grow, at what cost, which mutations raise it most, and what do the
mutants look like beside their seeds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .errors import ParameterError
from .files import atomic_text
from .fuzz.campaign import PHASES, Campaign, phase_seconds
from .fuzz.credit import mutator_credit
from .fuzz.validity import Validity
from .markdown import to_html
from .plots import pyplot
from .quality import summary


def mutator_table(campaign: Campaign, credit: list[dict] | None = None) -> list[dict]:
    """Per-mutator figures, best IDC gain per 1,000 execs first. The IDC gain is the share of combinations a
    mutator's kept inputs reached first (idcgen/fuzz/credit.py); with the change its kept inputs made.
    ``credit``: ``mutator_credit(campaign)`` when already computed."""
    credit = {r["mutator"]: r for r in (mutator_credit(campaign) if credit is None else credit)}
    rows = []
    for name, s in campaign.mutator_stats.items():
        c = credit[name]
        gain = c["idc_gained"]
        rows.append(
            {
                "mutator": name,
                "execs": s.execs,
                "valid": s.valid,
                "kept": s.kept,
                "findings": s.findings,
                "seconds": round(s.seconds, 2),
                "errors": s.errors,
                "idc_gain": gain,
                "idc_gain_per_1000_execs": gain / s.execs * 1000 if s.execs else 0.0,
                "idc_gain_per_second": gain / s.seconds if s.seconds else 0.0,
                "last_error": s.last_error,
                "median_l2": c["median_l2"],
                "median_linf": c["median_linf"],
                "idc_gain_per_linf": c["idc_gained_pp_per_linf"],
            }
        )
    return sorted(rows, key=lambda r: (-r["idc_gain_per_1000_execs"], r["mutator"]))


def _last_mutator_and_move(found: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each finding's last mutator (the one whose mutant was flagged) and |output - root seed's output|."""
    last = np.array([str(c).rsplit("|", 1)[-1] for c in found["chain"]])
    return last, np.abs(np.asarray(found["prediction"], np.float64) - found["root_prediction"])


def findings_by_mutator(campaign: Campaign) -> list[dict]:
    """The findings grouped by the last mutator of their chain (the one whose mutant was flagged): how many,
    how far from the seed, and for a regression model how far the output moved from the seed's."""
    found = campaign.findings()
    if not found:
        return []
    last, moved = _last_mutator_and_move(found)
    rows = []
    for name in sorted(set(last.tolist())):
        sel = last == name
        execs = campaign.mutator_stats[name].execs if name in campaign.mutator_stats else 0
        row = {
            "mutator": name,
            "findings": int(sel.sum()),
            "execs": execs,
            "per_1000_execs": 1000 * sel.sum() / execs if execs else 0.0,
        }
        if campaign.corpus.regression:
            row.update(median_output_change=float(np.median(moved[sel])), max_output_change=float(moved[sel].max()))
        else:
            row["pairs"] = len(set(zip(found["label"][sel].tolist(), found["prediction"][sel].tolist())))
        if "linf" in found:
            row.update(
                median_linf=float(np.median(found["linf"][sel])), median_ssim=float(np.median(found["ssim"][sel]))
            )
        rows.append(row)
    return sorted(rows, key=lambda r: (-r["findings"], r["mutator"]))


def _findings_figure(campaign: Campaign, path: Path, n: int = 8) -> bool:
    """Up to ``n`` findings, seed beside mutant with the outputs drawn on (idcgen/annotate.py), taken in
    turn from each mutator: its finding that moved the output most (regression), else its first."""
    from PIL import Image, ImageDraw

    from .annotate import finding_image

    found = campaign.findings()
    if not found:
        return False
    last, moved = _last_mutator_and_move(found)
    queues = []
    for name in sorted(set(last.tolist())):
        idx = np.flatnonzero(last == name)
        queues.append(list(idx[np.argsort(-moved[idx], kind="stable")] if campaign.corpus.regression else idx))
    picked = []
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    tiles = []
    for j in picked:
        tile = finding_image(
            campaign.corpus.x[found["root"][j]],
            found["x"][j],
            seed_prediction=found["root_prediction"][j],
            prediction=found["prediction"][j],
            label=found["label"][j],
            value_range=campaign.value_range,
            regression=campaign.corpus.regression,
        )
        caption = Image.new("RGB", (tile.width, 14), (255, 255, 255))
        ImageDraw.Draw(caption).text((2, 1), f"#{int(found['id'][j])} {last[j]}"[: tile.width // 6], fill=(0, 0, 0))
        both = Image.new("RGB", (tile.width, tile.height + 14), (255, 255, 255))
        both.paste(caption, (0, 0))
        both.paste(tile, (0, 14))
        tiles.append(both)
    cols = 2
    w, h = max(t.width for t in tiles), max(t.height for t in tiles)
    rows = -(-len(tiles) // cols)
    sheet = Image.new("RGB", (cols * w + (cols - 1) * 10, rows * h + (rows - 1) * 10), (255, 255, 255))
    for k, t in enumerate(tiles):
        sheet.paste(t, ((k % cols) * (w + 10), (k // cols) * (h + 10)))
    sheet.save(path)
    return True


def _short(spec: str, width: int = 32) -> str:
    """A mutator spec cut to fit a plot's axis (the report's tables give it whole)."""
    return spec if len(spec) <= width else spec[: width - 3] + "..."


def _plots(campaign: Campaign, rows: list[dict], folder: Path) -> dict[str, Path]:
    plt = pyplot()

    paths = {}
    stats = campaign.stats_rows()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["execs"] for r in stats], [100 * r["idc"] for r in stats], lw=1.5)
    ax.set_xlabel("execs (mutants run)")
    ax.set_ylabel("IDC (%)")
    ax.set_title(f"IDC against execs (layer {campaign.analysis.layer}, m = {campaign.analysis.m})")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths["idc"] = folder / "idc_vs_execs.png"
    fig.savefig(paths["idc"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 0.35 * len(rows) + 1.2))
    names = [_short(r["mutator"]) for r in rows][::-1]
    ax.barh(names, [r["idc_gain_per_1000_execs"] * 100 for r in rows][::-1], color="tab:blue")
    ax.set_xlabel("IDC gain per 1,000 execs (percentage points)")
    ax.set_title("Which mutations raise IDC most")
    fig.tight_layout()
    paths["mutators"] = folder / "mutators.png"
    fig.savefig(paths["mutators"], dpi=110)
    plt.close(fig)

    corpus = campaign.corpus
    kept = np.flatnonzero(corpus.parent >= 0)
    if len(kept):
        pick = kept[np.linspace(0, len(kept) - 1, min(8, len(kept))).astype(int)]
        fig, axes = plt.subplots(2, len(pick), figsize=(1.6 * len(pick), 4.4), squeeze=False)
        lo, hi = campaign.value_range
        for col, i in enumerate(pick):
            for row, (img, title) in enumerate(
                [
                    (corpus.x[corpus.root[i]], f"seed {corpus.root[i]}"),
                    (corpus.x[i], corpus.chains[i][-1].split("(")[0]),
                ]
            ):
                ax = axes[row, col]
                shown = (img - lo) / (hi - lo)
                ax.imshow(shown[..., 0] if shown.shape[-1] == 1 else shown, cmap="gray", vmin=0, vmax=1)
                value = corpus.prediction[corpus.root[i] if row == 0 else i]
                label = f"pred {value:+.3f}" if corpus.regression else f"pred {value}"  # an output value, or a class
                ax.set_title(f"{title}\n{label}", fontsize=7)
                ax.axis("off")
        fig.suptitle("Kept mutants (bottom) beside their seeds (top)", fontsize=9)
        fig.tight_layout()
        paths["examples"] = folder / "examples.png"
        fig.savefig(paths["examples"], dpi=110)
        plt.close(fig)
    return paths


def write_report(campaign: Campaign, *, notes: list[str] = (), exports: dict | None = None) -> Path:
    """Write ``report.md``, ``report.html`` and the plots into the campaign folder (a campaign in memory is saved
    first: ``campaign.save(folder)``, or ``Fuzzer.run(..., out=folder)``)."""
    folder = campaign.folder
    if folder is None:
        raise ParameterError("this campaign is in memory only: save it first (campaign.save(folder)), then report")
    # the export measured each mutator's credit already (exports.json "mutators"): not a second pass over the corpus
    credit = exports["mutators"] if exports and "mutators" in exports else mutator_credit(campaign)
    rows = mutator_table(campaign, credit)
    plots = _plots(campaign, rows, folder)
    stats = campaign.stats_rows()
    cfg, a = campaign.settings, campaign.analysis
    state = campaign.state()
    lines = [f"# Fuzz campaign report: {folder.name}", ""]
    lines += [f"- note: {n}" for n in [*notes, *campaign.notes]]  # the session's, then damage found on reading
    lines += [
        f"- model: `{cfg.sources.model or '?'}`; analysis: layer `{a.layer}`, m = {a.m}, "
        f"{a.total} combinations ({cfg.sources.analysis_source})",
        f"- seeds: {campaign.corpus.n_seeds} from `{cfg.sources.seeds or '?'}`; oracle: {cfg.oracle}; "
        f"scheduler: {cfg.scheduler}; batch {cfg.batch_size}; random_state {cfg.random_state}",
        f"- {_validity_text(cfg)}",
        *_other_settings(cfg),
        f"- budget {cfg.budget} execs; done {state['execs']} execs in {state['elapsed_seconds']:.1f} s "
        f"({state['execs'] / max(state['elapsed_seconds'], 1e-9):.0f} execs/s)",
        *phase_line(state),
        "",
        "## Coverage",
        "",
        f"Guided by {cfg.guide.upper()}: "
        + (
            "every valid mutant joins the corpus (no guidance)."
            if cfg.guide == "none"
            else "a valid mutant joins the corpus when it raises its value (the layers' covariance norms)."
            if cfg.guide == "nlc"
            else "a valid mutant joins the corpus when it covers something new."
        ),
        "",
        "| criterion | seeds | grown test set | covered |\n|---|---|---|---|",
    ]
    for name, tracker in campaign.coverage.items():
        before = stats[0].get("idc" if name == "idc" else f"{name}_coverage", 0.0) if stats else 0.0
        if tracker.total is None:  # NLC, TKNP, CC: a value or a count, not a share
            show = tracker.format_score
            lines.append(
                f"| {name.upper()} | {show(before)} | {show(tracker.score)} | {tracker.covered} {tracker.unit} |"
            )
        else:
            lines.append(
                f"| {name.upper()} | {before:.1%} | {tracker.score:.1%} | {tracker.covered} of {tracker.total} |"
            )
    lines += [
        "",
        f"Corpus: {len(campaign.corpus)} inputs ({campaign.corpus.n_seeds} seeds + "
        f"{len(campaign.corpus) - campaign.corpus.n_seeds} kept mutants). Findings: {campaign.n_findings} unique "
        + (
            "(combination, root seed) pairs flagged by the oracle (a regression model: outputs are compared)."
            if campaign.corpus.regression
            else "(combination, true label, prediction) triples flagged by the oracle."
        ),
    ]
    lines += _failures(campaign, state)
    if exports:
        f, g = exports["findings"], exports["grown"]
        surviving = (
            "findings not re-checked (the disagreement oracle needs the other models)"
            if f["surviving_uint8"] is None
            else f"{f['surviving_uint8']} of {f['total']} findings reproduce from their uint8 PNG "
            f"({f['surviving_uint8'] / max(f['total'], 1):.0%})"
        )
        lines += [
            "",
            f"After rounding to uint8: {surviving}; "
            f"{g['mutants_keeping_combination_uint8']} of {g['mutants']} kept mutants keep their "
            f"combination; IDC of the rounded grown set {g['idc_uint8']:.1%}.",
        ]
    lines += [
        "",
        "![IDC against execs](idc_vs_execs.png)",
        "",
        "## Which mutations raise IDC most",
        "",
        "IDC gain in percentage points (pp) of the combinations. A kept mutant is credited to the last "
        "mutator of its chain, a combination to the kept mutant that reached it first (seeds before them), "
        "and gains are marginal: what a mutator added given the coverage reached "
        "before its turn (mutators take turns in a shuffled order). valid = inside the validity bounds; "
        "findings = unique "
        + ("(combination, root seed)" if campaign.corpus.regression else "(combination, label, prediction)")
        + " misbehaviours.",
        "",
        "| mutator | execs | valid | kept (new combinations) | findings | seconds | IDC gain | per 1,000 execs "
        "| per second | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['mutator']}` | {r['execs']} | {r['valid']} | {r['kept']} | {r['findings']} | "
            f"{r['seconds']:.1f} | {100 * r['idc_gain']:+.2f} pp | {100 * r['idc_gain_per_1000_execs']:+.2f} pp | "
            f"{100 * r['idc_gain_per_second']:+.2f} pp | {r['errors']} |"
        )
    errors = [r for r in rows if r["last_error"]]
    if errors:
        lines += ["", "Mutator errors (the campaign went on):", ""]
        lines += [f"- `{r['mutator']}`: {r['errors']} failed batches, last: {r['last_error']}" for r in errors]
    lines += ["", "![IDC gain per mutator](mutators.png)"]
    lines += _change_section(campaign, credit)
    lines += _findings_section(campaign, folder)
    if "examples" in plots:
        lines += ["", "## Examples", "", "![Mutants beside their seeds](examples.png)"]
    md = "\n".join(lines) + "\n"
    atomic_text(folder / "report.md", md)
    atomic_text(folder / "report.html", to_html(md, folder))
    return folder / "report.md"


def _change_section(campaign: Campaign, credit: list[dict]) -> list[str]:
    """Per mutator: its kept inputs, the IDC they gained, how far they moved from their seeds, and the gain
    per unit of that change (``credit``: idcgen/fuzz/credit.py), best gain per unit of L-inf first."""
    rows = [r for r in credit if r["kept_inputs"] or r["mutator"] in campaign.mutator_stats]
    if not rows:
        return []
    rows.sort(key=lambda r: (r["idc_gained_pp_per_linf"] is None, -(r["idc_gained_pp_per_linf"] or 0.0), r["mutator"]))
    out = [
        "",
        "### IDC gained for the change it makes",
        "",
        "Kept inputs: the corpus entries whose chain ends with the mutator. IDC gained: the combinations first "
        "reached (in the order entries joined the corpus, seeds first) by its kept inputs, in pp of all "
        "combinations; the seeds' IDC and every mutator's gain add up to the grown set's. L2 and L-inf: "
        "distance of each kept input from its root seed over every value, in widths of the value range "
        "(1 = the whole range), median over the mutator's kept inputs. Per unit of L-inf: the gain over that "
        "median, so a mutator that buys coverage with small changes ranks above one that buys as much with "
        "large ones.",
        "",
        "| mutator | kept inputs | IDC gained | median L2 | median L-inf | IDC gained per unit of median L-inf |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        l2 = "-" if r["median_l2"] is None else f"{r['median_l2']:.3g}"
        linf = "-" if r["median_linf"] is None else f"{r['median_linf']:.3g}"
        per = "-" if r["idc_gained_pp_per_linf"] is None else f"{r['idc_gained_pp_per_linf']:+.3g} pp"
        out.append(f"| `{r['mutator']}` | {r['kept_inputs']} | {r['idc_gained_pp']:+.2f} pp | {l2} | {linf} | {per} |")
    return out


_PHASE_NAMES = {"mutate": "mutation", "model": "model", "checks": "checks", "record": "recording"}


def phase_line(state: dict) -> list[str]:
    """Where the steps' time went, in shares of it (docs/design.md, "Where a step's time goes")."""
    spent = phase_seconds(state)
    total = sum(spent.values())
    if total <= 0:  # no step yet, or a campaign of an idcgen that did not time them
        return []
    shares = ", ".join(f"{_PHASE_NAMES[p]} {spent[p] / total:.0%}" for p in PHASES)
    return [
        f"- the steps' time: {shares} (mutation: with the passes attacks and gradient mutators make through the "
        "model; model: the forward pass and features; checks: validity, coverage, oracle)"
    ]


def _failures(campaign: Campaign, state: dict) -> list[str]:
    """The failures' rate, variety and distance from their seeds."""
    found = campaign.findings()
    if not found:
        return []
    q = summary(
        {k: v for k, v in found.items() if k in ("label", "prediction", "combination", "l0", "l2", "linf", "ssim")},
        int(state["execs"]),
        float(state["elapsed_seconds"]),
    )
    rate = "" if q["per_1000_execs"] is None else f"{q['per_1000_execs']:.1f} per 1,000 execs, "
    per_minute = "" if q["per_minute"] is None else f"{q['per_minute']:.0f} per minute; "
    rounding = (
        "mutants were rounded to uint8 before they ran, so every finding reproduces from its PNG"
        if campaign.settings.rounding
        else "mutants ran unrounded (float seeds, or rounding turned off)"
    )
    variety = f"{q['unique_pairs']} distinct (true, predicted) pairs"
    if campaign.corpus.regression:  # no classes: how far the outputs moved from their seeds' instead
        moved = np.abs(np.asarray(found["prediction"], np.float64) - found["root_prediction"])
        variety = f"outputs moved from their seeds' by {moved.mean():.3g} on average (largest {moved.max():.3g})"
    out = [
        "",
        "## Failures",
        "",
        f"{q['findings']} findings: {rate}{per_minute}{variety}, "
        f"{q['distinct_combinations']} distinct IDC combinations; {rounding}. The oracle flagged "
        f"{campaign.flagged} valid mutants in all ({1000 * campaign.flagged / max(state['execs'], 1):.1f} per 1,000 "
        "execs) before findings were made unique.",
        "",
    ]
    out += _faults_lines(campaign)
    if "l2" in found:
        out += [
            "Distance to the root seed (mean): "
            f"L0 {q['mean_l0']:.1%} of pixels, L2 {q['mean_l2']:.3g}, L-inf {q['mean_linf']:.3g}, "
            f"SSIM {q['mean_ssim']:.3f} (1 = identical)."
        ]
    return out


def _faults_lines(campaign: Campaign) -> list[str]:
    """Distinct faults among the findings (idcgen/faults.py), beside findings and pairs."""
    from .faults import campaign_faults

    faults = campaign_faults(campaign)
    if faults is None:
        return []
    pairs = "" if campaign.corpus.regression else f"{faults.pairs} (true, predicted) pairs; "
    return [f"Distinct faults: {faults.count} among the {len(faults.fault)} findings ({pairs}{faults.method}).", ""]


def _findings_section(campaign: Campaign, folder: Path) -> list[str]:
    """The findings per mutator, and a sheet of findings beside their seeds."""
    rows = findings_by_mutator(campaign)
    if not rows:
        return []
    regression = campaign.corpus.regression
    head = (
        "| mutator | findings | execs | per 1,000 execs | median output change | largest | median L-inf | median SSIM |"
        if regression
        else "| mutator | findings | execs | per 1,000 execs | (true, predicted) pairs | median L-inf | median SSIM |"
    )
    out = [
        "",
        "## Findings by mutator",
        "",
        "A finding is credited to the last mutator of its chain"
        + (" (output change: |mutant's output - its root seed's|)." if regression else "."),
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in rows:
        middle = f"{r['median_output_change']:.3g} | {r['max_output_change']:.3g}" if regression else f"{r['pairs']}"
        tail = f"{r['median_linf']:.3g} | {r['median_ssim']:.3f}" if "median_linf" in r else "- | -"
        out.append(
            f"| `{r['mutator']}` | {r['findings']} | {r['execs']} | {r['per_1000_execs']:.1f} | {middle} | {tail} |"
        )
    if _findings_figure(campaign, folder / "findings.png"):
        legend = (
            "arrows from the bottom centre: label blue, seed's output green, mutant's output red, tilted by "
            "the output in radians (positive to the right)"
            if regression
            else "the seed's prediction in green, the mutant's in red, the true class in blue"
        )
        out += [
            "",
            f"Findings (seed left, mutant right; {legend}). Every finding is drawn this way in `exports/findings/`.",
            "",
            "![Findings beside their seeds](findings.png)",
        ]
    return out


#: the settings this report tells in its own words, or that are no choice of the user's; any other (a campaign
#: option added later) is listed by :func:`_other_settings` when it differs from its default
_TOLD = {
    "budget",
    "mutators",
    "oracle",
    "scheduler",
    "batch_size",
    "random_state",
    "value_range",
    "validity",
    "guide",
    "measure",
    "layer",
    "m",
    "task",
    "input_shape",
    "input_convention",
    "storage",
    "rounding",
    "measure_specs",
    "sources",
    "parallel",
}


def _other_settings(settings) -> list[str]:
    """One line naming the settings not told elsewhere in the report that differ from their defaults (none: no
    line), so that a new campaign option is shown without a change here."""
    changed = [
        f"{f.name.replace('_', ' ')} {getattr(settings, f.name)}"
        for f in dataclasses.fields(settings)
        if f.name not in _TOLD and getattr(settings, f.name) != f.default
    ]
    return [f"- settings: {'; '.join(changed)}"] if changed else []


def _validity_text(settings) -> str:
    from .fuzz.mutators import make_mutator

    v = settings.validity
    return Validity(alpha=v.alpha, beta=v.beta, enabled=v.enabled).describe(
        [make_mutator(spec) for spec in settings.mutators]
    )

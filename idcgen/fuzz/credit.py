"""What each mutator bought: the IDC it gained, and how far its kept inputs moved from their seeds.

    rows = mutator_credit(campaign)   # one dict per mutator, in the order of campaign.mutator_stats

Definitions (docs/design.md, "IDC gained per unit of change"):

- A *kept input* of mutator M is a corpus entry that is not a seed and whose chain ends with M (the last
  mutator of its chain made it).
- The *IDC gained* by M is the number of combinations whose first entry in the corpus (in the order the
  entries joined it: the seeds first, then the kept mutants step by step) is a kept input of M, divided by
  all combinations. The gains of all mutators plus the seeds' IDC add up to the grown set's IDC. Guided by
  IDC, every kept mutant reaches a combination nothing reached before it, so M's gain is its kept inputs over
  the combinations; guided by another criterion, or by none, a kept mutant may reach nothing new and gains
  nothing.
- The *change* of a kept input: its L2 and L-inf distance from its root seed (over every value, as
  :func:`idcgen.quality.distances`), divided by the width of the value range, so that [0, 1] and [0, 255]
  inputs give the same figures. The medians are over M's kept inputs.
- *IDC gained per unit of median L-inf*: the gain in percentage points over M's median L-inf, i.e. the
  points M would buy if its inputs' median change were the whole value range. Undefined (None) when M kept
  nothing or its median L-inf is 0.

numpy only.
"""

from __future__ import annotations

import csv
import io

import numpy as np

#: inputs compared at a time
_BLOCK = 512

#: the columns of one row, in the order the exports write them
COLUMNS = (
    "mutator",
    "kept_inputs",
    "idc_gained",
    "idc_gained_pp",
    "median_l2",
    "median_linf",
    "idc_gained_pp_per_linf",
)


def first_reached(combination: np.ndarray) -> np.ndarray:
    """(n,) bool: whether each entry is the first, in order, to hold its combination."""
    combination = np.asarray(combination)
    mask = np.zeros(len(combination), bool)
    if len(combination):
        _, first = np.unique(combination, return_index=True)
        mask[first] = True
    return mask


def kept_changes(x: np.ndarray, seeds: np.ndarray, value_range) -> tuple[np.ndarray, np.ndarray]:
    """(l2, linf) of each input from its seed, over every value, in widths of the value range."""
    low, high = (float(v) for v in value_range)
    n = len(x)
    l2, linf = np.zeros(n), np.zeros(n)
    for start in range(0, n, _BLOCK):  # float64 copies of a block at a time, whatever the corpus' size
        part = slice(start, start + _BLOCK)
        a, b = np.asarray(x[part], np.float64), np.asarray(seeds[part], np.float64)
        diff = np.abs(a.reshape(len(a), -1) - b.reshape(len(b), -1))
        l2[part], linf[part] = np.sqrt(np.einsum("ij,ij->i", diff, diff)), diff.max(axis=1)
    return l2 / (high - low), linf / (high - low)


def _changes(x: np.ndarray, ids: np.ndarray, roots: np.ndarray, value_range) -> tuple[np.ndarray, np.ndarray]:
    """kept_changes of the entries ``ids`` against their ``roots``, gathered a block at a time."""
    parts = [
        kept_changes(x[ids[k : k + _BLOCK]], x[roots[k : k + _BLOCK]], value_range) for k in range(0, len(ids), _BLOCK)
    ]
    if not parts:
        return np.zeros(0), np.zeros(0)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def mutator_credit(campaign) -> list[dict]:
    """One row per mutator (those of the campaign's settings, then any other a chain ends with): see the
    module docstring for each column. ``idc_gained`` is a share of the combinations, ``idc_gained_pp`` the
    same in percentage points; the medians are None where the mutator kept nothing."""
    corpus, total = campaign.corpus, campaign.tracker.total
    mutant = corpus.parent >= 0
    last = np.array([chain[-1] if chain else "" for chain in corpus.chains], dtype=object)
    new = first_reached(corpus.combination) & mutant
    names = list(campaign.mutator_stats)
    names += sorted(set(last[mutant].tolist()) - set(names))
    x = corpus.x
    rows = []
    for name in names:
        ids = np.flatnonzero(mutant & (last == name))
        gained = int((new & (last == name)).sum()) / total if total else 0.0
        l2, linf = _changes(x, ids, corpus.root[ids], campaign.value_range)
        median_l2 = float(np.median(l2)) if len(ids) else None
        median_linf = float(np.median(linf)) if len(ids) else None
        rows.append(
            {
                "mutator": name,
                "kept_inputs": len(ids),
                "idc_gained": gained,
                "idc_gained_pp": 100 * gained,
                "median_l2": median_l2,
                "median_linf": median_linf,
                "idc_gained_pp_per_linf": 100 * gained / median_linf if median_linf else None,
            }
        )
    return rows


def credit_csv(rows: list[dict]) -> str:
    """The rows as CSV text (empty cells for None; floats to 6 significant digits)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow(["" if r[k] is None else f"{r[k]:.6g}" if isinstance(r[k], float) else r[k] for k in COLUMNS])
    return out.getvalue()

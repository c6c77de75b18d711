"""Subset-row cuts on the time-indexed network's paths, measured before a pricing for them.

A path of :class:`~slolab.models.sa_time_index.TimeIndexedMaster` is a whole plan that may
repeat requests; ``count_rP`` is how many of its batches hold ``r``. For three requests ``C``
the subset-row inequality (Jepsen, Petersen, Spoorendonk, Pisinger 2008) is

    sum_P floor(count_CP / 2) lam_P <= 1,     count_CP = sum_(r in C) count_rP

the Chvatal-Gomory rounding of the three request rows with multipliers 1/2: every ``lam``
of the master is nonnegative, so ``sum_P floor(count_CP / 2) lam_P <= sum_P (count_CP / 2)
lam_P = 3 / 2``, and the left side is an integer at every integral point, so at most 1. On
the plans it is simpler still: a plan is one path with ``lam_P = 1`` and ``count_CP = 3``.

The cuts are not in the bound: pricing with their duals needs, per cut, the parity of the
path's visits to ``C`` in the programme's labels (a cut's dual is paid at every second
visit), which the programmes of :mod:`slolab.models.sa_ti_pricing` do not carry, and a
pricing that ignores them undercuts the cut LP. :func:`subset_row_lift` measures what they
could give: the LP over the columns a master already holds, with the most violated cuts
added round after round. That value is an upper estimate of the LP with the cuts over every
path (which has more columns), never a bound (docs/sa_ordering.md Sec. 6, "Subset-row cuts,
measured").
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SubsetRowLift", "path_counts", "subset_row_lift", "subset_row_violations"]

#: A cut is violated when its left side exceeds 1 by more than this.
VIOLATION_TOL = 1e-6


def path_counts(paths: list[tuple[Any, ...]], n: int) -> np.ndarray:
    """``count_rP``: how many batches of each path hold each of the ``n`` requests
    (``(len(paths), n)``)."""
    counts = np.zeros((len(paths), n), dtype=np.int64)
    for i, path in enumerate(paths):
        for col in path:
            counts[i, list(col.members)] += 1
    return counts


def _triples(n: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(n), 3)), dtype=np.int64).reshape(-1, 3)


def subset_row_violations(
    counts: np.ndarray, x: np.ndarray, most: int, tol: float = VIOLATION_TOL
) -> list[tuple[tuple[int, int, int], float]]:
    """The ``most`` most violated subset-row cuts at the LP point ``x`` over paths with visit
    counts ``counts``: ``(C, sum_P floor(count_CP / 2) x_P - 1)`` with the violation above
    ``tol``, largest first (ties to the smaller triple)."""
    counts = np.asarray(counts)
    x = np.asarray(x, dtype=float)
    if counts.shape[0] != len(x):
        raise ValueError(f"{counts.shape[0]} paths but {len(x)} values")
    used = x > 0
    triples = _triples(counts.shape[1])
    if not used.any() or not len(triples):
        return []
    k = counts[used]
    visits = k[:, triples[:, 0]] + k[:, triples[:, 1]] + k[:, triples[:, 2]]
    violation = x[used] @ (visits // 2) - 1.0
    order = np.lexsort((np.arange(len(triples)), -violation))
    return [
        ((int(triples[t, 0]), int(triples[t, 1]), int(triples[t, 2])), float(violation[t]))
        for t in order[:most]
        if violation[t] > tol
    ]


@dataclass(slots=True)
class SubsetRowLift:
    """What :func:`subset_row_lift` measured: the restricted LP's value before any cut and
    after each round (``values``), the cuts added, and at the first round how many triples
    were violated and by how much at most."""

    values: list[float] = field(default_factory=list)
    cuts: list[tuple[int, int, int]] = field(default_factory=list)
    violated: int = 0
    max_violation: float = 0.0
    runtime_s: float = 0.0


def subset_row_lift(
    costs: np.ndarray, counts: np.ndarray, rounds: int, most: int, time_limit: float
) -> SubsetRowLift:
    """The LP ``min sum cost_P lam_P`` over the given paths (each request covered once, one
    path in all), then with up to ``most`` most violated subset-row cuts added per round for
    ``rounds`` rounds or ``time_limit`` seconds (HiGHS, one thread). An upper estimate of the
    LP with the cuts over every path, not a bound (module docstring)."""
    import highspy

    if rounds < 0 or most < 1:
        raise ValueError(f"rounds must be >= 0 and most >= 1, got {rounds} and {most}")
    start = time.perf_counter()
    counts = np.asarray(counts, dtype=np.int64)
    n_paths, n = counts.shape
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("threads", 1)
    ones = np.ones(n + 1)
    matrix = np.hstack([counts, np.ones((n_paths, 1), dtype=np.int64)])
    rows, cols = np.nonzero(matrix.T)
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]
    highs.addRows(n + 1, ones, ones.copy(), 0, np.zeros(0, np.int32), np.zeros(0, np.int32), [])
    highs.addCols(
        n_paths,
        np.asarray(costs, dtype=float),
        np.zeros(n_paths),
        np.full(n_paths, np.inf),
        len(rows),
        np.searchsorted(cols, np.arange(n_paths)).astype(np.int32),
        rows.astype(np.int32),
        matrix[cols, rows].astype(float),
    )
    result = SubsetRowLift()

    def run() -> bool:
        left = time_limit - (time.perf_counter() - start)
        if left <= 0:
            return False
        highs.setOptionValue("time_limit", left)
        highs.run()
        if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return False
        result.values.append(float(highs.getInfo().objective_function_value))
        return True

    if not run():
        raise RuntimeError("subset_row_lift: the LP without cuts was not solved in time")
    for k in range(rounds):
        x = np.asarray(highs.getSolution().col_value, dtype=float)
        # the first round lists every violated triple (the counts reported), then takes the most
        found = subset_row_violations(counts, x, len(_triples(n)) if k == 0 else most)
        if k == 0:
            result.violated = len(found)
            result.max_violation = found[0][1] if found else 0.0
            found = found[:most]
        if not found:
            break
        for triple, _ in found:
            coef = counts[:, list(triple)].sum(axis=1) // 2
            nz = np.flatnonzero(coef)
            highs.addRow(-np.inf, 1.0, len(nz), nz.astype(np.int32), coef[nz].astype(float))
            result.cuts.append(triple)
        if not run():
            break
    result.runtime_s = time.perf_counter() - start
    return result

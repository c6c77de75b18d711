"""Burst-capacity rows for the ``tdg-horizon`` bounds: the most first-token gain a set of
requests can earn alone, by serial batching with a setup per iteration.

For a set ``S`` of requests with finite first-token deadlines, ``F(S)`` bounds ``sum_(r in S)
w1_r [first token of r on time]`` in every engine schedule (docs/proserve.md, "Burst-capacity
rows", with the proof). Relaxing every release in ``S`` to the earliest, dropping every other
request's work and every decode token, and moving each on-time prompt's chunks into the
iteration that completes it (which never delays an iteration's end under an affine timing
model with non-negative coefficients), what remains is single-machine *serial batching*: a
batch (an iteration) lasts ``t_c`` plus the prompt work ``P_r = a_tok p_r + a_seq`` of its
members, each member completes at the batch's end, and the on-time members' weights are
maximized (Brucker and Kovalyov's ``1 | s-batch | sum w_j U_j``, maximized as on-time weight).
Some optimal schedule takes the on-time requests in deadline order in consecutive batches, so
a dynamic programme over the requests in deadline order, the on-time weight so far (in
integral units, weights rounded *up* when they share no unit) and the first member of the
open batch gives ``F(S)`` exactly (or an upper bound of it with rounded weights)
(:func:`burst_capacity`).

The sets are the *interval sets* ``S(s, e) = {r : a_r >= A_s, d_r1 <= D_e}`` over the distinct
arrivals ``A_s`` and first deadlines ``D_e`` of the window, the sets the interval rows (L4) of
the ``chain`` family range over: one pass of the programme per arrival class gives ``F`` for
every deadline class at once (:func:`burst_table`). The rows ``sum_(r in S) w1_r g1_r <=
F(S)`` are separated from a cumulative table of the relaxation's first-token gains
(:meth:`BurstTable.violated`). Each row's term is per request (its first-token indicator), so
a column's coefficient in it depends only on whether the column's first token is on time:
column pricing stays exact.

References
----------
P. Brucker and M. Y. Kovalyov, "Single machine batch scheduling to minimize the weighted
number of late jobs", Mathematical Methods of Operations Research 43 (1996): the deadline
order of on-time jobs in consecutive batches and the dynamic programme over it (Sec. 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BURST_MAX_MEMBERS", "BurstTable", "burst_capacity", "burst_table", "weight_units"]

#: Requests per arrival class the programme follows exactly; past them a set's capacity is
#: the capacity of its first members plus the weight of the rest (valid, rarely binding).
BURST_MAX_MEMBERS = 128
#: Slack added to every deadline (s) against the rounding of sums of times.
BURST_TOL_S = 1e-7
#: A row enters when the relaxation's first-token gain of its set exceeds ``F`` by this.
BURST_CUT_TOL = 1e-6
#: Units per the least weight when the weights share no common unit (weights rounded up).
UNIT_SPLIT = 16


def weight_units(weights: np.ndarray) -> tuple[np.ndarray, float]:
    """Integral weights ``u_r`` and a unit ``delta`` with ``u_r delta >= w_r``: exact (``u_r
    delta = w_r`` up to 1e-9 relative) when every weight is a whole multiple of the least one
    (the ProServe weights ``w_p`` and ``2 w_p``), else each rounded up to a sixteenth of the
    least weight."""
    w = np.asarray(weights, dtype=float)
    if not len(w):
        return np.zeros(0, dtype=np.int64), 1.0
    unit = float(w.min())
    if unit <= 0:
        raise ValueError(f"burst weights must be > 0, got {unit}")
    ratio = w / unit
    if np.all(np.abs(ratio - np.round(ratio)) <= 1e-9 * ratio):
        return np.round(ratio).astype(np.int64), unit
    unit /= UNIT_SPLIT
    return np.ceil(w / unit - 1e-9).astype(np.int64), unit


def _sweep(
    release_s: float,
    deadline_s: np.ndarray,
    work_s: np.ndarray,
    units: np.ndarray,
    t_c: float,
) -> np.ndarray:
    """The serial-batching programme over requests already in deadline order, all released at
    ``release_s``: after each request ``i``, the most on-time weight (units) of the first ``i +
    1`` requests. ``time[W, k]``: the least end of the open batch over the on-time choices of
    weight ``W`` whose open batch starts with request ``k`` (its deadline binds the batch: the
    later members' deadlines are no earlier)."""
    m = len(deadline_s)
    top = int(units.sum())
    time = np.full((top + 1, m), math.inf)
    closed = np.full(top + 1, math.inf)  # least end of the last batch, per weight
    closed[0] = release_s
    best = np.zeros(m, dtype=np.int64)
    reach = 0
    for i in range(m):
        u, p, d = int(units[i]), float(work_s[i]), float(deadline_s[i])
        # join an open batch led by k: its end grows by p and must stay by d_k
        joined = time[: top + 1 - u, :i] + p
        joined[joined > deadline_s[None, :i]] = math.inf
        # or open a new batch: one more setup, ending by d
        opened = closed[: top + 1 - u] + t_c + p
        opened[opened > d] = math.inf
        time[u:, :i] = np.minimum(time[u:, :i], joined)
        time[u:, i] = opened
        closed = np.minimum(closed, time.min(axis=1))
        finite = np.flatnonzero(np.isfinite(closed))
        reach = int(finite[-1]) if len(finite) else 0
        best[i] = reach
    return best


def burst_capacity(
    release_s: float,
    deadline_s: np.ndarray,
    work_s: np.ndarray,
    weights: np.ndarray,
    t_c: float,
) -> float:
    """``F(S)``: the most first-token weight of one set of requests alone, all released at
    ``release_s`` (the earliest arrival of the set, or earlier), request ``r`` on time when
    its batch ends by ``deadline_s[r]``, a batch lasting ``t_c`` plus its members'
    ``work_s`` (exact for weights sharing a unit, else an upper bound; see the module
    docstring)."""
    deadline_s = np.asarray(deadline_s, dtype=float)
    if not len(deadline_s):
        return 0.0
    units, unit = weight_units(np.asarray(weights, dtype=float))
    order = np.lexsort((np.arange(len(deadline_s)), deadline_s))
    best = _sweep(
        float(release_s),
        deadline_s[order] + BURST_TOL_S,
        np.asarray(work_s, dtype=float)[order],
        units[order],
        t_c,
    )
    return float(best[-1]) * unit


@dataclass(frozen=True, slots=True)
class BurstTable:
    """``F`` of every interval set of a window (:func:`burst_table`).

    ``requests``: the window's requests in the sets (finite deadline, positive first-token
    gain, a first token that can be on time); per such request (same order) its arrival class
    ``arrival_class`` (index into ``starts``, the distinct arrivals) and deadline class
    ``deadline_class`` (index into ``ends``, the distinct first deadlines) and its weight
    ``weights`` (``w1_r``); ``capacity[s, e]``: ``F`` of ``S(s, e) = {arrival class >= s,
    deadline class <= e}`` (gain units, with a 1e-9 relative margin)."""

    requests: np.ndarray
    arrival_class: np.ndarray
    deadline_class: np.ndarray
    weights: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    capacity: np.ndarray

    def gains(self, first_gain: np.ndarray) -> np.ndarray:
        """``[s, e]``: the sum of ``first_gain`` (per request of :attr:`requests`, e.g. ``w1_r
        g1_r`` at a relaxation's point) over ``S(s, e)``."""
        mass = np.zeros((len(self.starts), len(self.ends)))
        np.add.at(mass, (self.arrival_class, self.deadline_class), first_gain)
        return np.cumsum(np.cumsum(mass[::-1], axis=0)[::-1], axis=1)

    def violated(self, first_gain: np.ndarray, most: int) -> list[tuple[np.ndarray, float]]:
        """The rows ``sum_(r in S) w1_r g1_r <= F(S)`` most violated at ``first_gain`` (per
        request of :attr:`requests`, the point's ``w1_r g1_r``), at most ``most``, most
        violated first, as (mask over :attr:`requests`, ``F(S)``)."""
        if not len(self.requests):
            return []
        excess = self.gains(first_gain) - self.capacity
        flat = np.flatnonzero(excess > BURST_CUT_TOL)
        if not len(flat):
            return []
        flat = flat[np.argsort(-excess.flat[flat], kind="stable")[:most]]
        rows = []
        for f in flat:
            s, e = divmod(int(f), len(self.ends))
            mask = (self.arrival_class >= s) & (self.deadline_class <= e)
            rows.append((mask, float(self.capacity[s, e])))
        return rows


def burst_table(
    arrival_s: np.ndarray,
    deadline_s: np.ndarray,
    work_s: np.ndarray,
    weights: np.ndarray,
    t_c: float,
    earliest_s: np.ndarray,
    max_members: int = BURST_MAX_MEMBERS,
) -> BurstTable:
    """``F`` of every interval set ``S(s, e)`` of a window: per request its arrival, first
    deadline (plus the on-time tolerance: the time its first token must come by), least prompt
    work, first-token weight and earliest first token (arrival plus ``t_c`` plus its work);
    requests with an infinite deadline, no weight or no first token that can be on time are
    left out (their first-token gain is constant in every schedule). One pass of the
    programme per arrival class ``s``, over the requests arriving at or after ``A_s`` in
    deadline order, released at ``A_s``; beyond ``max_members`` of them a set's ``F`` is that
    of its first ``max_members`` plus the weight of the others."""
    arrival_s = np.asarray(arrival_s, dtype=float)
    deadline_s = np.asarray(deadline_s, dtype=float)
    keep = (
        np.isfinite(deadline_s)
        & (np.asarray(weights) > 0)
        & (np.asarray(earliest_s) <= deadline_s + BURST_TOL_S)
    )
    requests = np.flatnonzero(keep)
    a, d = arrival_s[requests], deadline_s[requests]
    w, p = np.asarray(weights, dtype=float)[requests], np.asarray(work_s, dtype=float)[requests]
    starts, a_cls = np.unique(a, return_inverse=True)
    ends, d_cls = np.unique(d, return_inverse=True)
    capacity = np.full((len(starts), len(ends)), math.inf)
    units, unit = weight_units(w)
    order = np.lexsort((np.arange(len(d)), d))
    for s in range(len(starts)):
        mine = order[a_cls[order] >= s]
        head = mine[:max_members]
        best = _sweep(float(starts[s]), d[head] + BURST_TOL_S, p[head], units[head], t_c) * unit
        rest = np.concatenate([[0.0], np.cumsum(w[mine[max_members:]])])
        # F of S(s, e): the best over the members with deadline class <= e
        value = np.concatenate([best, best[-1] + rest[1:]]) if len(mine) else np.zeros(0)
        cls = d_cls[mine]
        last = np.searchsorted(cls, np.arange(len(ends)), side="right") - 1
        got = np.where(last >= 0, value[np.maximum(last, 0)] if len(mine) else 0.0, 0.0)
        capacity[s] = got * (1 + 1e-9) + 1e-9
    return BurstTable(
        requests=requests,
        arrival_class=a_cls,
        deadline_class=d_cls,
        weights=w,
        starts=starts,
        ends=ends,
        capacity=capacity,
    )

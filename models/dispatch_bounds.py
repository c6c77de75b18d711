"""An upper bound on the dispatch-scale objective that scales to trace windows (``dispatch-bound``).

The exact models of :mod:`slolab.models.dispatch_scale` index every iteration of every worker,
so they stop at a handful of requests, and beyond that their LP bound is the ideal gain (every
request that can meet its SLO alone, at no cost). This module relaxes the engine's own
semantics instead, into a time-bucketed LP over work and worker availability whose size grows
with requests x buckets, not with tokens x iterations:

- each met request's work (its prefill's and its decode tokens' marginal iteration terms)
  is done between its tokens' release times (arrival plus the shortest iterations before
  them) and their deadlines, cumulatively per bucket;
- in each bucket the work done, plus the per-iteration overhead it implies, fits in the
  worker-seconds that are ready and not yet departed;
- initial workers are ready from 0 until they depart (their availability never rises);
  every rise of the new workers' availability is a switch-on paying its start-up delay;
- the cost is at least the available worker-seconds plus the start-up delays;
- on an interval from an arrival to a first-token deadline, the work due in it of the requests
  arriving in it fits in the worker-seconds that can be ready then (rows added in rounds
  where the LP's solution breaks them, :func:`_interval_rows`).

Maximizing ``(1/n) sum_r m_r - lambda C`` over it (``m_r`` binary, or continuous for the LP)
bounds the objective of every schedule the engine can run on the window from above; the proof
is in docs/hyperflexis.md ("Intervals at trace scale"). The proof holds on any bucket grid, so
the LP is solved on a coarse grid first and then on the fine one, the least value kept; each
value is read off HiGHS's duals by weak duality over the box of the (bounded) columns
(:func:`safe_dual_bound`), so it does not rest on the solver's tolerances.

References
----------
HyperFlexis, Sec. 3 (Eqs. 1-4) and Sec. 6 (start-up delays).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.dispatch_scale import PROBLEM, ScaleWindow
from slolab.sim.metrics import ON_TIME_TOLERANCE_S
from slolab.solvers.backend import Backend
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.registry import register_model

__all__ = [
    "DispatchBound",
    "LevelSolve",
    "RelaxationBound",
    "ideal_bound",
    "relaxation_bound",
    "safe_dual_bound",
]

logger = logging.getLogger("slolab")

#: Default number of time buckets of the relaxation.
DEFAULT_BUCKETS = 64
#: Buckets of the coarse LP solved first (the same relaxation on a coarser grid).
COARSE_BUCKETS = 16
#: Share of the time limit the coarse LP may take (the fine one takes the rest).
COARSE_SHARE = 0.25
#: Finer grids the ``bound`` method solves after the fine one, each with the time left; a
#: level that does not finish leaves the least bound of those before it.
REFINED_BUCKETS = (128, 256)
#: HiGHS LP methods accepted, and the default (interior point without crossover: the safe dual
#: bound needs no basis; benchmarks in docs/hyperflexis.md, "Solving the LP").
LP_METHODS = ("ipm", "simplex", "pdlp")
LP_METHOD = "ipm"
#: Added to every LP or MILP value reported as a bound (covers the rounding of its sums).
SAFE_MARGIN = 1e-9
#: Rounds of interval rows added to each grid's LP (:func:`_interval_rows`; 0: none), and the
#: most rows a round adds: the most violated by the LP's solution.
INTERVAL_ROUNDS = 8
INTERVAL_ROWS = 300
#: Seconds of work an interval row must be violated by to be added.
INTERVAL_VIOLATION_S = 1e-6


@dataclass(frozen=True, slots=True)
class LevelSolve:
    """One grid's LP solve: its size, how HiGHS ended, the bound it gave (None: none), the
    wall time of build and solve, and the interval rows added (:func:`_interval_rows`)."""

    buckets: int
    variables: int
    constraints: int
    status: str
    bound: float | None
    runtime_s: float
    interval_rows: int = 0


@dataclass(frozen=True, slots=True)
class RelaxationBound:
    """The relaxation's answer on one window.

    Attributes
    ----------
    bound : float
        Upper bound on ``J = attainment - lambda x worker-seconds`` (the dual bound of the
        solve; the LP optimum when ``integral`` is False).
    ideal : float
        The ideal bound: the share of requests that meet their SLO alone on a ready worker.
    met : float
        Requests met in the relaxation's best solution.
    cost_server_s : float
        Worker-seconds of that solution.
    status : str
        ``optimal`` (the fine LP solved), ``coarse`` (only the coarse one) or ``time limit``
        (neither: the bound is the ideal one).
    integral : bool
        Whether ``m_r`` were binary.
    buckets, variables, constraints : int
        Size of the LP whose solve gave the bound.
    runtime_s : float
        Wall time of build and solve.
    levels : tuple of LevelSolve
        Each grid's solve, coarse first.
    """

    bound: float
    ideal: float
    met: float
    cost_server_s: float
    status: str
    integral: bool
    buckets: int
    variables: int
    constraints: int
    runtime_s: float
    levels: tuple[LevelSolve, ...] = ()


def ideal_bound(data: ScaleWindow) -> float:
    """Share of requests that meet their SLO alone on a worker ready at their arrival (the
    bound the exact MILP's relaxation gives on large windows)."""
    return sum(1 for r in range(data.n) if data.can_meet(r)) / data.n


def _request_profile(data: ScaleWindow, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(release_s, due_s, cumulative work_s)`` of request ``r``'s tokens 1..o: the earliest
    start of the iteration emitting each token, its deadline (plus the on-time tolerance) and
    the marginal work of tokens 1..k."""
    v = data.view
    p, o = int(data.prompt[r]), int(data.output[r])
    a = float(data.arrival_s[r])
    k = np.arange(2, o + 1, dtype=float)
    decode_work = v.decode_token_s + v.kv_s * (p + k - 1)
    prefill_work = data.prefill_part_s(r)
    shortest_prefill = v.any_s + v.prefill_s + prefill_work
    shortest_decode = v.any_s + v.decode_s + decode_work
    release = np.empty(o)
    release[0] = a
    if o > 1:
        release[1:] = (
            a + shortest_prefill + np.concatenate(([0.0], np.cumsum(shortest_decode)[:-1]))
        )
    tokens = np.arange(1, o + 1, dtype=float)
    due = a + float(data.ttft_s[r]) + (tokens - 1) * float(data.tpot_s[r]) + ON_TIME_TOLERANCE_S
    work = np.cumsum(np.concatenate(([prefill_work], decode_work)))
    return release, due, work


def _boundaries(data: ScaleWindow, profiles: list[Any], buckets: int) -> np.ndarray:
    """Bucket ends: quantiles of the arrivals and first-token deadlines (where the window is
    dense) and an even grid to the last deadline, with the start-up delay as one end."""
    meets = [r for r in range(data.n) if data.can_meet(r)]
    last = max(float(profiles[r][1][-1]) for r in meets)
    marks = np.concatenate(
        [data.arrival_s[meets], [float(profiles[r][1][0]) for r in meets]]
    ).astype(float)
    half = max(buckets // 2, 1)
    dense = np.quantile(marks, np.linspace(0.0, 1.0, half + 1))
    even = np.linspace(0.0, last, buckets - half + 1)
    ends = np.unique(np.concatenate([dense, even, [data.startup_s, last]]))
    ends = ends[(ends > 0) & (ends <= last)]
    return np.concatenate(([0.0], ends))


@dataclass(frozen=True, slots=True)
class _Lp:
    """The relaxation on one bucket grid, as ``min cost x`` subject to
    ``row_lo <= matrix x <= row_hi`` and ``col_lo <= x <= col_hi`` (every column bounded)."""

    cost: np.ndarray
    matrix: Any
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integrality: np.ndarray
    met_cols: np.ndarray
    x0_cols: np.ndarray
    xn_cols: np.ndarray
    up_cols: np.ndarray
    length_s: np.ndarray
    startup_s: float
    ends_s: np.ndarray

    @property
    def buckets(self) -> int:
        return len(self.length_s)


def _build(data: ScaleWindow, meets: list[int], profiles: list[Any], buckets: int) -> _Lp:
    """The relaxation's LP on :func:`_boundaries` of about ``buckets`` buckets (the rows of
    docs/hyperflexis.md, "The relaxation")."""
    from scipy.sparse import coo_array

    n, n0, W = data.n, data.initial_servers, data.max_servers
    lam = data.cost_weight
    v = data.view
    overhead = v.any_s + min(v.prefill_s, v.decode_s)
    t = _boundaries(data, profiles, buckets)
    B = len(t) - 1
    length = np.diff(t)
    cols: list[str] = []
    lo: list[float] = []
    hi: list[float] = []
    cost: list[float] = []

    def var(kind: str, lower: float, upper: float, c: float) -> int:
        cols.append(kind)
        lo.append(lower)
        hi.append(upper)
        cost.append(c)
        return len(cols) - 1

    rows: list[int] = []
    colidx: list[int] = []
    vals: list[float] = []
    rlo: list[float] = []
    rhi: list[float] = []

    def row(terms: list[tuple[int, float]], lower: float, upper: float) -> None:
        i = len(rlo)
        for j, a in terms:
            rows.append(i)
            colidx.append(j)
            vals.append(a)
        rlo.append(lower)
        rhi.append(upper)

    # objective: minimize -(1/n) sum m + lambda C
    m = {r: var("m", 0.0, 1.0, -1.0 / n) for r in meets}
    X0 = [var("X0", 0.0, float(n0), lam * length[b]) for b in range(B)]
    # a new worker serves from its switch-on plus the start-up delay, at the earliest delta
    Xn = [
        var("Xn", 0.0, float(W) if t[b] >= data.startup_s - 1e-12 else 0.0, lam * length[b])
        for b in range(B)
    ]
    # U_b <= W and O_b <= W L_b hold for the schedule's values (docs: "Every column bounded")
    up = [var("up", 0.0, float(W), lam * data.startup_s) for b in range(B)]
    overhead_s = [var("O", 0.0, float(W) * length[b], 0.0) for b in range(B)]
    work_in: list[list[tuple[int, float]]] = [[] for _ in range(B)]
    for r in meets:
        release, due, work = profiles[r]
        total = float(work[-1])
        entries = np.diff(np.concatenate(([0.0], work)))
        share = overhead / max(float(entries.max()), 1e-15)
        prefill_work = float(entries[0])
        # decode entries: each in its own iteration, which pays the decode intercept
        share_dec = (
            (v.any_s + v.decode_s) / max(float(entries[1:].max()), 1e-15)
            if len(entries) > 1
            else 0.0
        )
        first = int(np.searchsorted(t[1:], release[0], side="right"))
        last = int(np.searchsorted(t[1:], due[-1], side="left"))
        last = min(last, B - 1)
        prev: int | None = None
        prev_dec: int | None = None
        for b in range(first, last + 1):
            end = t[b + 1]
            F = var("F", 0.0, total, 0.0)
            # released work: tokens whose iteration may start before the bucket's end
            rel = int(np.searchsorted(release, end, side="left"))
            dues = int(np.searchsorted(due, end, side="right"))
            rel_w = float(work[rel - 1]) if rel else 0.0
            due_w = float(work[dues - 1]) if dues else 0.0
            if b == last:
                row([(F, 1.0), (m[r], -total)], 0.0, 0.0)
            else:
                row([(F, 1.0), (m[r], -rel_w)], -math.inf, 0.0)
                row([(F, 1.0), (m[r], -due_w)], 0.0, math.inf)
            # f = F - Fprev >= 0, within the bucket with its overhead, overhead counted
            f_terms = [(F, 1.0)] + ([(prev, -1.0)] if prev is not None else [])
            row(f_terms, 0.0, math.inf)
            row([(j, a * (1.0 + share)) for j, a in f_terms] + [(m[r], -length[b])], -math.inf, 0.0)
            row([(overhead_s[b], 1.0)] + [(j, -a * share) for j, a in f_terms], 0.0, math.inf)
            if share_dec > share:
                # G: cumulative decode work, max(0, F - P m) in a schedule (the prefill's work
                # comes first); g = G - Gprev >= 0 pays the decode intercept per token entry
                G = var("G", 0.0, total - prefill_work, 0.0)
                row([(G, 1.0), (F, -1.0), (m[r], prefill_work)], 0.0, math.inf)
                row([(G, 1.0), (F, -1.0)], -math.inf, 0.0)
                if b == last:
                    row([(G, 1.0), (m[r], -(total - prefill_work))], 0.0, 0.0)
                g_terms = [(G, 1.0)] + ([(prev_dec, -1.0)] if prev_dec is not None else [])
                row(g_terms, 0.0, math.inf)
                row(
                    f_terms + [(j, a * share_dec) for j, a in g_terms] + [(m[r], -length[b])],
                    -math.inf,
                    0.0,
                )
                row(
                    [(overhead_s[b], 1.0)] + [(j, -a * share_dec) for j, a in g_terms],
                    0.0,
                    math.inf,
                )
                prev_dec = G
            work_in[b].extend(f_terms)
            prev = F
    missed_in = _missed_prompts(data, meets, t, m, var, row)
    for b in range(B):
        # work + overhead + missed prompts' work <= available worker-seconds
        row(
            work_in[b]
            + [(overhead_s[b], 1.0), (missed_in[b], 1.0), (X0[b], -length[b])]
            + [(Xn[b], -length[b])],
            -math.inf,
            0.0,
        )
        row([(X0[b], 1.0), (Xn[b], 1.0)], -math.inf, float(W))
        if b:
            row([(X0[b], 1.0), (X0[b - 1], -1.0)], -math.inf, 0.0)
        row([(up[b], 1.0), (Xn[b], -1.0)] + ([(Xn[b - 1], 1.0)] if b else []), 0.0, math.inf)
    matrix = coo_array((vals, (rows, colidx)), shape=(len(rlo), len(cols))).tocsr()
    kinds = np.zeros(len(cols), dtype=int)
    met_cols = np.fromiter(m.values(), dtype=np.int64, count=len(m))
    kinds[met_cols] = 1
    return _Lp(
        cost=np.asarray(cost),
        matrix=matrix,
        row_lo=np.asarray(rlo),
        row_hi=np.asarray(rhi),
        col_lo=np.asarray(lo),
        col_hi=np.asarray(hi),
        integrality=kinds,
        met_cols=met_cols,
        x0_cols=np.asarray(X0),
        xn_cols=np.asarray(Xn),
        up_cols=np.asarray(up),
        length_s=length,
        startup_s=data.startup_s,
        ends_s=t,
    )


def _missed_prompts(
    data: ScaleWindow,
    meets: list[int],
    t: np.ndarray,
    m: dict[int, int],
    var: Any,
    row: Any,
) -> list[int]:
    """Columns ``V_b`` (per bucket) of the prompts' work of requests that miss, which every
    schedule serving each request in full still does, after their arrivals:
    ``sum_b V_b + V_tail >= sum_r P_r (1 - m_r)`` (``m_r = 0`` for a request that cannot
    meet), ``sum_(b' <= b) V_b' <= sum_(r: a_r <= t_(b+1)) P_r (1 - m_r)``, ``V_b`` in the
    bucket's capacity row and ``V_tail`` (done after the last bucket, on workers paid for
    then) priced at ``lambda`` per second (docs/hyperflexis.md, "Missed prompts")."""
    B = len(t) - 1
    W = data.max_servers
    prompt_s = [data.prefill_part_s(r) for r in range(data.n)]
    total = math.fsum(prompt_s)
    missed = [var("V", 0.0, float(W) * (t[b + 1] - t[b]), 0.0) for b in range(B)]
    tail = var("Vtail", 0.0, total, data.cost_weight)
    met_terms = [(m[r], prompt_s[r]) for r in meets]
    row([*((j, 1.0) for j in missed), (tail, 1.0), *met_terms], total, math.inf)
    order = np.argsort(data.arrival_s, kind="stable")
    arrivals = np.asarray(data.arrival_s, dtype=float)[order]
    for b in range(B):
        arrived = order[: int(np.searchsorted(arrivals, t[b + 1], side="right"))]
        released = math.fsum(prompt_s[r] for r in arrived)
        terms = [(m[r], prompt_s[r]) for r in arrived.tolist() if r in m]
        row([*((missed[k], 1.0) for k in range(b + 1)), *terms], -math.inf, released)
    return missed


@dataclass(frozen=True, slots=True)
class _Intervals:
    """What the interval rows read of a window: the met columns of the requests that can
    meet, in arrival order, their arrivals, the candidate interval ends (the first-token
    deadlines) and each request's work due by each end (seconds, one row per request)."""

    met_cols: np.ndarray
    arrival_s: np.ndarray
    ends_s: np.ndarray
    due_work_s: np.ndarray


def _intervals(data: ScaleWindow, meets: list[int], profiles: list[Any], lp: _Lp) -> _Intervals:
    """The :class:`_Intervals` of a window (``lp`` gives the met columns, in ``meets``' order)."""
    order = sorted(range(len(meets)), key=lambda i: (float(data.arrival_s[meets[i]]), i))
    ends = np.unique([float(profiles[meets[i]][1][0]) for i in order])
    due_work = np.zeros((len(order), len(ends)))
    for row_i, i in enumerate(order):
        _, due, work = profiles[meets[i]]
        k = np.searchsorted(due, ends, side="right")
        due_work[row_i] = np.where(k > 0, work[np.maximum(k - 1, 0)], 0.0)
    return _Intervals(
        met_cols=lp.met_cols[order],
        arrival_s=np.asarray([float(data.arrival_s[meets[i]]) for i in order]),
        ends_s=ends,
        due_work_s=due_work,
    )


def _most_workers_s(
    data: ScaleWindow, start: np.ndarray | float, end: np.ndarray | float
) -> np.ndarray:
    """Worker-seconds that can be ready in ``[start, end]``: ``n0`` workers before the start-up
    delay (a switched-on worker is ready ``delta`` after its switch-on at 0 or later), ``W``
    from then on."""
    delta = data.startup_s
    before = np.clip(np.minimum(end, delta) - start, 0.0, None)
    after = np.clip(end - np.maximum(start, delta), 0.0, None)
    return data.initial_servers * before + data.max_servers * after


def _interval_rows(
    data: ScaleWindow, lp: _Lp, x: np.ndarray, table: _Intervals, most: int
) -> tuple[Any, np.ndarray] | None:
    """The interval rows most violated by the LP solution ``x`` (None: none violated).

    For an interval ``[s, e]`` with ``s`` an arrival and ``e`` a first-token deadline, every
    met request arriving at or after ``s`` does its work due by ``e`` inside ``[s, e]``, on
    workers ready then::

        sum_(r: a_r >= s) m_r omega_r(due by e)  <=  sum_(b inside [s, e]) L_b (X0_b + Xn_b)
                                                     + most workers ready on the rest of [s, e]

    where the rest is the parts of the buckets holding ``s`` and ``e`` (``n0`` workers before
    ``delta``, ``W`` after; docs/hyperflexis.md, "Interval rows"). ``s`` and ``e`` are not
    bucket ends, so the rows cut off work the grid attributes to a bucket before its
    arrival or after its deadline. Returns ``(rows, upper sides)``: the rows over the LP's
    columns, ``rows x <= upper``.
    """
    from scipy.sparse import coo_array

    t = lp.ends_s
    met = x[table.met_cols]
    # lhs[i, j]: work due by ends[j] of the requests arriving at or after starts[i]
    suffix = np.cumsum((met[:, None] * table.due_work_s)[::-1], axis=0)[::-1]
    starts, first = np.unique(table.arrival_s, return_index=True)
    lhs = suffix[first]
    ends = table.ends_s
    avail = np.concatenate(([0.0], np.cumsum(lp.length_s * (x[lp.x0_cols] + x[lp.xn_cols]))))
    # bucket holding s: t[bs] <= s < t[bs + 1]; bucket holding e: t[be] < e <= t[be + 1]
    bs = np.minimum(np.searchsorted(t, starts, side="right") - 1, lp.buckets - 1)
    be = np.clip(np.searchsorted(t, ends, side="left") - 1, 0, lp.buckets - 1)
    s, e = starts[:, None], ends[None, :]
    bs_, be_ = bs[:, None], be[None, :]
    split = be_ > bs_
    partial = np.where(
        split,
        _most_workers_s(data, s, t[bs_ + 1]) + _most_workers_s(data, t[be_], e),
        _most_workers_s(data, s, e),
    )
    inside = np.where(split, avail[be_] - avail[np.minimum(bs_ + 1, be_)], 0.0)
    violation = np.where(e > s, lhs - partial - inside, -math.inf)
    flat = np.flatnonzero(violation > INTERVAL_VIOLATION_S)
    if not len(flat):
        return None
    if len(flat) > most:
        flat = flat[np.argsort(-violation.flat[flat], kind="stable")[:most]]
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for k, cell in enumerate(flat.tolist()):
        i, j = divmod(cell, len(ends))
        due = table.due_work_s[first[i] :, j]
        nonzero = np.flatnonzero(due > 0.0)
        rows += [k] * len(nonzero)
        cols += table.met_cols[first[i] + nonzero].tolist()
        vals += due[nonzero].tolist()
        for b in range(int(bs[i]) + 1, int(be[j])):
            rows += [k, k]
            cols += [int(lp.x0_cols[b]), int(lp.xn_cols[b])]
            vals += [-float(lp.length_s[b])] * 2
    block = coo_array((vals, (rows, cols)), shape=(len(flat), lp.matrix.shape[1])).tocsr()
    return block, partial.flat[flat]


def _with_rows(lp: _Lp, block: Any, upper: np.ndarray) -> _Lp:
    """``lp`` with the rows ``block x <= upper`` added."""
    from scipy.sparse import vstack

    return dataclasses.replace(
        lp,
        matrix=vstack([lp.matrix, block]).tocsr(),
        row_lo=np.concatenate([lp.row_lo, np.full(len(upper), -math.inf)]),
        row_hi=np.concatenate([lp.row_hi, upper]),
    )


def safe_dual_bound(lp: _Lp, row_dual: np.ndarray) -> float:
    """An upper bound on the relaxation's optimum ``J`` from any row multipliers.

    For ``min c x`` over ``row_lo <= A x <= row_hi``, ``col_lo <= x <= col_hi``, every ``y``
    gives ``c x >= y+ row_lo + y- row_hi + sum_j min(d_j col_lo_j, d_j col_hi_j)`` with
    ``y+ = max(y, 0)`` on rows with a finite lower side, ``y- = min(y, 0)`` on rows with a
    finite upper side and ``d = c - A^T (y+ + y-)``: weak duality on the box, which needs
    every column bounded (all are) and no optimality of ``y``. So the bound does not rest on
    the solver's tolerances; with HiGHS's optimal duals it equals the LP optimum to about
    1e-8. A margin of 1e-9 covers the rounding of these sums.
    """
    y = np.asarray(row_dual, dtype=float)
    has_lo = np.isfinite(lp.row_lo)
    has_hi = np.isfinite(lp.row_hi)
    y_lo = np.where(has_lo, np.maximum(y, 0.0), 0.0)
    y_hi = np.where(has_hi, np.minimum(y, 0.0), 0.0)
    reduced = lp.cost - lp.matrix.T @ (y_lo + y_hi)
    least = (
        math.fsum(y_lo[has_lo] * lp.row_lo[has_lo])
        + math.fsum(y_hi[has_hi] * lp.row_hi[has_hi])
        + math.fsum(np.where(reduced > 0, reduced * lp.col_lo, reduced * lp.col_hi))
    )
    return -least + SAFE_MARGIN


def _solve_lp(
    lp: _Lp, time_limit: float, threads: int, method: str
) -> tuple[float | None, np.ndarray | None, str]:
    """HiGHS on the LP: ``(safe bound, primal solution, status)``; no bound when HiGHS stops
    before an optimum (its duals then prove nothing useful). An interior-point run that ends
    without a status (IPX without crossover does so on some degenerate LPs) is redone by the
    simplex method in the time left."""
    import highspy
    from slolab.solvers.highs import highs_lp, run_highs

    start = time.perf_counter()
    model = highs_lp(lp.matrix, lp.cost, lp.col_lo, lp.col_hi, lp.row_lo, lp.row_hi)
    for attempt in (method, "simplex"):
        highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        left = time_limit - (time.perf_counter() - start)
        highs.setOptionValue("time_limit", float(max(left, 1e-3)))
        highs.setOptionValue("threads", int(threads))
        highs.setOptionValue("solver", attempt)
        if attempt == "ipm":
            # the safe dual bound needs no basis, so the crossover is skipped
            highs.setOptionValue("run_crossover", "off")
        highs.passModel(model)
        run_highs(highs)
        code = highs.getModelStatus()
        if code == highspy.HighsModelStatus.kOptimal:
            solution = highs.getSolution()
            if solution.dual_valid:
                bound = safe_dual_bound(lp, np.asarray(solution.row_dual))
                return bound, np.asarray(solution.col_value), "optimal"
        elif code == highspy.HighsModelStatus.kTimeLimit:
            return None, None, "time limit"
        elif code != highspy.HighsModelStatus.kUnknown or attempt == "simplex":
            name = highs.modelStatusToString(code)
            raise RuntimeError(f"{PROBLEM} relaxation: HiGHS ended the LP with {name}")
        if attempt == "simplex" or time.perf_counter() - start >= time_limit:
            break
    return None, None, "no duals"


def relaxation_bound(
    instance: Instance,
    *,
    buckets: int = DEFAULT_BUCKETS,
    coarse_buckets: int | None = COARSE_BUCKETS,
    refined_buckets: Sequence[int] = (),
    interval_rounds: int = INTERVAL_ROUNDS,
    integral: bool = False,
    time_limit: float = 60.0,
    threads: int = 1,
    lp_method: str = LP_METHOD,
) -> RelaxationBound:
    """The work-and-availability relaxation of a ``dispatch-scale`` window, solved by HiGHS.

    The LP is solved on a coarse grid first (``coarse_buckets``, at most
    :data:`COARSE_SHARE` of the time), then on the fine one with the time left; both are the
    same relaxation on different buckets, so both bound ``J`` and the least is kept.

    Parameters
    ----------
    instance : Instance
        A ``dispatch-scale`` window.
    buckets : int
        About this many time buckets (>= 2) on the fine grid; more is tighter and larger.
    coarse_buckets : int or None
        Buckets of the coarse grid solved first (None, or not below ``buckets``: none).
    refined_buckets : sequence of int
        Finer grids solved after the fine one, in order, each with the time left (a level
        that stops at the time limit gives no bound; the least of the others is kept).
    interval_rounds : int
        Rounds of interval rows (:func:`_interval_rows`) added to each grid's LP, each
        solved again with them within the grid's time; a round stopped by the time limit
        leaves the grid's bound before it. 0: none.
    integral : bool
        Also solve the fine grid with binary ``m_r`` (a MILP whose dual bound is reported)
        in the time left after its LP.
    time_limit : float
        Seconds in all.
    threads : int
        HiGHS threads.
    lp_method : str
        HiGHS's LP method: ``ipm`` (interior point, no crossover; the default), ``simplex``
        or ``pdlp``.

    Returns
    -------
    RelaxationBound
        The least bound found, never above :func:`ideal_bound`; status ``optimal`` when the
        fine LP is solved, ``coarse`` when only the coarse one is, ``time limit`` (and the
        ideal bound) when neither is.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2:
        raise ValueError(f"buckets must be an integer >= 2, got {buckets!r}")
    if coarse_buckets is not None and (
        isinstance(coarse_buckets, bool)
        or not isinstance(coarse_buckets, int)
        or coarse_buckets < 2
    ):
        raise ValueError(f"coarse_buckets must be an integer >= 2 or None, got {coarse_buckets!r}")
    for size in refined_buckets:
        if isinstance(size, bool) or not isinstance(size, int) or size < 2:
            raise ValueError(f"refined_buckets must be integers >= 2, got {size!r}")
    if (
        isinstance(interval_rounds, bool)
        or not isinstance(interval_rounds, int)
        or interval_rounds < 0
    ):
        raise ValueError(f"interval_rounds must be an integer >= 0, got {interval_rounds!r}")
    if lp_method not in LP_METHODS:
        raise ValueError(f"lp_method must be one of {', '.join(LP_METHODS)}, got {lp_method!r}")
    start = time.perf_counter()
    data = ScaleWindow.of(instance)
    ideal = ideal_bound(data)
    meets = [r for r in range(data.n) if data.can_meet(r)]
    if not meets:
        # every prompt is still served, on a worker paid for while it runs
        prompts_s = math.fsum(data.prefill_part_s(r) for r in range(data.n))
        cost = -data.cost_weight * prompts_s
        return RelaxationBound(cost, 0.0, 0.0, prompts_s, "optimal", integral, 0, 0, 0, 0.0, ())
    profiles: list[Any] = [None] * data.n
    for r in meets:
        profiles[r] = _request_profile(data, r)
    grids = [buckets]
    if coarse_buckets is not None and coarse_buckets < buckets:
        grids.insert(0, coarse_buckets)
    fine = len(grids) - 1
    grids += [size for size in refined_buckets if size > buckets]
    bound, status = ideal, "time limit"
    best: tuple[_Lp, np.ndarray] | None = None
    levels: list[LevelSolve] = []
    lp = fine_lp = None
    for i, size in enumerate(grids):
        begun = time.perf_counter()
        left = time_limit - (begun - start)
        if left <= 0:
            break
        lp = _build(data, meets, profiles, size)
        level_end = begun + (left * COARSE_SHARE if i < fine else left)
        value, x, how = _solve_lp(lp, level_end - time.perf_counter(), threads, lp_method)
        added = 0
        table = _intervals(data, meets, profiles, lp) if interval_rounds else None
        for _ in range(interval_rounds):
            if value is None or x is None or table is None:
                break
            found = _interval_rows(data, lp, x, table, INTERVAL_ROWS)
            if found is None or time.perf_counter() >= level_end:
                break
            cut = _with_rows(lp, *found)
            tighter, cut_x, _ = _solve_lp(cut, level_end - time.perf_counter(), threads, lp_method)
            if tighter is None or cut_x is None:
                break
            # the rows are valid, so both LPs bound J: the least is kept
            lp, x, added, value = cut, cut_x, added + len(found[1]), min(value, tighter)
        if i == fine:
            fine_lp = lp
        levels.append(
            LevelSolve(
                lp.buckets,
                lp.matrix.shape[1],
                lp.matrix.shape[0],
                how,
                value,
                time.perf_counter() - begun,
                added,
            )
        )
        if value is not None and x is not None:
            if value < bound:
                bound, best = value, (lp, x)
            if status != "optimal":
                status = "optimal" if i >= fine else "coarse"
        elif i > fine:
            break
    if status == "time limit":
        logger.warning(
            "%s relaxation: no LP solved within %.1f s; reporting the ideal bound",
            PROBLEM,
            time_limit,
        )
    lp = fine_lp
    if integral and lp is not None and status == "optimal":
        remaining = time_limit - (time.perf_counter() - start)
        if remaining > 0:
            mip = milp(
                lp.cost,
                constraints=LinearConstraint(lp.matrix, lp.row_lo, lp.row_hi),
                bounds=Bounds(lp.col_lo, lp.col_hi),
                integrality=lp.integrality,
                options={"time_limit": remaining, "disp": False, "presolve": True},
            )
            dual = getattr(mip, "mip_dual_bound", None)
            if mip.status == 0:
                # HiGHS's MIP gap tolerance leaves its optimum within 1e-4 of the dual bound
                value = (
                    -float(dual) if dual is not None and math.isfinite(dual) else -float(mip.fun)
                )
            elif dual is not None and math.isfinite(dual):
                value = -float(dual)
                status = "time limit"
            else:
                value = math.inf
                status = "time limit"
            if value + SAFE_MARGIN < bound:
                bound = value + SAFE_MARGIN
                if mip.x is not None:
                    best = (lp, np.asarray(mip.x))
    met = cost_s = 0.0
    if best is not None:
        lp_best, x = best
        met = float(x[lp_best.met_cols].sum())
        cost_s = float(
            (lp_best.length_s * (x[lp_best.x0_cols] + x[lp_best.xn_cols])).sum()
            + lp_best.startup_s * x[lp_best.up_cols].sum()
        )
    final = best[0] if best is not None else lp
    return RelaxationBound(
        bound=min(bound, ideal),
        ideal=ideal,
        met=met if best is not None else float(len(meets)),
        cost_server_s=cost_s,
        status=status,
        integral=integral,
        buckets=final.buckets if final is not None else 0,
        variables=int(final.matrix.shape[1]) if final is not None else 0,
        constraints=int(final.matrix.shape[0]) if final is not None else 0,
        runtime_s=time.perf_counter() - start,
        levels=tuple(levels),
    )


@register_model("dispatch-bound")
class DispatchBound(ExactModel):
    """The relaxation of :func:`relaxation_bound` as a bound-only model of ``dispatch-scale``
    (method ``bound``): HiGHS on the coarse then the fine LP, the least safe bound reported.

    Options: ``buckets`` (default :data:`DEFAULT_BUCKETS`), ``coarse_buckets`` (default
    :data:`COARSE_BUCKETS`; None: the fine grid alone), ``refined_buckets`` (default
    :data:`REFINED_BUCKETS`: finer grids after the fine one, with the time left),
    ``interval_rounds`` (default :data:`INTERVAL_ROUNDS`; 0: no interval rows),
    ``integral`` (default False: the LP),
    ``lp_method`` (default :data:`LP_METHOD`). Status OPTIMAL when the fine LP is solved,
    FEASIBLE when only the coarse one is (its bound holds), TIME_LIMIT with the ideal bound
    when neither is.
    """

    sense = "max"
    bound_only = True

    def __init__(
        self,
        instance: Instance,
        *,
        buckets: int = DEFAULT_BUCKETS,
        coarse_buckets: int | None = COARSE_BUCKETS,
        refined_buckets: Sequence[int] = REFINED_BUCKETS,
        interval_rounds: int = INTERVAL_ROUNDS,
        integral: bool = False,
        lp_method: str = LP_METHOD,
    ) -> None:
        super().__init__(instance)
        self.data = ScaleWindow.of(instance)
        self.buckets = buckets
        self.coarse_buckets = coarse_buckets
        self.refined_buckets = tuple(refined_buckets)
        self.interval_rounds = interval_rounds
        self.integral = integral
        self.lp_method = lp_method

    backends = ("highs",)

    def supports(self) -> frozenset[str]:
        """HiGHS only (through highspy; the binary variant through SciPy's ``milp``)."""
        return frozenset({"milp"})

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        if backend.name != "highs":
            raise ValueError(f"model 'dispatch-bound' runs on highs only, got {backend.name!r}")
        found = relaxation_bound(
            self.instance,
            buckets=self.buckets,
            coarse_buckets=self.coarse_buckets,
            refined_buckets=self.refined_buckets,
            interval_rounds=self.interval_rounds,
            integral=self.integral,
            time_limit=time_limit,
            threads=backend.threads,
            lp_method=self.lp_method,
        )
        status = {"optimal": Status.OPTIMAL, "coarse": Status.FEASIBLE}.get(
            found.status, Status.TIME_LIMIT
        )
        return Result(
            status=status,
            objective=found.bound if status != Status.TIME_LIMIT else None,
            bound=found.bound,
            runtime_s=found.runtime_s,
            backend="highs",
            model="dispatch-bound",
            sense="max",
            schedule=None,
            details={
                "ideal_bound": found.ideal,
                "relaxed_met": found.met,
                "relaxed_cost_server_s": found.cost_server_s,
                "buckets": found.buckets,
                "variables": found.variables,
                "constraints": found.constraints,
                "integral": found.integral,
                "bound_status": found.status,
                "levels": [dataclasses.asdict(level) for level in found.levels],
            },
        )

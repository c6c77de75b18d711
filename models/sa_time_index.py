"""A time-indexed batch network for SA ordering snapshots: a bound on G without averaged starts.

:class:`TimeIndexedMaster` is the column master of :mod:`slolab.models.sa_columns` with its
nodes indexed by time as well as by position: a node ``(q, t)`` is "``q`` requests done, the
server free at ``t``", ``t`` on a grid of step ``delta`` up to the last finite latest start
(``T``) and one node ``(q, late)`` past it. A column is one batch ``S`` of ``s`` requests
started at node ``(q, t)``; it ends at ``(q + s, floor_grid(t + d_S))`` (``late`` past ``T``)
with ``d_S = max_(r in S) e_r(s)``, costs ``d_S (N - q - s) + sum_(r in S) e_r(s) - |T_c| /
lambda`` (the total latency written batch by batch, docs/sa_ordering.md Sec. 1, exact), and
claims ``T_c = {r in S : L_r(s) >= t}`` (every member whose latest start the node's time
reaches). Rows: each request covered once; one unit of flow out of ``(0, 0)``, conserved at
every node with ``q < N``. So a claim is checked against the start time of the path the column
lies on, not against a start averaged over fractional prefixes.

Validity (docs/sa_ordering.md, "A time-indexed batch network"): a plan's batches start at
``t_k``; its path on the grid starts them at ``t'_k = floor_grid(t'_(k-1) + d_(k-1)) <= t_k``
(by induction, rounding down), so every truly met member is claimed (``L_r(s) >= t_k >=
t'_k``) and the path's cost is the plan's ``L`` less at least its met count over ``lambda``:
the LP optimum is at most ``min F`` over plans. Pricing is exact: for a node time ``t``, size
``s`` and leader ``j`` (the member with the largest ``(e_r(s), r)``) the best members are the
``s - 1`` cheapest of ``e_r(s) - pi_r - [L_r(s) >= t] / lambda`` over the requests below
``j``, whatever ``q``; the node duals then add per ``(q, t)``.

The bound: for duals ``(pi, phi)`` and any plan, ``F = sum_r pi_r + phi_(0,0) + sum_c rc_c
x_c >= sum_r pi_r + phi_(0,0) + N min(0, rc_min)``; ``G* <= lambda`` when that is ``>= 0``,
else ``G* <= lambda (1 + (-LB) / L_lb)``. :func:`time_indexed_bound` bisects on ``lambda``
for the least ``lambda`` the LP certifies.

References
----------
A. Pessoa, T. Bulhoes, V. Nesello, A. Subramanian, "Exact Approaches for Single Machine Total
Weighted Tardiness Batch Scheduling", INFORMS Journal on Computing 34(3), 2022 (time-indexed
arc-flow network of batches, Sec. 3); S. Tanaka and S. Fujikuma, "A dynamic-programming-based
exact algorithm for general single-machine scheduling with machine idle time", Journal of
Scheduling 15, 2012 (time-indexed relaxations of single-machine sequencing). The latency
identity and the claims follow docs/sa_ordering.md Sec. 1 and 6.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["TIME_STEP_S", "TiColumn", "TimeIndexedMaster", "TimeIndexedBound", "time_indexed_bound"]

#: Grid step of the node times (s).
TIME_STEP_S = 0.05
#: Columns added per pricing round at most (the most negative).
COLUMNS_PER_ROUND = 400
#: A column prices out below this reduced cost (s).
PRICE_TOL = 1e-7


@dataclass(frozen=True, slots=True)
class TiColumn:
    """One batch at a node: its members (sorted), start node ``(q, tick)`` (``tick`` =
    ``late`` index for the late node) and end tick, its claimed members."""

    members: tuple[int, ...]
    q: int
    tick: int
    end_tick: int
    claimed: tuple[int, ...]


@dataclass(slots=True)
class TimeIndexedBound:
    """What :func:`time_indexed_bound` found: the least ``lambda`` certified (``bound``), the
    ratios tried with their Lagrangian bounds on ``min F`` and whether column generation
    converged, the grid and the last master's size."""

    bound: float
    tried: list[dict[str, float]] = field(default_factory=list)
    ticks: int = 0
    columns: int = 0
    runtime_s: float = 0.0


class TimeIndexedMaster:
    """The time-indexed master at ratio ``lambda`` for a snapshot (see the module docstring).

    Parameters
    ----------
    problem : OrderingProblem
        A snapshot (every arrival equal).
    ratio : float
        ``lambda > 0`` of the Dinkelbach subproblem ``min L - M / lambda``.
    step_s : float
        Grid step of node times (s).
    """

    def __init__(self, problem: Any, ratio: float, step_s: float = TIME_STEP_S) -> None:
        if not problem.snapshot:
            raise ValueError("the time-indexed master needs a snapshot (every arrival equal)")
        if not ratio > 0:
            raise ValueError(f"ratio must be > 0, got {ratio}")
        if not step_s > 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        self.problem = problem
        self.ratio = float(ratio)
        self.n = problem.n_requests
        self.b = problem.batch_size
        self.step = float(step_s)
        a0 = float(problem.arrival_s[0])
        self.latest = problem.latest_start_s - a0  # (n, B + 1), relative to the snapshot
        self.execs = problem.exec_s
        finite = self.latest[:, 1:][np.isfinite(self.latest[:, 1:])]
        horizon = float(finite.max()) if len(finite) else 0.0
        #: node times: ticks 0 .. late - 1 at ``tick * step``; tick ``late`` is past them all
        self.late = max(1, int(math.floor(max(horizon, 0.0) / self.step)) + 1)
        self.times = np.append(np.arange(self.late) * self.step, math.inf)
        self.columns: list[TiColumn] = []
        self._keys: set[TiColumn] = set()
        self._highs: Any = None

    # -- layout -----------------------------------------------------------------------------------
    def node(self, q: int, tick: int) -> int:
        """Row of node ``(q, tick)`` (``q < N``); covering rows come first."""
        return self.n + q * (self.late + 1) + tick

    def end_tick(self, tick: int, duration: float) -> int:
        """Grid tick a batch started at ``tick`` ends at, rounded down (``late`` past the
        grid or from the late node)."""
        if tick >= self.late:
            return self.late
        t = self.times[tick] + duration
        return min(self.late, int(math.floor(t / self.step + 1e-12)))

    def cost(self, col: TiColumn) -> float:
        """``d_S (N - q - s) + sum e_r(s) - |claimed| / lambda`` (s)."""
        s = len(col.members)
        execs = self.execs[list(col.members), s]
        return float(execs.max() * (self.n - col.q - s) + execs.sum() - len(col.claimed) / self.ratio)

    def column(self, members: tuple[int, ...], q: int, tick: int) -> TiColumn:
        """The column of ``members`` at node ``(q, tick)``: its end tick and every member whose
        latest start the node's time reaches."""
        s = len(members)
        members = tuple(sorted(int(r) for r in members))
        duration = float(self.execs[list(members), s].max())
        t = self.times[tick]
        claimed = tuple(r for r in members if self.latest[r, s] >= t)
        return TiColumn(members, q, tick, self.end_tick(tick, duration), claimed)

    def plan_columns(self, plan: Any) -> list[TiColumn]:
        """The path of a plan on the grid (starts rounded down batch by batch)."""
        cols, q, tick = [], 0, 0
        for batch in plan:
            col = self.column(tuple(batch), q, tick)
            cols.append(col)
            q, tick = q + len(batch), col.end_tick
        return cols

    # -- the LP -----------------------------------------------------------------------------------
    def _entries(self, col: TiColumn) -> tuple[list[int], list[float]]:
        s = len(col.members)
        rows = list(col.members) + [self.node(col.q, col.tick)]
        vals = [1.0] * s + [1.0]
        if col.q + s < self.n:
            rows.append(self.node(col.q + s, col.end_tick))
            vals.append(-1.0)
        return rows, vals

    def _build(self) -> Any:
        import highspy

        highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("threads", 1)
        highs.setOptionValue("solver", "simplex")
        nodes = self.n * (self.late + 1)
        lower = np.concatenate([np.ones(self.n), np.zeros(nodes)])
        lower[self.node(0, 0)] = 1.0
        highs.addRows(len(lower), lower, lower.copy(), 0, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))
        return highs

    def add(self, cols: list[TiColumn]) -> int:
        """Add the new ones of ``cols``; how many."""
        fresh = [c for c in cols if c not in self._keys]
        if not fresh:
            return 0
        if self._highs is None:
            self._highs = self._build()
        starts, idx, val = [], [], []
        for c in fresh:
            rows, vals = self._entries(c)
            starts.append(len(idx))
            idx += rows
            val += vals
            self._keys.add(c)
        self.columns.extend(fresh)
        self._highs.addCols(
            len(fresh),
            np.array([self.cost(c) for c in fresh]),
            np.zeros(len(fresh)),
            np.full(len(fresh), np.inf),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=float),
        )
        return len(fresh)

    def solve(self, deadline: float) -> tuple[float, np.ndarray] | None:
        """The LP's optimum and row duals; None when not optimal by ``deadline``."""
        import highspy

        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        self._highs.setOptionValue("time_limit", left)
        self._highs.run()
        if self._highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        return (
            float(self._highs.getInfo().objective_function_value),
            np.asarray(self._highs.getSolution().row_dual, dtype=float),
        )

    # -- pricing ----------------------------------------------------------------------------------
    def price(self, duals: np.ndarray, most: int = COLUMNS_PER_ROUND) -> tuple[list[TiColumn], float]:
        """The ``most`` columns of least reduced cost below ``-PRICE_TOL`` and the least reduced
        cost over *every* column (exact: see the module docstring)."""
        n, b, late = self.n, self.b, self.late
        pi = duals[:n]
        phi = duals[n:].reshape(n, late + 1)  # node duals, q < N
        phi_end = np.vstack([phi, np.zeros((1, late + 1))])  # q = N: no row
        times = self.times
        best_rc, found = math.inf, []
        for s in range(1, b + 1):
            order = np.lexsort((np.arange(n), self.execs[:, s]))
            e = self.execs[order, s]
            # value of a member at each tick: e - pi - [claimed] / lambda
            claim = self.latest[order, s][None, :] >= times[:, None]  # (ticks, n)
            value = e[None, :] - pi[order][None, :] - claim / self.ratio
            # the s - 1 smallest values among the requests before each leader, per tick
            small = np.full((late + 1, max(s - 1, 0)), math.inf)
            for i in range(n):
                lead = value[:, i]
                extra = small.sum(axis=1) if s > 1 else np.zeros(late + 1)
                if np.isfinite(extra).all() or s == 1:
                    sets = lead + extra  # (ticks,)
                    d = e[i]
                    end = np.full(late + 1, late)
                    end[:late] = np.minimum(late, np.floor((times[:late] + d) / self.step + 1e-12))
                    qs = np.arange(n - s + 1)
                    rc = (
                        sets[None, :]
                        + d * (n - qs - s)[:, None]
                        - phi[qs]
                        + phi_end[qs[:, None] + s, end[None, :]]
                    )
                    best_rc = min(best_rc, float(rc.min()))
                    for q, k in zip(*np.nonzero(rc < -PRICE_TOL), strict=True):
                        found.append((float(rc[q, k]), i, s, int(q), int(k), order))
                if s > 1:
                    merged = np.concatenate([small, value[:, i : i + 1]], axis=1)
                    small = np.sort(merged, axis=1)[:, : s - 1]
        found.sort(key=lambda f: f[0])
        cols = []
        for _, i, s, q, k, order in found[:most]:
            value_k = self.execs[order, s] - pi[order] - (self.latest[order, s] >= times[k]) / self.ratio
            below = np.argsort(value_k[:i], kind="stable")[: s - 1]
            members = (int(order[i]),) + tuple(int(order[j]) for j in below)
            cols.append(self.column(members, q, k))
        return cols, best_rc

    def lagrangian(self, duals: np.ndarray, best_rc: float) -> float:
        """``sum pi + phi_(0,0) + N min(0, rc_min)``: a lower bound on ``min F`` over plans."""
        return float(duals[: self.n].sum() + duals[self.node(0, 0)] + self.n * min(0.0, best_rc))

    def generate(self, plan: Any, deadline: float) -> tuple[float, bool]:
        """Column generation from ``plan``'s path until no column prices out or ``deadline``:
        the best Lagrangian bound on ``min F`` and whether it converged (-inf when no round
        finished)."""
        self.add(self.plan_columns(plan))
        best = -math.inf
        while True:
            got = self.solve(deadline)
            if got is None:
                return best, False
            _, duals = got
            cols, rc = self.price(duals)
            best = max(best, self.lagrangian(duals, rc))
            if rc >= -PRICE_TOL or not cols:
                return best, True
            if time.perf_counter() >= deadline:
                return best, False
            self.add(cols)


def time_indexed_bound(
    problem: Any,
    plan: Any,
    incumbent: float,
    latency_floor_s: float,
    time_limit: float,
    step_s: float = TIME_STEP_S,
    steps: int = 8,
) -> TimeIndexedBound:
    """The least ``lambda`` the time-indexed LP certifies (``G* <= lambda``) within
    ``time_limit``: from ``lambda`` = ``incumbent`` (a plan's G, so ``G* >= incumbent``), each
    ratio's Lagrangian bound ``LB`` gives ``G* <= lambda (1 + max(0, -LB) / L_lb)``; then a
    bisection between the incumbent and the least bound so far (``steps`` ratios at most),
    each ratio's master seeded with ``plan``'s path and every column priced before."""
    start = time.perf_counter()
    deadline = start + time_limit
    result = TimeIndexedBound(bound=math.inf)
    known: list[TiColumn] = []
    lo, lam = incumbent, incumbent
    for _ in range(steps):
        master = TimeIndexedMaster(problem, lam, step_s)
        master.add([c for c in known])
        lb, converged = master.generate(plan, deadline)
        known = master.columns
        result.ticks, result.columns = master.late, len(master.columns)
        result.tried.append({"ratio": lam, "f_lower": lb, "converged": float(converged)})
        if math.isfinite(lb):
            result.bound = min(result.bound, lam * (1.0 + max(0.0, -lb) / latency_floor_s))
        if time.perf_counter() >= deadline or not math.isfinite(result.bound):
            break
        if lb < 0:
            lo = lam
        lam = 0.5 * (lo + result.bound)
        if result.bound - lo <= 1e-6 * result.bound:
            break
    result.runtime_s = time.perf_counter() - start
    return result

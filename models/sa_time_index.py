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

ng-route memory (``ng_size = k > 0``; docs/sa_ordering.md, "ng-route memory"): ``NG(r)`` is
``r`` and its ``k - 1`` nearest in the order of execution time at full size; a batch ``S``
with leader ``j`` may not meet the path's memory ``M`` and leaves ``(M ∪ S) ∩ NG(j)``. The
memory only holds requests the path served, so every plan stays a path and the bound stays
valid; the programme runs over labels ``(q, t, M)`` and falls back to the one without memory
past a label cap or a share of the time left.

The bound: for duals ``(pi, phi)`` and any plan, ``F = sum_r pi_r + phi_(0,0) + sum_c rc_c
x_c >= sum_r pi_r + phi_(0,0) + N min(0, rc_min)``; ``G* <= lambda`` when that is ``>= 0``,
else ``G* <= lambda (1 + (-LB) / L_lb)``. :func:`time_indexed_bound` bisects on ``lambda``
for the least ``lambda`` the LP certifies; with ``ng_warm`` it runs without memory first,
then with memory from the paths the memory admits, keeping the least bound of both phases
(docs/sa_ordering.md, "Two phases").

References
----------
R. Baldacci, A. Mingozzi, R. Roberti, "New route relaxation and pricing strategies for the
vehicle routing problem", Operations Research 59(5), 2011 (ng-route memory);
A. Pessoa, T. Bulhoes, V. Nesello, A. Subramanian, "Exact Approaches for Single Machine Total
Weighted Tardiness Batch Scheduling", INFORMS Journal on Computing 34(3), 2022 (time-indexed
arc-flow network of batches, Sec. 3); S. Tanaka and S. Fujikuma, "A dynamic-programming-based
exact algorithm for general single-machine scheduling with machine idle time", Journal of
Scheduling 15, 2012 (time-indexed relaxations of single-machine sequencing). The latency
identity and the claims follow docs/sa_ordering.md Sec. 1 and 6.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from slolab.models.sa_ti_pricing import (
    NG_EXACT_FIRST_CAP,
    NG_EXACT_FIRST_FROM,
    NG_EXACT_SHARE,
    NG_LABEL_CAP,
    NG_QUICK_LABELS,
    PATHS_PER_ROUND,
    PRICE_TOL,
    NgPricing,
    TiColumn,
    ng_neighbourhoods,
)
from slolab.models.sa_ti_primal import ARC_SHARE, TiPrimal, time_indexed_primal

__all__ = [
    "TIME_STEP_S",
    "TiColumn",
    "TimeIndexedMaster",
    "TimeIndexedBound",
    "ng_neighbourhoods",
    "ratio_bound",
    "time_indexed_bound",
]

logger = logging.getLogger("slolab")

#: Grid step of the node times (s).
TIME_STEP_S = 0.05
#: Dual smoothing: the priced duals are this share of the best bound's plus the rest of the LP's.
SMOOTHING = 0.5


@dataclass(slots=True)
class TimeIndexedBound:
    """What :func:`time_indexed_bound` found: the least ``lambda`` certified (``bound``), the
    ratios tried with their Lagrangian bounds on ``min F`` and whether column generation
    converged, the grid and the last master's size, the ng memory size and the pricings that
    gave up on it (priced without memory); with ``primal_s``, the plan found from the priced
    paths (:func:`~slolab.models.sa_ti_primal.time_indexed_primal`)."""

    bound: float
    tried: list[dict[str, float]] = field(default_factory=list)
    ticks: int = 0
    columns: int = 0
    runtime_s: float = 0.0
    ng_size: int = 0
    fallbacks: int = 0
    primal: TiPrimal | None = None


class TimeIndexedMaster(NgPricing):
    """The time-indexed master at ratio ``lambda`` for a snapshot (see the module docstring):
    columns are paths of batches through the grid of nodes ``(q, t)``, priced by a dynamic
    programme over the grid.

    Parameters
    ----------
    problem : OrderingProblem
        A snapshot (every arrival equal).
    ratio : float
        ``lambda > 0`` of the Dinkelbach subproblem ``min L - M / lambda``.
    step_s : float
        Grid step of node times (s).
    ng_size : int
        ng-route memory: ``NG(r)`` is ``r`` and its ``ng_size - 1`` nearest in the order of
        execution time at full size (:func:`ng_neighbourhoods`); 0 (the default) prices
        without memory. At most 64 requests when positive.
    label_cap : int
        Labels one exact ng pricing may keep before it gives up (the round is then priced
        without memory, a lower bound).
    exact_first : int
        With ``ng_size > 0``: each round first tries the exact programme with this label cap,
        then, when it gives up, the quick search and the exact programme as without it (0,
        the default: the quick search first).
    """

    def __init__(
        self,
        problem: Any,
        ratio: float,
        step_s: float = TIME_STEP_S,
        ng_size: int = 0,
        label_cap: int = NG_LABEL_CAP,
        exact_first: int = 0,
    ) -> None:
        if not problem.snapshot:
            raise ValueError("the time-indexed master needs a snapshot (every arrival equal)")
        if not ratio > 0:
            raise ValueError(f"ratio must be > 0, got {ratio}")
        if not step_s > 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        if ng_size < 0:
            raise ValueError(f"ng_size must be >= 0, got {ng_size}")
        if ng_size and problem.n_requests > 64:
            raise ValueError(
                f"ng_size > 0 needs at most 64 requests (memories are 64-bit masks), "
                f"got {problem.n_requests}"
            )
        if label_cap < 1:
            raise ValueError(f"label_cap must be >= 1, got {label_cap}")
        if exact_first < 0:
            raise ValueError(f"exact_first must be >= 0, got {exact_first}")
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
        #: ng-route memory: ``NG(r)`` holds ``r`` and its ``ng_size - 1`` nearest (0: none)
        self.ng_size = min(int(ng_size), self.n)
        self.label_cap = int(label_cap)
        self.exact_first = int(exact_first)
        #: least reduced cost without memory from which the exact programme is tried first (s)
        self.exact_floor = NG_EXACT_FIRST_FROM
        self.ng_member = ng_neighbourhoods(self.execs[:, self.b], self.ng_size)
        self.request_bit = np.left_shift(np.uint64(1), np.arange(self.n, dtype=np.uint64))
        self.ng_mask = np.array(
            [
                np.bitwise_or.reduce(self.request_bit[row]) if row.any() else 0
                for row in self.ng_member
            ],
            dtype=np.uint64,
        )
        #: pricing rounds whose ng programme passed ``label_cap`` (priced without memory)
        self.ng_fallbacks = 0
        #: whether the last :meth:`price` proved its least reduced cost (False after a fallback)
        self.priced_all = True
        #: perf_counter time the running column generation ends (bounds one exact ng round)
        self.deadline = math.inf
        self.paths: list[tuple[TiColumn, ...]] = []
        self._keys: set[tuple[TiColumn, ...]] = set()
        self._highs: Any = None

    # -- batches on the grid ----------------------------------------------------------------------
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
        return float(
            execs.max() * (self.n - col.q - s) + execs.sum() - len(col.claimed) / self.ratio
        )

    def column(self, members: tuple[int, ...], q: int, tick: int) -> TiColumn:
        """The batch of ``members`` at node ``(q, tick)``: its end tick and every member whose
        latest start the node's time reaches."""
        s = len(members)
        members = tuple(sorted(int(r) for r in members))
        duration = float(self.execs[list(members), s].max())
        t = self.times[tick]
        claimed = tuple(r for r in members if self.latest[r, s] >= t)
        return TiColumn(members, q, tick, self.end_tick(tick, duration), claimed)

    def plan_path(self, plan: Any) -> tuple[TiColumn, ...]:
        """The path of a plan on the grid (starts rounded down batch by batch)."""
        cols, q, tick = [], 0, 0
        for batch in plan:
            col = self.column(tuple(batch), q, tick)
            cols.append(col)
            q, tick = q + len(batch), col.end_tick
        return tuple(cols)

    # -- the LP -----------------------------------------------------------------------------------
    def add(self, paths: list[tuple[TiColumn, ...]]) -> int:
        """Add the new ones of ``paths`` (rows: each request covered once, one path); how many."""
        import highspy

        fresh = [p for p in dict.fromkeys(paths) if p not in self._keys]
        if not fresh:
            return 0
        if self._highs is None:
            highs = highspy.Highs()
            highs.setOptionValue("output_flag", False)
            highs.setOptionValue("threads", 1)
            ones = np.ones(self.n + 1)
            empty = np.zeros(0, dtype=np.int32)
            highs.addRows(self.n + 1, ones, ones.copy(), 0, empty, empty, np.zeros(0))
            self._highs = highs
        starts: list[int] = []
        idx: list[int] = []
        val: list[float] = []
        for path in fresh:
            count = np.bincount(
                np.concatenate([np.asarray(c.members) for c in path]), minlength=self.n
            )
            rows = np.flatnonzero(count)
            starts.append(len(idx))
            idx += rows.tolist() + [self.n]
            val += count[rows].astype(float).tolist() + [1.0]
            self._keys.add(path)
        self.paths.extend(fresh)
        self._highs.addCols(
            len(fresh),
            np.array([sum(self.cost(c) for c in p) for p in fresh]),
            np.zeros(len(fresh)),
            np.full(len(fresh), np.inf),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=float),
        )
        return len(fresh)

    def solve(self, deadline: float) -> tuple[float, np.ndarray] | None:
        """The LP's optimum and row duals (``pi`` per request, then the path row's
        ``sigma``); None when not optimal by ``deadline``."""
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
    def price(
        self, duals: np.ndarray, most: int = PATHS_PER_ROUND
    ) -> tuple[list[tuple[TiColumn, ...]], float]:
        """The least reduced cost over every path (``rc`` = its cost less ``sum_r count_r pi_r``
        less ``sigma``) and the best paths ending at the ``most`` best sink ticks whose reduced
        cost is below ``-PRICE_TOL``; with ``ng_size > 0`` over the ng-feasible paths only
        (:meth:`price_ng`), or over every path when that programme passes its label cap.

        A dynamic programme over the nodes by ``q``: an arc from ``(q, t)`` is a size ``s``
        and a leader ``j`` (largest ``(e_r(s), r)`` of the batch), its members ``j`` and the
        ``s - 1`` cheapest of ``e_r(s) - pi_r - [L_r(s) >= t] / lambda`` below ``j`` (the
        best batch of that arc whatever ``q``), costing that plus ``e_j(s) (N - q - s)`` and
        ending at ``(q + s, floor_grid(t + e_j(s)))``. Paths may repeat a request (the LP's
        covering rows count each repeat); every plan is one of them."""
        arcs = self._arcs(duals)
        self.priced_all = True
        if not self.ng_size:
            return self._price_plain(duals, most, arcs)
        done = self.completion(arcs)
        plain = float(done[0, 0]) - float(duals[self.n])
        if plain >= -PRICE_TOL:
            return [], plain
        if self.exact_first and plain >= self.exact_floor:
            # the exact programme under a small label cap first (its value is a bound), while
            # the least without memory is above a floor that doubles on success, halves on
            # failure (the completion bound prunes less the lower it is)
            now = time.perf_counter()
            got = self.price_ng(
                duals,
                most,
                arcs,
                done,
                until=now + NG_EXACT_SHARE * (self.deadline - now),
                label_cap=self.exact_first,
            )
            self.exact_floor = 2.0 * plain if got is not None else 0.5 * plain
            if got is not None:
                return got
        # first a quick search (a few labels per node), then the exact programme
        quick = self.price_ng(duals, most, arcs, done, per_node=NG_QUICK_LABELS)
        if quick is not None and quick[0]:
            return quick[0], plain
        now = time.perf_counter()
        got = self.price_ng(
            duals, most, arcs, done, until=now + NG_EXACT_SHARE * (self.deadline - now)
        )
        if got is not None:
            return got
        self.ng_fallbacks += 1
        self.priced_all = False
        return [], plain

    def _arcs(
        self, duals: np.ndarray
    ) -> list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]]:
        """Per size ``s`` and leader position ``i`` (in the order of ``(e_r(s), r)``): the best
        batch's value per tick (leader and the ``s - 1`` cheapest below it), its end tick per
        tick, the leader's ``e_i(s)`` and the order."""
        n, b, late = self.n, self.b, self.late
        pi = duals[:n]
        times = self.times
        ticks = late + 1
        arcs: list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]] = []
        for s in range(1, b + 1):
            order = np.lexsort((np.arange(n), self.execs[:, s]))
            e = self.execs[order, s]
            claim = self.latest[order, s][None, :] >= times[:, None]  # (ticks, n)
            value = e[None, :] - pi[order][None, :] - claim / self.ratio
            small = np.full((ticks, max(s - 1, 0)), math.inf)
            for i in range(n):
                if i >= s - 1:
                    sets = value[:, i] + (small.sum(axis=1) if s > 1 else 0.0)
                    end = np.full(ticks, late)
                    end[:late] = np.minimum(
                        late, np.floor((times[:late] + e[i]) / self.step + 1e-12)
                    )
                    arcs.append((s, i, sets, end, float(e[i]), order))
                if s > 1:
                    small = np.sort(np.concatenate([small, value[:, i : i + 1]], axis=1), axis=1)[
                        :, : s - 1
                    ]
        return arcs

    def completion(
        self, arcs: list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]]
    ) -> np.ndarray:
        """``(N + 1, ticks)``: the least cost of a path from each node to a sink, repeats
        allowed (a lower bound on every ng-feasible or elementary completion). The arcs of one
        size are stacked, so each position takes one array operation per size."""
        n = self.n
        done = np.full((n + 1, self.late + 1), math.inf)
        done[n] = 0.0
        by_size = [
            (
                s,
                np.stack([a[2] for a in arcs if a[0] == s]),
                np.stack([a[3] for a in arcs if a[0] == s]),
                np.array([a[4] for a in arcs if a[0] == s])[:, None],
            )
            for s in sorted({a[0] for a in arcs})
        ]
        for q in range(n - 1, -1, -1):
            for s, sets, end, d in by_size:
                if q + s <= n:
                    cand = sets + d * (n - q - s) + done[q + s][end]
                    np.minimum(done[q], cand.min(axis=0), out=done[q])
        return done

    def _price_plain(
        self,
        duals: np.ndarray,
        most: int,
        arcs: list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]],
    ) -> tuple[list[tuple[TiColumn, ...]], float]:
        """:meth:`price` without memory: paths may repeat any request."""
        n = self.n
        pi, sigma = duals[:n], float(duals[n])
        times = self.times
        ticks = self.late + 1
        best = np.full((n + 1, ticks), math.inf)
        best[0, 0] = 0.0
        pred = np.full((n + 1, ticks, 3), -1, dtype=np.int64)  # (previous tick, arc, size)
        for q in range(n):
            here = best[q]
            live = np.isfinite(here)
            if not live.any():
                continue
            for a, (s, _, sets, end, d, _) in enumerate(arcs):
                if q + s > n:
                    continue
                cand = np.where(live, here + sets + d * (n - q - s), math.inf)
                # per end tick the least candidate (several start ticks may end at one)
                by_value = np.argsort(cand, kind="stable")
                targets, first = np.unique(end[by_value], return_index=True)
                winners = by_value[first]
                better = cand[winners] < best[q + s, targets]
                k, target = winners[better], targets[better]
                best[q + s, target] = cand[k]
                pred[q + s, target, 0] = k
                pred[q + s, target, 1] = a
                pred[q + s, target, 2] = s
        sinks = best[n] - sigma
        rc_min = float(sinks.min())
        chosen = np.flatnonzero(sinks < -PRICE_TOL)
        chosen = chosen[np.argsort(sinks[chosen], kind="stable")[:most]]
        paths = []
        for k in chosen:
            batches = []
            q, tick = n, int(k)
            while q > 0:
                prev, a, s = (int(v) for v in pred[q, tick])
                _, i, _, _, _, order = arcs[a]
                value_k = (
                    self.execs[order, s]
                    - pi[order]
                    - (self.latest[order, s] >= times[prev]) / self.ratio
                )
                below = np.argsort(value_k[:i], kind="stable")[: s - 1]
                members = (int(order[i]), *(int(order[j]) for j in below))
                q -= s
                batches.append(self.column(members, q, prev))
                tick = prev
            paths.append(tuple(reversed(batches)))
        return paths, rc_min

    def lagrangian(self, duals: np.ndarray, rc_min: float) -> float:
        """``sum pi + sigma + min(0, rc_min)``: a lower bound on ``min F`` over plans (every
        plan is one path)."""
        return float(duals[: self.n].sum() + duals[self.n] + min(0.0, rc_min))

    def generate(self, plan: Any, deadline: float) -> tuple[float, bool]:
        """Column generation from ``plan``'s path until no path prices out or ``deadline``,
        with the duals smoothed towards those of the best Lagrangian bound so far (Wentges:
        half way; at the LP's own duals when the smoothed ones price nothing out): the best
        Lagrangian bound on ``min F`` and whether it converged (-inf when no round finished)."""
        self.deadline = deadline
        self.add([self.plan_path(plan)])
        best = -math.inf
        center: np.ndarray | None = None
        while True:
            got = self.solve(deadline)
            if got is None:
                return best, False
            value, duals = got
            if center is None:
                center = duals
            paths: list[tuple[TiColumn, ...]] = []
            for share in (SMOOTHING, 0.0):
                priced = share * center + (1.0 - share) * duals
                paths, rc_min = self.price(priced)
                if self.ng_size:
                    # the quick search may find paths the LP holds (it certifies nothing
                    # then, so the bound would not move the duals): try the LP's duals
                    paths = [p for p in paths if p not in self._keys]
                bound = self.lagrangian(priced, rc_min)
                if bound > best:
                    best, center = bound, priced
                if paths:
                    break
            if not paths:
                if not self.priced_all:
                    return best, False
                return max(best, value), True
            if best >= value - PRICE_TOL * (1.0 + abs(value)):
                return best, True
            if time.perf_counter() >= deadline:
                return best, False
            self.add(paths)


def ratio_bound(
    ratio: float, f_lower: float, latency_floor_s: float, met_most: int | None = None
) -> float:
    """``G* <= `` this, from a lower bound ``f_lower`` on ``min F = min (L - M / lambda)`` at
    ``lambda = ratio``: ``lambda (1 + (-LB) / L_lb)`` when ``LB < 0``; when ``LB >= 0``,
    ``lambda`` or, given ``met_most >= M`` for every plan, ``lambda / (1 + lambda LB /
    met_most)`` (docs/sa_ordering.md Sec. 6, "The bound at any duals")."""
    if f_lower < 0:
        return ratio * (1.0 - f_lower / latency_floor_s)
    if met_most is None:
        return ratio
    return ratio / (1.0 + ratio * f_lower / met_most)


def time_indexed_bound(
    problem: Any,
    plan: Any,
    incumbent: float,
    latency_floor_s: float,
    time_limit: float,
    step_s: float = TIME_STEP_S,
    steps: int = 8,
    ng_size: int = 0,
    ng_warm: float = 0.0,
    primal_s: float = 0.0,
    primal_arc_share: float = ARC_SHARE,
) -> TimeIndexedBound:
    """The least ``lambda`` the time-indexed LP certifies (``G* <= lambda``) within
    ``time_limit``: from ``lambda`` = ``incumbent`` (a plan's G, so ``G* >= incumbent``), each
    ratio's Lagrangian bound ``LB`` gives ``G* <= lambda (1 + max(0, -LB) / L_lb)``; then a
    bisection between the incumbent and the least bound so far (``steps`` ratios at most),
    each ratio's master seeded with ``plan``'s path and every column priced before; with
    ``ng_size > 0`` the pricing carries ng-route memory (:class:`TimeIndexedMaster`).

    With ``ng_warm`` in ``(0, 1]`` and ``ng_size > 0``, two phases (docs/sa_ordering.md Sec.
    6, "Two phases"): first the run without memory, until its bisection ends or ``ng_warm`` of
    ``time_limit`` has passed; then, in the time left, ``steps`` ratios more with memory from
    the largest ratio the first phase could not certify, each master seeded with the paths
    priced before that the memory admits (those repeating a remembered request dropped). The
    second phase and the first phase's ratios with ``LB > 0`` also use ``G* <= lambda / (1 +
    lambda LB / N)`` (:func:`ratio_bound`), and after such a ratio the second phase tries that
    bound next. The bound is the least over both phases, never above the first phase's.

    With ``primal_s > 0`` the bound gets ``time_limit - primal_s`` seconds and then
    :func:`~slolab.models.sa_ti_primal.time_indexed_primal` the rest, over every path any
    ratio priced (``result.primal``: a plan and its exact G, so a run gives ``[G, bound]``),
    ``primal_arc_share`` of it for the arc MILP."""
    if not 0.0 <= ng_warm <= 1.0:
        raise ValueError(f"ng_warm must be in [0, 1], got {ng_warm}")
    if not 0.0 <= primal_s < time_limit:
        raise ValueError(f"primal_s must be in [0, time_limit), got {primal_s}")
    start = time.perf_counter()
    deadline = start + time_limit - primal_s
    result = TimeIndexedBound(bound=math.inf)
    priced: dict[tuple[TiColumn, ...], None] = {}

    def bisect(
        first: float,
        until: float,
        size: int,
        known: list[tuple[TiColumn, ...]],
        met_most: int | None = None,
    ) -> tuple[list[tuple[TiColumn, ...]], float]:
        """The bisection from the ratio ``first`` until ``until`` with memory ``size``, each
        master seeded with the paths of ``known`` the memory admits (every ratio tried goes
        into ``result``, whose bound stays the least so far); with ``met_most``, a ratio with
        ``LB > 0`` bounds by :func:`ratio_bound` and is followed by that bound. The paths
        priced and the largest ratio not certified (at least ``incumbent``)."""
        lo, lam = incumbent, first
        for _ in range(steps):
            master = TimeIndexedMaster(
                problem,
                lam,
                step_s,
                ng_size=size,
                exact_first=NG_EXACT_FIRST_CAP if met_most is not None else 0,
            )
            master.add([p for p in known if master.admits(p)] if size else known)
            lb, converged = master.generate(plan, until)
            known = master.paths
            if primal_s:
                priced.update(dict.fromkeys(known))
            result.ng_size = max(result.ng_size, master.ng_size)
            result.fallbacks += master.ng_fallbacks
            result.ticks, result.columns = master.late, len(master.paths)
            result.tried.append(
                {"ratio": lam, "f_lower": lb, "converged": float(converged), "ng": float(size)}
            )
            logger.debug(
                "time-indexed ratio %.6f (ng %d): LB %.3f s, converged %s, %d paths, %.1f s",
                lam,
                size,
                lb,
                converged,
                len(master.paths),
                time.perf_counter() - start,
            )
            if math.isfinite(lb):
                result.bound = min(result.bound, ratio_bound(lam, lb, latency_floor_s, met_most))
            if lb < 0:
                lo = lam
            if time.perf_counter() >= until or not math.isfinite(result.bound):
                break
            if met_most is not None and lb > 0 and result.bound < lam * (1.0 - 1e-6):
                lam = result.bound
                continue
            lam = 0.5 * (lo + result.bound)
            if result.bound - lo <= 1e-6 * result.bound:
                break
        return known, lo

    if ng_size and ng_warm:
        known, lo = bisect(incumbent, start + ng_warm * time_limit, 0, [])
        for tried in result.tried:
            if tried["f_lower"] > 0:
                result.bound = min(
                    result.bound,
                    ratio_bound(
                        tried["ratio"], tried["f_lower"], latency_floor_s, problem.n_requests
                    ),
                )
        if time.perf_counter() < deadline:
            bisect(lo, deadline, ng_size, known, problem.n_requests)
    else:
        bisect(incumbent, deadline, ng_size, [])
    if primal_s:
        result.primal = time_indexed_primal(
            problem,
            list(priced),
            start + time_limit - time.perf_counter(),
            plan,
            arc_share=primal_arc_share,
        )
    result.runtime_s = time.perf_counter() - start
    return result

"""SA ordering by batch columns: column generation, reduced-cost enumeration, restricted MILP.

A third exact method for :mod:`slolab.models.sa_ordering`, for snapshots (every request queued at
the same time, the paper's setting). A *column* is one batch placed in the sequence:
``c = (S, p, T)`` holds the set ``S`` of ``s = |S|`` requests at positions ``p - s + 1 .. p`` and
claims that the members ``T`` of ``S`` meet their SLO. Its cost in the Dinkelbach subproblem
``min F = L - M / lambda`` (seconds) is

    cost_c = d_S (N - p) + sum_{r in S} e_r(s) - |T| / lambda,      d_S = max_{r in S} e_r(s),

because a batch's duration delays the ``N - p`` requests after it (total latency is linear in
the batch durations once positions are fixed). The master problem picks one column per used
arc ``(p, s)`` so that the arcs form a path ``0 -> N`` and every request is in one column;
``sigma_a`` is the start time of arc ``a`` times its flow (time flows along the path: a node's
outgoing ``sigma`` is its incoming ``sigma`` plus the durations ending there), and a claim ``T``
needs ``sigma_a <= L_c lambda_c`` with ``L_c = min_{r in T} L_r(s)`` (the latest start of
docs/sa_ordering.md).

Exactness (docs/sa_ordering.md, Sec. 6):

1. The LP over all columns is solved by column generation. Pricing is exact and cheap: for an
   arc, fix the leader ``j`` (the longest member) and the deadline setter ``k`` (the member of
   ``T`` with the smallest latest start); then the best column takes the ``s - 1`` (or ``s - 2``)
   cheapest remaining members, each claimed met exactly when its latest start is at least
   ``L_k``.
2. Any dual vector ``y`` proves ``F(x) >= LB0 + sum_{c in x} rc_c`` for every plan ``x``
   (``LB0 = y^T b`` plus the reduced-cost terms of the ``sigma`` variables at their bounds). So a
   plan with ``F < 0`` uses only columns with ``rc_c <= -LB0 - N min(0, rc_min)``; these are
   enumerated exhaustively.
3. A MILP over the enumerated columns (PuLP, run on HiGHS or CBC by the backend) finds the
   best plan among them, hence ``min F`` over all plans. Dinkelbach moves ``lambda`` to the new
   plan's G until ``min F = 0``.
4. Claim-capacity cuts (:func:`claim_capacity_cuts`): for sets ``R`` of requests that meet only
   when their batch starts early, at most ``K(R)`` of them meet in any plan, so
   ``sum_c |T_c ∩ R| lambda_c <= K(R)``; the LP adds those it violates. Their duals change the
   reward of a claim per request, which the pricing of 1 absorbs exactly.
5. Start-time bounds (:func:`start_bounds`): a grouped floor ``LB'_q`` on the start of a batch
   after ``q`` requests (every plan) and a ceiling ``UB'_q`` from ``lambda`` (every plan with
   ``F <= 0``, which is all a Dinkelbach step needs) replace ``LB_q`` and ``UB_q`` in the time
   rows; the pricing reads the same arrays, so it stays exact.

Every plan is represented with its exact met set (take ``k`` = the met member with the smallest
latest start), and every feasible column combination is a plan that meets at least its claims,
so the MILP's optimum is the true ``min F``; incumbents are re-evaluated exactly anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.models.sa_ordering import (
    PROBLEM,
    RATIO_TOLERANCE,
    Batches,
    SAOrderingModel,
    sorted_full_batches,
)
from slolab.solvers.base import MilpFormulation, Result, Status
from slolab.solvers.registry import register_model

__all__ = [
    "ClaimCut",
    "Column",
    "ColumnMaster",
    "SAOrderingColumns",
    "claim_capacity",
    "claim_capacity_cuts",
    "latency_floor",
    "met_limit",
    "ratio_bound",
    "restricted_milp",
    "seeded_master",
    "start_bounds",
]

#: Reduced costs below ``-PRICING_TOLERANCE`` (s) enter the master.
PRICING_TOLERANCE = 1e-7
#: Slack added to the enumeration threshold against floating-point error (s, relative part
#: multiplies the master's objective scale).
ENUMERATION_SLACK = 1e-6
#: Stop enumerating beyond this many columns (the gap is too wide to close this way).
MAX_ENUMERATED = 50_000


@dataclass(frozen=True, slots=True)
class Column:
    """One batch placed in the sequence: members ``S`` (sorted), last position ``p``, size
    ``s = len(S)``, and the claimed-met members ``T`` (sorted, a subset of ``S``)."""

    members: tuple[int, ...]
    end: int
    met: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def start(self) -> int:
        return self.end - len(self.members)


def _column(members: Any, end: int, met: Any) -> Column:
    return Column(
        tuple(sorted(int(r) for r in members)), int(end), tuple(sorted(int(r) for r in met))
    )


def _smallest_prefix_sums(values: np.ndarray, need: int) -> np.ndarray:
    """``out[k, j]`` = sum of the ``need`` smallest of ``values[k, :j]`` (inf if fewer)."""
    rows, n = values.shape
    out = np.empty((rows, n))
    if need == 0:
        out[:] = 0.0
        return out
    top = np.full((rows, need), np.inf)
    for j in range(n):
        out[:, j] = top.sum(axis=1)
        top = np.sort(np.concatenate([top, values[:, j : j + 1]], axis=1), axis=1)[:, :need]
    return out


#: A cut enters the master when the LP's claims exceed its limit by more than this.
CUT_VIOLATION = 1e-6
#: Seconds added to each horizon of a claim-capacity bound (rounding of the latest starts).
CUT_SLACK_S = 1e-6
#: Most separation rounds (LP solve, then the violated cuts added) per master.
CUT_ROUNDS = 10


@dataclass(frozen=True, slots=True)
class ClaimCut:
    """A claim-capacity cut: in every plan at most ``limit`` of ``requests`` meet their SLO, so
    ``sum_c |T_c ∩ requests| lambda_c <= limit`` (docs/sa_ordering.md Sec. 6, "Cuts")."""

    requests: tuple[int, ...]
    limit: int

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError("a claim cut needs at least one request")
        if not 0 <= self.limit < len(self.requests):
            raise ValueError(
                f"limit must be in 0..{len(self.requests) - 1} (below the set's size), "
                f"got {self.limit}"
            )


def _fill_costs(floor: np.ndarray, b: int) -> np.ndarray:
    """``cost[m]``: a lower bound on the total duration of batches that hold ``m`` met
    requests of a set (``floor[i, c] = f_c`` of member ``i``, c = 1..b).

    A batch holding ``c`` met members lasts at least ``max(c-th smallest f_c, max of its
    members' f_c)``. Lowering each ``f_c`` to its running minimum from the end of one fixed
    order (by ``f_1``) makes every ``f_c`` nondecreasing in that order; then the cheapest
    placement of ``m`` met members groups the first ``m`` of the order consecutively (an
    exchange argument, docs/sa_ordering.md Sec. 6), which a dynamic program over the group sizes
    finds.
    """
    size = floor.shape[0]
    order = np.lexsort((np.arange(size), floor[:, 1]))
    # running minimum from the end: nondecreasing along the order, never above f_c
    envelope = np.minimum.accumulate(floor[order][::-1], axis=0)[::-1]
    smallest = np.full(b + 1, np.inf)
    for c in range(1, min(b, size) + 1):
        smallest[c] = np.partition(floor[:, c], c - 1)[c - 1]
    cost = np.full(size + 1, np.inf)
    cost[0] = 0.0
    for m in range(1, size + 1):
        for c in range(1, min(b, m) + 1):
            group = max(float(smallest[c]), float(envelope[m - 1, c]))
            cost[m] = min(cost[m], cost[m - c] + group)
    return cost


def claim_capacity(execs: np.ndarray, latest: np.ndarray, b: int) -> int:
    """Most requests of a set that can meet their SLO together in one plan (an upper bound).

    ``execs[i, s - 1]`` and ``latest[i, s - 1]`` are ``e_r(s)`` and ``L_r(s)`` of the set's
    members (``L_r(s) = -inf`` where ``r`` cannot meet at size ``s``). In a plan, let the last
    batch holding a met member have size ``s`` and, among its met members, ``k`` the one with
    the smallest ``L_k(s)``: it starts by ``L_k(s)`` and holds at most ``c(k, s) = min(s, 1 +
    #{r != k : L_r(s) >= L_k(s)})`` met members; the batches before it that hold the other met
    members (none of them ``k``) last at most that long together, at least
    :func:`_fill_costs` over the set without ``k`` (``f_c(r) = min_{s >= c, r meets at s}
    e_r(s)``). The bound is the largest ``c(k, s) + m`` with ``cost[m] <= L_k(s)``, at most the
    set's size.
    """
    size = execs.shape[0]
    can = latest > -np.inf
    floor = np.full((size, b + 1), np.inf)  # floor[i, c] = f_c of member i
    for c in range(b, 0, -1):
        here = np.where(can[:, c - 1], execs[:, c - 1], np.inf)
        floor[:, c] = here if c == b else np.minimum(here, floor[:, c + 1])
    best = 0
    for k in range(size):
        if not can[k].any():
            continue
        rest = np.arange(size) != k
        cost = _fill_costs(floor[rest], b)
        for s in np.nonzero(can[k])[0] + 1:
            horizon = float(latest[k, s - 1])
            last = min(int(s), int((latest[rest, s - 1] >= horizon).sum()) + 1)
            # the slack covers the rounding between latest starts and the exact token-time test
            fit = int(np.nonzero(cost <= horizon + CUT_SLACK_S)[0].max())
            best = max(best, min(size, last + fit))
    return best


def claim_capacity_cuts(problem: Any) -> list[ClaimCut]:
    """Claim-capacity cuts of a snapshot, one per distinct latest start that makes one.

    For a horizon ``H`` (a request's latest start at its best size, ``max_s L_r(s)``), the set
    ``R_H`` of the requests whose horizon is at most ``H`` holds at most
    :func:`claim_capacity` met requests in any plan. Sets whose limit is not below their size
    cut nothing and are left out.
    """
    n, b = problem.n_requests, problem.batch_size
    latest = np.asarray(problem.latest_start_s, dtype=float)[:, 1:] - float(problem.arrival_s.min())
    latest = np.where(latest >= 0.0, latest, -np.inf)
    execs = np.asarray(problem.exec_s, dtype=float)[:, 1:]
    horizon = latest.max(axis=1)
    cuts = []
    for h in sorted({float(v) for v in horizon if 0.0 <= v < math.inf}):
        members = [r for r in range(n) if 0.0 <= horizon[r] <= h]
        limit = claim_capacity(execs[members], latest[members], b)
        if limit < len(members):
            cuts.append(ClaimCut(tuple(members), limit))
    return cuts


#: Seconds added to each start ceiling of :func:`start_bounds` (rounding of ``M / lambda``).
START_SLACK_S = 1e-6


def _monotone_floor(problem: Any) -> np.ndarray:
    """``LB'[q]``: a lower bound on the total duration of batches holding ``q`` or more
    requests, the larger of ``problem.start_lower_bounds_s()`` and the batch-grouping bound of
    :func:`_fill_costs` over every request (``f_c(r) = min_{s >= c} e_r(s)``)."""
    n, b = problem.n_requests, problem.batch_size
    execs = np.asarray(problem.exec_s, dtype=float)[:, 1:]
    floor = np.full((n, b + 1), np.inf)
    for c in range(b, 0, -1):
        floor[:, c] = execs[:, c - 1] if c == b else np.minimum(execs[:, c - 1], floor[:, c + 1])
    grouped = _fill_costs(floor, b)
    # "q or more": the smallest cost over m >= q (the DP's costs need not be monotone)
    grouped = np.minimum.accumulate(grouped[::-1])[::-1]
    return np.maximum(np.asarray(problem.start_lower_bounds_s(), dtype=float), grouped)


def start_bounds(
    problem: Any, ratio: float | None, met_limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Start-time bounds ``(LB'_q, UB'_q)``, q = 0..N, of a snapshot (docs/sa_ordering.md
    Sec. 6, "Start-time bounds").

    ``LB'_q`` (every plan): the batches before a batch at node ``q`` hold ``q`` requests, so
    they last at least the grouping bound of :func:`_monotone_floor`. ``UB'_q`` (every plan
    with ``F = L - M / lambda <= 0`` at ``lambda`` = ``ratio``; plain ``UB_q`` without a
    ratio): a batch starting at ``t`` at node ``q`` delays the ``N - q`` later requests by
    ``t``, so ``(N - q) t + C_q <= L <= M / lambda <= met_limit / lambda`` with ``C_q`` the
    executions and the waits the ``q`` earlier and ``N - q`` later requests cause among
    themselves; ``met_limit`` (default: the meetable requests) bounds ``M``.
    """
    n, b = problem.n_requests, problem.batch_size
    lower = _monotone_floor(problem)
    upper = np.asarray(problem.start_upper_bounds_s(), dtype=float).copy()
    if ratio is None:
        return lower, upper
    most = (
        problem.meetable_requests
        if met_limit is None
        else min(met_limit, problem.meetable_requests)
    )
    own = float(np.min(np.asarray(problem.exec_s, dtype=float)[:, 1:], axis=1).sum())
    # waits[k]: least total wait of k requests served from an empty server (the i-th to start
    # has at least i - B + 1 requests in earlier batches)
    waits = np.concatenate([[0.0], np.cumsum([lower[max(0, i - b + 1)] for i in range(n)])])
    budget = most / ratio
    for q in range(1, n):
        ceiling = (budget - own - waits[q] - waits[n - q]) / (n - q) + START_SLACK_S
        upper[q] = min(upper[q], max(ceiling, float(lower[q])))
    return lower, upper


def met_limit(problem: Any, cuts: Iterable[ClaimCut]) -> int:
    """A bound on the met count of every plan: the meetable requests, or for a cut on ``R``,
    ``K(R)`` plus the meetable requests outside ``R``."""
    latest = np.max(np.asarray(problem.latest_start_s, dtype=float)[:, 1:], axis=1)
    meetable = set(np.nonzero(latest >= np.asarray(problem.arrival_s))[0].tolist())
    most = len(meetable)
    for cut in cuts:
        most = min(most, cut.limit + len(meetable - set(cut.requests)))
    return int(most)


class ColumnMaster:
    """The LP master of the column formulation at one ``lambda`` (``None``: latency only,
    no claims and no deadline rows), held in a ``highspy.Highs`` object.

    Rows: ``assign_r`` (= 1), ``flow_q`` for q = 0..N-1 (out minus in = [q = 0]) and, with a
    ratio, ``time_q`` for q = 1..N-1 (``sigma`` out minus ``sigma`` in minus the durations
    ending at ``q`` = 0), then a claim row (``sigma_a - sum min(L_c, UB_q) lambda_c <= 0``) and
    a floor row (``sigma_a - LB_q sum lambda_c >= 0``) for each arc starting after position 0.

    ``unclaimable`` requests are never claimed met: the master is then the relaxation of the
    plans counted as if those requests missed their SLO (a diagnostic of where the LP's claims
    come from, docs/sa_ordering.md Sec. 10).

    ``bounds=True`` replaces the start floors ``LB_q`` and ceilings ``UB_q`` by those of
    :func:`start_bounds` (``met_limit`` bounds the met count; the ceilings hold for the plans
    with ``F <= 0``, so the LP is then a relaxation of those plans only, which is all a
    Dinkelbach step needs: the incumbent has ``F = 0``).

    ``cuts`` (claim-capacity cuts, :class:`ClaimCut`; with a ratio only) become rows
    ``sum_c |T_c ∩ R| lambda_c <= limit`` after the others; :meth:`add_cut` adds more and
    :meth:`separate` adds those the LP violates. Their duals lower the reward of a claim of each
    of their requests, so pricing stays exact.
    """

    def __init__(
        self,
        problem: Any,
        ratio: float | None,
        unclaimable: Iterable[int] = (),
        cuts: Iterable[ClaimCut] = (),
        bounds: bool = False,
        met_limit: int | None = None,
    ) -> None:
        import highspy

        if not problem.snapshot:
            raise ValueError("the column formulation needs a snapshot (all arrivals equal)")
        if ratio is not None and not ratio > 0:
            raise ValueError(f"ratio must be > 0, got {ratio}")
        self.problem = problem
        self.ratio = ratio
        n, b = problem.n_requests, problem.batch_size
        self.n, self.b = n, b
        self.exec = np.asarray(problem.exec_s, dtype=float)
        self.latest = np.asarray(problem.latest_start_s, dtype=float) - float(
            problem.arrival_s.min()
        )
        self.unclaimable = tuple(sorted({int(r) for r in unclaimable}))
        for r in self.unclaimable:
            if not 0 <= r < n:
                raise ValueError(f"unclaimable request {r} is not in 0..{n - 1}")
        self.latest[list(self.unclaimable), :] = -np.inf
        if bounds:
            self.lb, self.ub = start_bounds(problem, ratio, met_limit)
        else:
            self.lb = problem.start_lower_bounds_s()
            self.ub = problem.start_upper_bounds_s()
        self.reward = 0.0 if ratio is None else 1.0 / ratio
        #: 1 prices by reduced cost; 0 prices a Farkas ray (the columns' costs left out)
        self.cost_scale = 1.0
        self.highs = highspy.Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)
        self._inf = highspy.kHighsInf
        h = self.highs
        self.row_assign = 0
        self.row_flow = n
        self.row_time = 2 * n  # with a ratio: time_q is row 2N + q - 1, q = 1..N-1
        empty = (0, np.array([], dtype=np.int32), np.array([]))
        for _ in range(n):
            h.addRow(1.0, 1.0, *empty)
        for q in range(n):
            rhs = 1.0 if q == 0 else 0.0
            h.addRow(rhs, rhs, *empty)
        self.arcs = [(p, s) for p in range(1, n + 1) for s in range(1, min(b, p) + 1) if p > s]
        self.claim_row: dict[tuple[int, int], int] = {}
        self.floor_row: dict[tuple[int, int], int] = {}
        self.sigma_col: dict[tuple[int, int], int] = {}
        if ratio is not None:
            for _ in range(1, n):
                h.addRow(0.0, 0.0, *empty)
            for a in self.arcs:
                self.claim_row[a] = h.getNumRow()
                h.addRow(-self._inf, 0.0, *empty)
                self.floor_row[a] = h.getNumRow()
                h.addRow(0.0, self._inf, *empty)
            # sigma_a: start time of arc a times its flow (0 when unused)
            for a in self.arcs:
                p, s = a
                q = p - s
                idx = [self.row_time + q - 1, self.claim_row[a], self.floor_row[a]]
                val = [1.0, 1.0, 1.0]
                if p < n:
                    idx.append(self.row_time + p - 1)
                    val.append(-1.0)
                self.sigma_col[a] = h.getNumCol()
                h.addCol(
                    0.0,
                    0.0,
                    float(self.ub[q]),
                    len(idx),
                    np.array(idx, dtype=np.int32),
                    np.array(val),
                )
        self.n_rows = h.getNumRow()
        self.n_aux = h.getNumCol()
        self.columns: list[Column] = []
        self._index: dict[Column, int] = {}
        self.cuts: list[ClaimCut] = []
        self.cut_rows: list[int] = []
        self._cut_sets: list[set[int]] = []
        for cut in cuts:
            self.add_cut(cut)

    # -- cuts -------------------------------------------------------------------------------
    def add_cut(self, cut: ClaimCut) -> bool:
        """Add the row of ``cut`` with the entries of the columns already in the master (False
        when it is already there)."""
        if self.ratio is None:
            raise ValueError("claim cuts need a ratio (the latency-only master has no claims)")
        if cut in self.cuts:
            return False
        members = set(cut.requests)
        if not members <= set(range(self.n)):
            raise ValueError(f"claim cut requests must be in 0..{self.n - 1}, got {cut.requests}")
        idx = []
        val = []
        for i, col in enumerate(self.columns):
            count = len(members.intersection(col.met))
            if count:
                idx.append(self.n_aux + i)
                val.append(float(count))
        self.cut_rows.append(self.highs.getNumRow())
        self.highs.addRow(
            -self._inf, float(cut.limit), len(idx), np.array(idx, dtype=np.int32), np.array(val)
        )
        self.cuts.append(cut)
        self._cut_sets.append(members)
        self.n_rows = self.highs.getNumRow()
        return True

    def cut_entries(self, col: Column) -> tuple[list[int], list[float]]:
        """Entries of ``col`` in the cut rows: how many of each cut's requests it claims."""
        idx: list[int] = []
        val: list[float] = []
        for row, members in zip(self.cut_rows, self._cut_sets, strict=True):
            count = len(members.intersection(col.met))
            if count:
                idx.append(row)
                val.append(float(count))
        return idx, val

    def claim_duals(self, duals: np.ndarray) -> np.ndarray:
        """Per request, the sum of the duals (<= 0) of the cuts holding it: what a claim of it
        adds to the reward ``1 / lambda`` in a reduced cost."""
        out = np.zeros(self.n)
        for row, cut in zip(self.cut_rows, self.cuts, strict=True):
            out[list(cut.requests)] += float(duals[row])
        return out

    def violated(self, candidates: Iterable[ClaimCut]) -> list[ClaimCut]:
        """The cuts of ``candidates`` not in the master that the last LP solution violates by
        more than :data:`CUT_VIOLATION`."""
        y = self.claimed()
        return [
            cut
            for cut in candidates
            if cut not in self.cuts and y[list(cut.requests)].sum() > cut.limit + CUT_VIOLATION
        ]

    def separate(
        self, candidates: Iterable[ClaimCut], deadline: float, rounds: int = CUT_ROUNDS
    ) -> tuple[float, float, np.ndarray, bool]:
        """Column generation, then the violated ``candidates`` added and column generation
        again, until none is violated, ``rounds`` rounds have run or ``deadline`` passes.
        Returns what the last :meth:`solve_lp` returned (its bound is valid: every plan
        satisfies every cut)."""
        pool = list(candidates)
        out = self.solve_lp(deadline)
        for _ in range(rounds):
            if not out[3] or time.perf_counter() > deadline:
                break
            found = self.violated(pool)
            if not found:
                break
            for cut in found:
                self.add_cut(cut)
            out = self.solve_lp(deadline)
        return out

    # -- columns ----------------------------------------------------------------------------
    def duration(self, col: Column) -> float:
        return float(max(self.exec[r, col.size] for r in col.members))

    def deadline(self, col: Column) -> float:
        """``L_c``: the latest start at which every claimed member meets (inf without claims)."""
        if not col.met:
            return math.inf
        return float(min(self.latest[r, col.size] for r in col.met))

    def cost(self, col: Column) -> float:
        """``d_S (N - p) + sum e_r(s) - |T| / lambda`` (s)."""
        s = col.size
        return (
            self.duration(col) * (self.n - col.end)
            + float(sum(self.exec[r, s] for r in col.members))
            - self.reward * len(col.met)
        )

    def valid(self, col: Column) -> bool:
        """A column is allowed when its claim can hold: ``L_c >= LB_q`` (and no claims in the
        latency-only master)."""
        if not col.met:
            return True
        if self.ratio is None:
            return False
        return self.deadline(col) >= self.lb[col.start]

    def add(self, col: Column) -> bool:
        """Add ``col`` to the master (False when it is already there)."""
        if col in self._index:
            return False
        if not self.valid(col):
            raise ValueError(f"column {col} claims a deadline it cannot meet")
        n = self.n
        idx = [self.row_assign + r for r in col.members]
        val = [1.0] * col.size
        idx.append(self.row_flow + col.start)
        val.append(1.0)
        if col.end < n:
            idx.append(self.row_flow + col.end)
            val.append(-1.0)
        idx_t, val_t = self.time_entries(col)
        idx_c, val_c = self.cut_entries(col)
        idx_t += idx_c
        val_t += val_c
        self.highs.addCol(
            self.cost(col),
            0.0,
            self._inf,
            len(idx) + len(idx_t),
            np.array(idx + idx_t, dtype=np.int32),
            np.array(val + val_t),
        )
        self._index[col] = len(self.columns)
        self.columns.append(col)
        return True

    def time_entries(self, col: Column) -> tuple[list[int], list[float]]:
        """Entries of ``col`` in the time rows: ``-d_c`` in ``time_p``, ``-min(L_c, UB_q)`` in
        its arc's claim row and ``-LB_q`` in its floor row (none without a ratio)."""
        if self.ratio is None:
            return [], []
        idx: list[int] = []
        val: list[float] = []
        if col.end < self.n:
            idx.append(self.row_time + col.end - 1)
            val.append(-self.duration(col))
        if col.start >= 1:
            a = (col.end, col.size)
            idx += [self.claim_row[a], self.floor_row[a]]
            val += [-self.claim_limit(col), -float(self.lb[col.start])]
        return idx, val

    def claim_limit(self, col: Column) -> float:
        """``min(L_c, UB_q)``: the latest start the column allows (``UB_q`` without claims)."""
        return min(self.deadline(col), float(self.ub[col.start]))

    def add_plan(self, plan: Any) -> None:
        """Add the columns of a plan (ordered batches), each claiming its truly met members."""
        position = 0
        start_s = 0.0
        for batch in plan:
            s = len(batch)
            position += s
            met = [] if self.ratio is None else [r for r in batch if self.latest[r, s] >= start_s]
            col = _column(batch, position, met)
            if not self.valid(col):  # rounding: a real start is never below LB_q
                col = _column(batch, position, ())
            self.add(col)
            start_s += max(float(self.exec[r, s]) for r in batch)

    # -- LP -------------------------------------------------------------------------------
    def _duals(self) -> tuple[np.ndarray, float]:
        import highspy

        h = self.highs
        h.run()
        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"column master LP ended {h.modelStatusToString(status)}")
        return np.array(h.getSolution().row_dual), float(h.getInfo().objective_function_value)

    def pricing_tables(
        self,
        duals: np.ndarray,
        sizes: Iterable[int] | None = None,
        unclaimed: Iterable[int] = (),
        bonus: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        """Per batch size (every size, or ``sizes``): members sorted by ``(e_r(s), r)``, their
        dual-adjusted values and the member-selection tables of every deadline setter
        (independent of the position). A request whose dual is ``-inf`` is never chosen, one
        in ``unclaimed`` never claimed, and a claim of request ``r`` is worth ``bonus[r]`` (s)
        more than ``1 / lambda``."""
        n = self.n
        pi = duals[self.row_assign : self.row_assign + n]
        never = list(unclaimed)
        tables = []
        for s in range(1, self.b + 1) if sizes is None else sizes:
            keys = np.array(sorted(range(n), key=lambda r: (self.exec[r, s], r)))
            e = self.exec[keys, s]
            value = self.cost_scale * e - pi[keys]
            latest = self.latest[:, s].copy()
            latest[never] = -np.inf
            late = latest[keys]
            none = value + _smallest_prefix_sums(value[None, :], s - 1)[0]
            table = {"s": s, "keys": keys, "e": e, "value": value, "late": late, "none": none}
            if self.ratio is not None:
                reward = self.cost_scale * self.reward + (0.0 if bonus is None else bonus[keys])
                if self.cuts:
                    reward = reward + self.claim_duals(duals)[keys]
                table.update(self._claim_tables(value, late, s, reward))
            tables.append(table)
        return tables

    def _claim_tables(
        self, value: np.ndarray, late: np.ndarray, s: int, reward: Any
    ) -> dict[str, np.ndarray]:
        """``eligible[k, i]`` (member ``i`` may be claimed when ``k`` sets the deadline; key
        order on ties), the claim-adjusted values (``reward``: per member, in key order, or one
        number) and ``base[k, j]``: the best members of a column with leader ``j`` and setter
        ``k`` (inf where ``k`` is after ``j``)."""
        n = self.n
        idx = np.arange(n)
        eligible = (late[None, :] > late[:, None]) | (
            (late[None, :] == late[:, None]) & (idx[None, :] >= idx[:, None])
        )
        eligible &= late[None, :] > -np.inf
        with_claims = value[None, :] - eligible * np.broadcast_to(reward, value.shape)[None, :]
        base = np.full((n, n), np.inf)
        if s >= 2:
            excluded = with_claims.copy()
            excluded[idx, idx] = np.inf
            pair = _smallest_prefix_sums(excluded, s - 2)
            base = with_claims + np.diag(with_claims)[:, None] + pair
            base[idx[:, None] >= idx[None, :]] = np.inf
        own = _smallest_prefix_sums(with_claims, s - 1)
        base[idx, idx] = np.diag(with_claims) + np.diag(own)
        return {"eligible": eligible, "with_claims": with_claims, "base": base}

    def _arc_terms(self, duals: np.ndarray, p: int, s: int) -> tuple[float, float, float]:
        """Leader coefficient ``N - p + eta_p``, the constant ``-phi_q + phi_p + kappa_a UB_q
        + nu_a LB_q`` and ``-kappa_a`` of arc ``(p, s)`` (``eta``: time rows, ``kappa``: claim
        rows, ``nu``: floor rows)."""
        n = self.n
        q = p - s
        lead = self.cost_scale * float(n - p)
        const = -float(duals[self.row_flow + q])
        if p < n:
            const += float(duals[self.row_flow + p])
            if self.ratio is not None:
                lead += float(duals[self.row_time + p - 1])
        neg_kappa = 0.0
        a = (p, s)
        if a in self.claim_row:
            kappa = float(duals[self.claim_row[a]])
            const += kappa * float(self.ub[q]) + float(duals[self.floor_row[a]]) * float(self.lb[q])
            neg_kappa = -kappa
        return lead, const, neg_kappa

    def _arc_matrix(
        self, table: dict[str, Any], duals: np.ndarray, p: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Reduced costs at arc ``(p, s)``: ``(none[j], claims[k, j])`` for leader ``j`` and
        deadline setter ``k`` (inf where not allowed; one inf row without a ratio)."""
        s = table["s"]
        q = p - s
        lead, const, neg_kappa = self._arc_terms(duals, p, s)
        leader = table["e"] * lead
        none = leader + table["none"] + const
        if self.ratio is None:
            return none, np.full((1, self.n), np.inf)
        late = table["late"]
        allowed = (late >= self.lb[q]) & (late > -np.inf)
        room = np.where(allowed, np.maximum(0.0, float(self.ub[q]) - late), 0.0)
        extra = neg_kappa * room
        claims = table["base"] + leader[None, :] + extra[:, None] + const
        claims[~allowed, :] = np.inf
        return none, claims

    def _build(
        self, table: dict[str, Any], p: int, k: int | None, j: int, others: list[int]
    ) -> Column:
        keys = table["keys"]
        chosen = [j, *others] + ([k] if k is not None and k != j else [])
        members = [int(keys[i]) for i in chosen]
        met = [] if k is None else [int(keys[i]) for i in chosen if table["eligible"][k, i]]
        return _column(members, p, met)

    def price(self, duals: np.ndarray) -> tuple[list[Column], float]:
        """The most negative column of every arc (when below the tolerance) and the smallest
        reduced cost over all columns (exact: every column is dominated by one examined)."""
        found = []
        rc_min = math.inf
        for table in self.pricing_tables(duals):
            for p in range(table["s"], self.n + 1):
                col, best = self.price_arc(table, duals, p)
                rc_min = min(rc_min, best)
                if best < -PRICING_TOLERANCE:
                    found.append(col)
        return found, rc_min

    def price_arc(self, table: dict[str, Any], duals: np.ndarray, p: int) -> tuple[Column, float]:
        """The column of smallest reduced cost at arc ``(p, s)`` (``s`` from ``table``) and that
        reduced cost, as pricing computes it from the table."""
        s = table["s"]
        none, claims = self._arc_matrix(table, duals, p)
        j0 = int(np.argmin(none))
        flat = int(np.argmin(claims))
        k, j = divmod(flat, self.n)
        best = min(float(none[j0]), float(claims[k, j]))
        if none[j0] <= claims[k, j]:
            order = sorted(range(j0), key=lambda i: table["value"][i])
            return self._build(table, p, None, j0, order[: s - 1]), best
        w = table["with_claims"][k]
        pool = sorted((i for i in range(j) if i != k), key=lambda i: w[i])
        need = s - 1 if k == j else s - 2
        return self._build(table, p, k, j, pool[:need]), best

    def solve_lp(self, deadline: float) -> tuple[float, float, np.ndarray, bool]:
        """Column generation until no column prices out (or ``deadline``, a perf_counter time).

        Returns ``(lp_value, lower_bound, duals, converged)``: ``lower_bound`` is valid for
        every plan whatever the convergence, ``LB0 + N min(0, rc_min)``.
        """
        while True:
            duals, value = self._duals()
            found, rc_min = self.price(duals)
            added = sum(self.add(c) for c in found)
            if not added or time.perf_counter() > deadline:
                lb0 = self.dual_value(duals)
                return value, lb0 + self.n * min(0.0, rc_min), duals, not added

    def claimed(self) -> np.ndarray:
        """``y_r = sum_{c: r in T_c} lambda_c``: how much of each request the last LP solution
        claims met (fractional where the LP mixes columns)."""
        x = np.asarray(self.highs.getSolution().col_value)[self.n_aux :]
        y = np.zeros(self.n)
        for col, value in zip(self.columns, x, strict=True):
            y[list(col.met)] += value
        return y

    def dual_value(self, duals: np.ndarray) -> float:
        """``LB0 = y^T b + sum_a min(0, rc_sigma_a UB_q)``: with the reduced costs ``rc_c`` of
        the same duals, ``F(x) >= LB0 + sum_{c in x} rc_c`` for every plan ``x``."""
        n = self.n
        value = float(duals[self.row_assign : self.row_assign + n].sum())
        value += float(duals[self.row_flow])
        for p, s in self.sigma_col:
            q = p - s
            used = duals[self.row_time + q - 1] + duals[self.claim_row[p, s]]
            used += duals[self.floor_row[p, s]]
            if p < n:
                used -= duals[self.row_time + p - 1]
            value += min(0.0, -float(used) * float(self.ub[q]))
        for row, cut in zip(self.cut_rows, self.cuts, strict=True):
            # claims are >= 0: y A x >= min(0, y) limit whatever the sign rounding gave y
            value += min(0.0, float(duals[row])) * cut.limit
        return value

    def reduced_cost(self, col: Column, duals: np.ndarray) -> float:
        """``rc_c = cost_c - y^T A_c`` computed from the column itself (a cross-check of
        pricing)."""
        rc = self.cost_scale * self.cost(col)
        rc -= float(sum(duals[self.row_assign + r] for r in col.members))
        rc -= float(duals[self.row_flow + col.start])
        if col.end < self.n:
            rc += float(duals[self.row_flow + col.end])
        idx, val = self.time_entries(col)
        idx_c, val_c = self.cut_entries(col)
        rc -= float(sum(v * duals[i] for i, v in zip(idx + idx_c, val + val_c, strict=True)))
        return rc

    # -- enumeration ---------------------------------------------------------------------
    def enumerate(
        self, duals: np.ndarray, threshold: float, deadline: float
    ) -> list[Column] | None:
        """Every column with reduced cost ``<= threshold`` (each plan-relevant claim set: empty
        or maximal for its deadline setter). None when more than :data:`MAX_ENUMERATED` are
        found or ``deadline`` passes."""
        out: set[Column] = set()
        for table in self.pricing_tables(duals):
            s = table["s"]
            for p in range(s, self.n + 1):
                none, claims = self._arc_matrix(table, duals, p)
                for j in np.nonzero(none <= threshold)[0].tolist():
                    base = float(none[j]) - float(table["none"][j] - table["value"][j])
                    w = table["value"]
                    pool = sorted(range(j), key=lambda i: w[i])
                    for sub in _subsets_below(pool, w, s - 1, threshold - base):
                        out.add(self._build(table, p, None, j, list(sub)))
                        if len(out) > MAX_ENUMERATED:
                            return None
                ks, js = np.nonzero(claims <= threshold)
                for k, j in zip(ks.tolist(), js.tolist(), strict=True):
                    w = table["with_claims"][k]
                    need = s - 1 if k == j else s - 2
                    # claims[k, j] = fixed part + best selection; recover the fixed part
                    pool = sorted((i for i in range(j) if i != k), key=lambda i: w[i])
                    best = float(sum(w[i] for i in pool[:need]))
                    fixed = float(claims[k, j]) - best
                    for sub in _subsets_below(pool, w, need, threshold - fixed):
                        out.add(self._build(table, p, k, j, list(sub)))
                        if len(out) > MAX_ENUMERATED:
                            return None
                if time.perf_counter() > deadline:
                    return None
        return sorted(out, key=lambda c: (c.end, c.size, c.members, c.met))


def _subsets_below(
    pool: list[int], weight: np.ndarray, m: int, budget: float
) -> list[tuple[int, ...]]:
    """Every ``m``-subset of ``pool`` (sorted by ascending ``weight``) whose weights sum to at
    most ``budget``, by depth-first search with the cheapest completion as the bound."""
    found: list[tuple[int, ...]] = []
    w = [float(weight[i]) for i in pool]
    size = len(pool)
    if m == 0:
        if budget >= 0:
            found.append(())
        return found
    acc: list[int] = []

    def dfs(first: int, left: int, room: float) -> None:
        if left == 0:
            found.append(tuple(acc))
            return
        for i in range(first, size - left + 1):
            if w[i] + sum(w[i + 1 : i + left]) > room:
                break
            acc.append(pool[i])
            dfs(i + 1, left - 1, room - w[i])
            acc.pop()

    dfs(0, m, budget)
    return found


def latency_floor(problem: Any, plan: Any, deadline: float) -> float:
    """A lower bound on the total latency of every plan (s): the latency-only master's bound
    (valid even if ``deadline``, a perf_counter time, cuts column generation short), or the
    closed-form floor when that is larger. ``plan`` seeds the master."""
    floor = ColumnMaster(problem, None)
    floor.add_plan(plan)
    _, lower, _, _ = floor.solve_lp(deadline)
    return max(problem.latency_lower_bound_s(), lower)


def seeded_master(
    problem: Any,
    ratio: float,
    plan: Any,
    known: Iterable[Column],
    cuts: Iterable[ClaimCut] = (),
    bounds: bool = False,
    met_limit: int | None = None,
) -> ColumnMaster:
    """The master at ``ratio`` holding the columns of ``plan`` and every valid column of
    ``known`` (columns from earlier Dinkelbach steps: their validity does not depend on the
    ratio, only their cost), with the rows of ``cuts`` (valid at every ratio) and, with
    ``bounds``, the start-time bounds of :func:`start_bounds`."""
    master = ColumnMaster(problem, ratio, cuts=cuts, bounds=bounds, met_limit=met_limit)
    master.add_plan(plan)
    for col in sorted(known, key=lambda c: (c.end, c.members, c.met)):
        if master.valid(col):
            master.add(col)
    return master


def ratio_bound(ratio: float, f_lower: float, latency_lb: float) -> float:
    """``G* <= lambda (1 + max(0, -LB) / L_lb)`` from a lower bound ``LB`` on ``min F`` at
    ``lambda`` = ``ratio`` and the latency floor ``L_lb`` (docs Sec. 6, "Bound")."""
    return ratio * (1.0 + max(0.0, -f_lower) / latency_lb)


def restricted_milp(master: ColumnMaster, columns: list[Column], pulp: Any) -> tuple[Any, Any]:
    """The master as a 0-1 MILP over ``columns`` (PuLP): ``min sum cost_c z_c`` (s) with one
    column per request, a path of arcs, flow-weighted start times ``sigma_a`` and the claims'
    deadlines (the same rows as the LP). Returns ``(problem, read_plan)``."""
    n = master.n
    prob = pulp.LpProblem("sa_ordering_columns", pulp.LpMinimize)
    z = [prob.add_variable(f"z_{i}", cat="Binary") for i in range(len(columns))]
    by_request: dict[int, list[Any]] = {r: [] for r in range(n)}
    out: dict[int, list[Any]] = {q: [] for q in range(n + 1)}
    into: dict[int, list[Any]] = {q: [] for q in range(n + 1)}
    for var, col in zip(z, columns, strict=True):
        for r in col.members:
            by_request[r].append(var)
        out[col.start].append(var)
        into[col.end].append(var)
    lp = pulp.lpSum
    prob += lp(master.cost(c) * v for v, c in zip(z, columns, strict=True))
    for r in range(n):
        prob += lp(by_request[r]) == 1, f"assign_{r}"
    prob += lp(out[0]) == 1, "path_start"
    for q in range(1, n):
        prob += lp(out[q]) == lp(into[q]), f"path_{q}"
    if master.ratio is not None:
        sigma = {
            a: prob.add_variable(
                f"sigma_{a[0]}_{a[1]}", lowBound=0, upBound=float(master.ub[a[0] - a[1]])
            )
            for a in master.arcs
        }
        arc_cols: dict[tuple[int, int], list[tuple[Any, Column]]] = {a: [] for a in master.arcs}
        time_in: dict[int, list[Any]] = {q: [] for q in range(n + 1)}
        for var, col in zip(z, columns, strict=True):
            time_in[col.end].append(master.duration(col) * var)
            if col.start >= 1:
                arc_cols[col.end, col.size].append((var, col))
        for q in range(1, n):
            leaving = [sigma[a] for a in master.arcs if a[0] - a[1] == q]
            entering = [sigma[a] for a in master.arcs if a[0] == q]
            prob += lp(leaving) == lp(entering) + lp(time_in[q]), f"time_{q}"
        for a, members in arc_cols.items():
            q = a[0] - a[1]
            prob += (
                sigma[a] <= lp(master.claim_limit(c) * v for v, c in members),
                f"claim_{a[0]}_{a[1]}",
            )
            prob += (
                sigma[a] >= float(master.lb[q]) * lp(v for v, _ in members),
                f"floor_{a[0]}_{a[1]}",
            )

    def read_plan() -> tuple[tuple[int, ...], ...]:
        used = [c for v, c in zip(z, columns, strict=True) if (v.varValue or 0.0) > 0.5]
        return tuple(c.members for c in sorted(used, key=lambda c: c.end))

    return prob, read_plan


#: Share of the remaining time a restricted MILP over the generated columns may use to improve
#: the incumbent when the gap is too wide to enumerate.
HEURISTIC_SHARE = 0.5


@register_model(f"{PROBLEM}-columns")
class SAOrderingColumns(SAOrderingModel):
    """SA ordering solved by batch columns (snapshots; module docstring, docs Sec. 6).

    ``solve(model, "highs" | "cbc")`` runs column generation (HiGHS LP through highspy),
    enumerates every column that can still improve the incumbent and solves the restricted
    MILP on the chosen backend, inside Dinkelbach iterations. When the LP gap is too wide to
    enumerate (more than :data:`MAX_ENUMERATED` columns), a MILP over the generated columns only
    tries to improve the incumbent; without an improvement the run ends with the LP's bound,
    FEASIBLE (or TIME_LIMIT when the time is up). Instances with
    different arrivals fall back to the position-arc MILP; CP-SAT and brute force are the
    parent's.

    ``cuts=True`` (the default) separates the claim-capacity cuts (:func:`claim_capacity_cuts`)
    in every Dinkelbach step's LP; ``cuts=False`` solves the plain column LP. ``bounds=True``
    (the default) uses the start-time bounds of :func:`start_bounds` in the time rows;
    ``bounds=False`` the plain ``LB_q`` and ``UB_q``.
    """

    name = f"{PROBLEM}-columns"

    def __init__(self, instance: Any, cuts: bool = True, bounds: bool = True) -> None:
        super().__init__(instance)
        self.use_cuts = bool(cuts)
        self.use_bounds = bool(bounds)

    def cut_pool(self) -> list[ClaimCut]:
        """The claim-capacity cuts separated in the LP (none with ``cuts=False``)."""
        return claim_capacity_cuts(self.problem) if self.use_cuts else []

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        if backend.formulation == "milp" and self.problem.snapshot:
            return self._columns(backend, time_limit)
        return super().solve_with(backend, time_limit, **params)

    def plan_meeting_one(self) -> Batches | None:
        """A plan with G > 0 (a meetable request first, at a size where it meets), or None
        when no request can meet its SLO."""
        data = self.problem
        n, b = data.n_requests, data.batch_size
        for r in range(n):
            for s in range(1, min(b, n) + 1):
                if data.latest_start_s[r, s] >= data.arrival_s.min():
                    rest = [i for i in range(n) if i != r]
                    first = (r, *rest[: s - 1])
                    return (first, *sorted_full_batches(data, rest[s - 1 :]))
        return None

    def _restricted(self, master: ColumnMaster, columns: list[Column]) -> MilpFormulation:
        import pulp

        prob, read_plan = restricted_milp(master, columns, pulp)
        return MilpFormulation(problem=prob, to_schedule=lambda: self._to_schedule(read_plan()))

    def _columns(self, backend: Any, time_limit: float) -> Result:
        start = time.perf_counter()
        deadline = start + time_limit
        data = self.problem
        plan, value = self.starting_plan()
        counters = {"iterations": 0, "columns": 0, "enumerated": 0, "milp_solves": 0, "cuts": 0}

        def finish(status: Status, bound: float | None) -> Result:
            return self._result(status, plan, value, bound, backend, start, **counters)

        def adopt(raw: Any) -> bool:
            nonlocal plan, value
            better = self.improvement(raw, value)
            if better is not None:
                plan, value = better
            return better is not None

        if value.met_requests == 0:
            other = self.plan_meeting_one()
            if other is None:  # nobody can meet: every plan has G = 0
                return finish(Status.OPTIMAL, 0.0)
            plan, value = other, data.evaluate(other)
        meetable = data.meetable_requests
        latency_lb = latency_floor(data, plan, deadline)
        upper_all = meetable / latency_lb
        if upper_all <= value.g * (1.0 + RATIO_TOLERANCE):
            return finish(Status.OPTIMAL, upper_all)
        tolerance = 0.5 * RATIO_TOLERANCE * latency_lb  # on F (s)
        known: set[Column] = set()
        pool = self.cut_pool()
        cuts: list[ClaimCut] = []
        bound = upper_all
        while True:
            counters["iterations"] += 1
            lam = value.g
            master = seeded_master(
                data, lam, plan, known, cuts, self.use_bounds, met_limit(data, pool)
            )
            _, lb, duals, converged = master.separate(pool, deadline)
            cuts = list(master.cuts)
            counters["cuts"] = len(cuts)
            known.update(master.columns)
            counters["columns"] = max(counters["columns"], len(master.columns))
            if converged:
                bound = min(bound, ratio_bound(lam, lb, latency_lb))
            if converged and -lb <= tolerance:
                return finish(Status.OPTIMAL, bound)
            if time.perf_counter() >= deadline:
                return finish(Status.TIME_LIMIT, bound)
            threshold = -lb + ENUMERATION_SLACK * (1.0 + latency_lb)
            extra = master.enumerate(duals, threshold, deadline) if converged else None
            if extra is None:
                # too wide to close: improve the incumbent from the generated columns
                form = self._restricted(master, master.columns)
                share = HEURISTIC_SHARE * (deadline - time.perf_counter())
                if share <= 0:
                    return finish(Status.TIME_LIMIT, bound)
                raw = backend.solve_formulation(form, share)
                counters["milp_solves"] += 1
                if adopt(raw):
                    continue
                # gave up without a proof: FEASIBLE when time is left, else TIME_LIMIT
                out_of_time = time.perf_counter() >= deadline
                return finish(Status.TIME_LIMIT if out_of_time else Status.FEASIBLE, bound)
            counters["enumerated"] = max(counters["enumerated"], len(extra))
            columns = sorted(
                set(master.columns) | set(extra), key=lambda c: (c.end, c.members, c.met)
            )
            form = self._restricted(master, columns)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return finish(Status.TIME_LIMIT, bound)
            raw = backend.solve_formulation(form, remaining)
            counters["milp_solves"] += 1
            improved = adopt(raw)
            if raw.status != Status.OPTIMAL or raw.bound is None:
                return finish(
                    Status.TIME_LIMIT if raw.status == Status.TIME_LIMIT else raw.status, bound
                )
            # min F over every plan >= raw.bound
            bound = min(bound, ratio_bound(lam, raw.bound, latency_lb))
            if improved:
                continue
            proved = bound <= value.g * (1.0 + RATIO_TOLERANCE)
            return finish(Status.OPTIMAL if proved else Status.FEASIBLE, bound)

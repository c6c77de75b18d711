"""An upper bound on the optimal TDG of a ``tdg-horizon`` window by column generation per request.

:class:`TdgHorizonColumns` (model ``tdg-horizon-columns``) is the Dantzig-Wolfe reformulation
of the bucket LP of :mod:`slolab.models.tdg_bound` (its ``bucket`` family, release cuts on) on
the same grid, with each request's rows convexified over its *integral* schedules. A column
``p`` of request ``r`` is one whole schedule of ``r`` over its buckets ``f(r) .. l(r)``:

- the bucket ``c`` where its prompt completes (its first token), or none (the empty column);
- ``K_j``: its tokens emitted by ``b_j``, integers, non-decreasing, ``1 <= K_j <= o_r`` from
  ``c`` on, ``0`` before, and at most ``1 + (b_j - b_(c-1)) / t_min_r`` (one decode token per
  iteration of at least ``t_min_r``);
- ``e_j >= 0``: its work in bucket ``j``, with ``sum_(i<=j) e_i >= P_r + W_r(K_j - 1)`` from
  ``c`` on (the prompt and the decode tokens emitted by ``b_j``, ``W_r`` exact, not its
  tangents);
- its gain ``w1_r [c <= j1(r)] + wd_r #{decode token i emitted in a bucket <= dl_i}`` (``dl_i``
  the bucket its deadline plus tolerance rounds up to).

The master (an LP, HiGHS through highspy) picks a convex combination of columns per request
and the fluid iteration counts ``N_j`` of the bucket LP::

    max  sum_p gain_p lam_p
    sum_p e_pj lam_p + t_c (N_j - N_(j-1)) <= L_j                   (bucket time, dual pi_j)
    sum_(p of r) K_pj lam_p <= N_j - N_(f(r)-1)                     (iterations, dual mu_rj)
    sum_(p of r) lam_p = 1                                          (convexity, dual sigma_r)
    N_j >= N_(j-1) >= 0,  lam >= 0

Pricing is exact, by a dynamic programme per request over its buckets and token counts
(:meth:`TdgHorizonColumns.price`): the cheapest work profile places each increment of the
needed work at the least ``pi`` of the buckets so far, so a column's reduced cost is a sum
over buckets of terms in ``(K_(j-1), K_j)`` and its best is found in ``O(n_r^2 o_r)`` per
request (every completion bucket at once). The Lagrangian bound
(:meth:`TdgHorizonColumns.lagrangian`) holds at any multipliers; it is evaluated at the bucket
LP's duals first (at most the bucket LP's value), then every round at Wentges-smoothed duals
between the best multipliers so far and the master's (docs/proserve.md, "Smoothed duals, one
column a round"); the least is reported, OPTIMAL when no column prices out at the master's own
duals.

Proof (docs/proserve.md, "Column generation per request"): every engine schedule maps to a
master point with its TDG (each request's part of the bucket LP's point is one column), so the
optimum is at most the bound; every column is a point of its request's rows of the bucket LP,
so every master point projects onto a bucket-LP point of the same value: the bound is at most
the bucket LP's on the same grid. What it adds: integral prompts (no half prompt earning half
its first-token gain), integral token counts, the exact decode work and the per-token on-time
count. What it keeps: the iteration count ``N`` is fluid, as in the bucket LP.

With ``chain=True`` the master also holds the ``chain`` family of the bound (its leader
columns ``x`` and rows (L1)-(L3), the interval rows (L4) separated in the rounds, with the
bound's pair filter and separation code), ``g1_r`` and ``phi_rj`` read as sums of ``lam``:
a column's terms in them depend on its completion bucket alone, so the pricing adds a
constant per completion bucket and stays exact; the Lagrangian bound adds each ``x`` in [0, 1]
at its own best and the (L4) terms to ``N``'s coefficients. Its optimum lies between the
optimum and the least of ``columns`` and the ``chain`` LP on the same grid (docs/proserve.md,
"The chain family in the column master"). Off by default: it narrowed the measured code
windows by at most 0.3%.

Price and branch (:meth:`TdgHorizonColumns.integer_master`): after column generation, the
columns of engine runs (:meth:`TdgHorizonColumns.run_columns`, each run's point of the master)
are added and the restricted master is solved as a MILP (``lam`` integer, ``N`` fluid) from a
run's point; its choice of one column per request steers the search of
:mod:`slolab.heuristics.tdg_search` (docs/proserve.md, "A primal from the column master").

References
----------
ProServe, Sec. 2 (TDG, Eq. 3) and Sec. 4.1 (the affine iteration time). Dantzig and Wolfe
(1960); the Lagrangian bound of column generation (Lasdon 1970; Vanderbeck 2000).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.proserve import ON_TIME_TOL_S
from slolab.models.tdg_bound import (
    CUTS_PER_ROUND,
    DEFAULT_MAX_PAIRS,
    LP_MARGIN_ABS,
    LP_MARGIN_REL,
    TdgHorizonBound,
    bound_result,
    ideal_gain,
    interval_cuts,
)
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.highs import backend_highs, highs_lp, lp_round, run_highs_for
from slolab.solvers.registry import register_model

if TYPE_CHECKING:
    from slolab.sim.outcome import Outcome

__all__ = [
    "COLUMNS_MODEL",
    "ChainRows",
    "Column",
    "Generated",
    "MasterPlan",
    "Multipliers",
    "TdgHorizonColumns",
]

#: Registry name of the column-generation bound.
COLUMNS_MODEL = "tdg-horizon-columns"
#: A column enters the master when its reduced cost exceeds this (gain units).
PRICE_TOL = 1e-7
#: Columns added per request and round at most (the best completion buckets) in the
#: branch-and-price tree's pricing (:mod:`slolab.models.tdg_bp`).
COLUMNS_PER_ROUND = 3
#: The same in column generation (:meth:`TdgHorizonColumns.generate`), by default: one column a
#: round keeps the master small, so more rounds fit the time (docs/proserve.md, "Smoothed
#: duals, one column a round").
ROUND_COLUMNS = 1
#: Wentges's smoothing factor of column generation's pricing point, by default.
SMOOTHING = 0.5
#: Share of the time limit the bucket LP that starts column generation may take, by default.
START_SHARE = 0.5
#: HiGHS's ``simplex_strategy`` values: the master's rounds run the primal simplex, the
#: integer master's MILP HiGHS's default, the dual simplex.
SIMPLEX_PRIMAL, SIMPLEX_DUAL = 4, 1
#: Slack of the decode pace ``t_min (K - 1) <= T`` against the floor of ``T / t_min``.
PACE_TOL = 1e-9


def profile_terms(
    t: dict[str, Any], rho: np.ndarray, mu: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per bucket ``j`` of a request's table ``t`` and token count ``k``, ``F_j(k) = wd
    on_time[j, k] - rho_j need(k)`` and ``own_j(k) = F_j(k) - mu_j k``
    (:meth:`TdgHorizonColumns.price`)."""
    ks = np.arange(t["k_max"] + 1)
    F = t["decode_gain"] * t["on_time"] - rho[:, None] * t["need"][None, :]
    return F, F - mu[:, None] * ks[None, :]


def forward_row(
    t: dict[str, Any],
    terms: tuple[np.ndarray, np.ndarray],
    c: int,
    choice: np.ndarray | None = None,
) -> np.ndarray:
    """``V_(n-1)(k)`` of :meth:`TdgHorizonColumns.price`'s programme for the columns completing
    in bucket ``c`` alone (-inf past the pace caps). With ``choice`` (``(n - c, k + 1)``), row
    ``j - c`` gets, per ``k``, the last ``k' <= k`` reaching the running maximum of ``V_(j-1) -
    F_j``: the token count at the end of bucket ``j - 1`` on the best profile."""
    F, own = terms
    n, cap = t["n"], t["cap"]
    ks = np.arange(t["k_max"] + 1)
    value = np.full(len(ks), -np.inf)
    value[1:] = own[c, 1:]
    value[ks > cap[c, c]] = -np.inf
    for j in range(c + 1, n):
        shifted = value - F[j]
        top = np.maximum.accumulate(shifted)
        if choice is not None:
            choice[j - c] = np.maximum.accumulate(np.where(shifted >= top, ks, 0))
        # top[k] is one of shifted's values: the same float the choice reads
        value = own[j] + top
        value[ks > cap[c, j]] = -np.inf
    return value


def completion_values(
    t: dict[str, Any],
    terms: tuple[np.ndarray, np.ndarray],
    most: int,
    extra: np.ndarray | None,
) -> np.ndarray:
    """Per completion bucket ``c`` of a request's table ``t``, the value of its best column
    (``V_(n-1)`` of :meth:`TdgHorizonColumns.price`'s programme, plus the first-token gain and
    ``extra[c]``), exact for every ``c`` that can be among the ``most`` best; -inf for the
    others and for the buckets no column completes in. ``terms``: :func:`profile_terms` at the
    request's duals (docs/proserve.md, "Only the buckets that can win are priced").

    The programme for one ``c`` costs ``O((n - c) k)``; for every ``c`` at once ``O(n^2 k)``.
    So a backward pass without the pace caps of the later buckets first bounds every ``c`` at
    once in ``O(n k)``: ``H_j(k') = max_(k >= k') (own_j(k) + H_(j+1)(k)) - F_j(k')`` (``H_n =
    0``, ``k`` at most ``cap[0, j] >= cap[c, j]``) is the most the buckets from ``j`` on add to
    ``k'`` tokens at the end of ``j - 1``, and ``c``'s value is at most ``max_(1 <= k <= cap[c,
    c]) own_c(k) + H_(c+1)(k)``: a relaxation (the caps of ``c``'s later buckets dropped to the
    loosest row's). The exact programme then runs for the buckets in the order of that bound
    until ``most`` exact values are above the next bound (less a rounding margin): no bucket
    left can be among the ``most`` best, and those that can get the same values the
    programme for every ``c`` at once gives (the same operations on their row)."""
    n, k_max = t["n"], t["k_max"]
    F, own = terms
    cap = t["cap"]
    allowed = t["allowed"]
    upper = np.full(n, -np.inf)
    ahead = np.zeros(k_max + 1)  # H_(j+1)
    for j in range(n - 1, -1, -1):
        if allowed[j]:
            upper[j] = float((own[j, 1 : cap[j, j] + 1] + ahead[1 : cap[j, j] + 1]).max())
        if j:
            gain = own[j] + ahead
            gain[cap[0, j] + 1 :] = -np.inf
            ahead = np.maximum.accumulate(gain[::-1])[::-1] - F[j]
    upper += t["first_gain"]
    if extra is not None:
        upper = upper + extra
    margin = 1e-9 * n * (1.0 + float(np.abs(own).max()) + float(np.abs(F).max()))
    best = np.full(n, -np.inf)
    found: list[float] = []
    for c in np.argsort(-upper, kind="stable").tolist():
        if upper[c] == -np.inf or (len(found) >= most and upper[c] < found[most - 1] - margin):
            break
        value = forward_row(t, terms, c)
        best[c] = float(value.max()) + t["first_gain"][c] + (0.0 if extra is None else extra[c])
        found = sorted([*found, best[c]], reverse=True)[:most]
    return best


@dataclass(frozen=True, slots=True)
class Column:
    """One request's schedule over its buckets (local indices ``0 .. n_r - 1``).

    ``tokens[j]``: tokens emitted by the end of local bucket ``j`` (``K_j``); ``work[j]``:
    work placed in bucket ``j`` (s); ``gain``: its TDG; ``complete``: the local bucket of its
    first token (-1: the empty column).
    """

    request: int
    complete: int
    tokens: np.ndarray
    work: np.ndarray
    gain: float


@dataclass(slots=True)
class ChainRows:
    """The ``chain`` family's rows in the master, all ``... <= 0`` (docs/proserve.md, "The
    chain family in the column master"): their terms in the leader columns ``x`` (local
    indices, ``x_rr`` of deadline position ``i`` at ``i``) and in ``N`` (0-based ``N_j`` at
    ``j - 1``), as triplets (row, index, coefficient); per request ``r`` the row of (L1)
    (``first[r]``) and its (L3) rows with the bucket each names (``upto[r]``: buckets, rows),
    whose columns' terms follow from their completion bucket; ``highs[i]``: master row of
    local row ``i`` (-1 while it is not in a master)."""

    x_terms: list[tuple[int, int, float]]
    n_terms: list[tuple[int, int, float]]
    first: dict[int, int]
    upto: dict[int, tuple[np.ndarray, np.ndarray]]
    count: int
    highs: list[int]

    def add(self, x: Sequence[tuple[int, float]], n: Sequence[tuple[int, float]] = ()) -> int:
        """A new row with the given terms in ``x`` and ``N``; its local index."""
        row = self.count
        self.x_terms.extend((row, int(i), float(v)) for i, v in x)
        self.n_terms.extend((row, int(j), float(v)) for j, v in n)
        self.count += 1
        self.highs.append(-1)
        return row

    def transposed(self, y: np.ndarray, nx: int, buckets: int) -> tuple[np.ndarray, np.ndarray]:
        """``A_x^T y`` and ``A_N^T y``: the rows weighted by ``y`` summed per ``x`` and per
        ``N_j``."""
        ax, an = np.zeros(nx), np.zeros(buckets)
        if self.x_terms:
            rows, cols, vals = (np.asarray(a) for a in zip(*self.x_terms, strict=True))
            np.add.at(ax, cols.astype(np.int64), vals * y[rows.astype(np.int64)])
        if self.n_terms:
            rows, cols, vals = (np.asarray(a) for a in zip(*self.n_terms, strict=True))
            np.add.at(an, cols.astype(np.int64), vals * y[rows.astype(np.int64)])
        return ax, an

    def column_terms(self, r: int, y: np.ndarray, first_ok: np.ndarray, first: int) -> np.ndarray:
        """Per completion bucket ``c`` (local) of ``r``: minus the weighted chain rows' terms of
        a column completing there (``-y_L1 [c on time] + sum_j y_L3j [first + c <= j]``)."""
        extra = np.zeros(len(first_ok))
        if r in self.first:
            extra -= y[self.first[r]] * first_ok
            js, rows = self.upto[r]
            for j, row in zip(js, rows, strict=True):
                extra[: int(j) - first + 1] += y[row]
        return extra


@dataclass(frozen=True, slots=True)
class Multipliers:
    """Multipliers of the master's rows for the Lagrangian bound: bucket time ``pi``, the
    iterations ``mu`` per request, and the chain and burst rows' (None without them)."""

    pi: np.ndarray
    mu: dict[int, np.ndarray]
    chain: np.ndarray | None = None
    burst: np.ndarray | None = None

    def towards(self, other: Multipliers, alpha: float) -> Multipliers:
        """``alpha * self + (1 - alpha) * other``; rows ``self`` lacks (added since) count 0."""

        def mix(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            if b is None:
                return None
            a = np.zeros(len(b)) if a is None else np.pad(a, (0, len(b) - len(a)))
            return alpha * a + (1.0 - alpha) * b

        mu = {r: alpha * self.mu[r] + (1.0 - alpha) * m for r, m in other.mu.items()}
        return Multipliers(
            alpha * self.pi + (1.0 - alpha) * other.pi,
            mu,
            mix(self.chain, other.chain),
            mix(self.burst, other.burst),
        )


@dataclass(slots=True)
class Generated:
    """Column generation's end state: the master in ``highs`` (its rows and columns in
    ``master``), the bound and its status, when it started (``time.perf_counter``), the bound
    at the bucket LP's duals, the rounds and whether no column priced out."""

    highs: Any
    master: dict[str, Any]
    bound: float
    status: Status
    started: float
    start_bound: float | None
    rounds: list[dict[str, float]]
    converged: bool


@dataclass(frozen=True, slots=True)
class MasterPlan:
    """The integer restricted master's choice (:meth:`TdgHorizonColumns.integer_master`): one
    column per request of the master (none when the MILP found no integer point in time), its
    value, the MILP's dual bound over the generated columns, the column generation's bound and
    whether it converged, and the wall time."""

    columns: dict[int, Column]
    value: float
    mip_bound: float
    lp_bound: float
    converged: bool
    runtime_s: float


class TdgHorizonColumns(ExactModel):
    """Column-generation upper bound on the optimal TDG of a tdg-horizon window (see the module
    docstring and docs/proserve.md, "Column generation per request").

    Parameters
    ----------
    instance : Instance
        A ``tdg-horizon`` instance (any output lengths; memory assumed not to bind).
    spacing_s : float, optional
        Grid spacing (s), as :class:`~slolab.models.tdg_bound.TdgHorizonBound`'s; default the
        finest within ``max_pairs``. The grid is the bucket LP's fine grid.
    max_pairs : int
        Size budget of (request, bucket) pairs used to pick the spacing.
    chain : bool
        Add the ``chain`` family's leader columns and rows (L1-L3, and the interval rows (L4)
        in rounds) to the master (docs/proserve.md, "The chain family in the column master").
        Default False: not the integer master's, and no narrower on the measured windows.
    burst : bool
        Add the burst-capacity rows ``sum_(r in S) w1_r g1_r <= F(S)`` over the interval sets
        (:mod:`slolab.models.tdg_burst`, the bound's table), ``g1_r`` the sum of ``lam`` over
        ``r``'s on-time columns, separated in the rounds (docs/proserve.md, "Burst-capacity
        rows"). Default False: the former master and rounds.
    start_share : float
        Share of the time limit the bucket LP that starts the generation may take (default
        :data:`START_SHARE`); 0 starts from the empty columns at zero multipliers. Where the bucket LP is not
        solved within its share, that time is lost (docs/proserve.md, "The column master's
        start and its simplex").
    smoothing : float
        Wentges's dual smoothing factor ``alpha`` in [0, 1) (default :data:`SMOOTHING`; 0
        prices at the master's duals, as before 2026-12-03): each round prices at ``alpha``
        times the stability centre (the multipliers of the least Lagrangian bound so far) plus
        ``1 - alpha`` times the master's duals; after a mispricing (no column of positive reduced cost at the master's
        duals) the point moves toward the master's, down to them (docs/proserve.md, "Smoothed
        duals, one column a round").
    columns_per_round : int
        Columns added per request and round at most (its best completion buckets; default
        :data:`ROUND_COLUMNS`; 3 before 2026-12-03).

    Notes
    -----
    One class of about 960 lines, on purpose: the master's rows (:meth:`_master`, the chain
    and burst rows with them), the per-request pricing tables and DP (:meth:`price`), the
    Lagrangian bound (:meth:`lagrangian`), the rounds (:meth:`generate`), the integer master and the
    runs' columns (:meth:`integer_master`, :meth:`run_columns`) all read one layout: each
    request's bucket range, its work and gain tables, and the master's row indices. Apart,
    every part would take those tables and indices as arguments, and the pricing would read
    the master's dual layout from another module.
    """

    sense = "max"
    bound_only = True

    def __init__(
        self,
        instance: Instance,
        spacing_s: float | None = None,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        chain: bool = False,
        burst: bool = False,
        start_share: float = START_SHARE,
        smoothing: float = SMOOTHING,
        columns_per_round: int = ROUND_COLUMNS,
    ) -> None:
        super().__init__(instance)
        self.relaxation = TdgHorizonBound(
            instance, spacing_s=spacing_s, max_pairs=max_pairs, family="bucket"
        )
        self.data = self.relaxation.data
        self.grid = self.relaxation.grid
        self.t_c = self.relaxation.t_c
        rel, d = self.relaxation, self.data
        finite = np.isfinite(d.first_deadline_s)
        #: requests in the master (a finite first-token deadline); the others are counted whole
        self.requests: list[int] = np.flatnonzero(finite).tolist()
        self.fixed_gain = float((d.first_gain + d.decode_gain * (d.output - 1))[~finite].sum())
        self._prompt_work = rel.prompt_work_s()
        self._earliest = rel.earliest_first_token_s()
        self._t_min = rel.shortest_decode_iteration_s()
        self.tables = {int(r): self._request_table(int(r)) for r in self.requests}
        self.chain = chain
        #: the chain family's layout (None without it): leaders in deadline order, pairs
        self.leaders: dict[str, Any] | None = self._leader_layout() if chain else None
        self.burst = burst
        if not 0.0 <= start_share < 1.0:
            raise ValueError(f"start_share must be in [0, 1), got {start_share}")
        self.start_share = start_share
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        if columns_per_round < 1:
            raise ValueError(f"columns_per_round must be at least 1, got {columns_per_round}")
        self.columns_per_round = int(columns_per_round)

    # -- per-request data -------------------------------------------------------------------------
    def _request_table(self, r: int) -> dict[str, Any]:
        """What the pricing of ``r`` needs: its buckets, work needed per token count, the
        decode tokens' deadline buckets, the completion buckets allowed and the pace caps."""
        d, grid = self.data, self.grid
        f, last = int(grid.first[r]), int(grid.last[r])
        j = np.arange(f, last + 1)
        n = len(j)
        end = grid.bounds[j]
        start = grid.bounds[j - 1]
        o = int(d.output[r])
        # longest token count any column of r reaches within its range
        span = float(end[-1] - start[0])
        k_max = int(min(o, 1 + math.floor(span / float(self._t_min[r]) + PACE_TOL)))
        k = np.arange(k_max + 1)
        need = np.where(
            k >= 1,
            self._prompt_work[r] + self.relaxation.decode_work_s(np.maximum(k - 1, 0), r),
            0.0,
        )
        deadlines = d.first_deadline_s[r] + np.arange(1, o) * d.tpot_s[r] + ON_TIME_TOL_S
        dl = np.clip(np.searchsorted(grid.bounds, deadlines, side="left") - f, 0, n - 1)
        # on_time[j, k]: decode tokens among the first k tokens whose deadline bucket is >= j
        late_ok = (
            dl[None, : k_max - 1] >= np.arange(n)[:, None]
            if k_max >= 2
            else np.zeros((n, 0), dtype=bool)
        )
        on_time = np.zeros((n, k_max + 1))
        if k_max >= 2:
            on_time[:, 2:] = np.cumsum(late_ok, axis=1)
        allowed = end >= self._earliest[r] - 1e-12
        j1 = int(grid.first_deadline_bucket[r])
        first_ok = np.zeros(n, dtype=bool)
        if j1 >= f:
            first_ok[: min(j1, last) - f + 1] = True
        first_ok &= allowed
        # cap[c, j]: most tokens by the end of bucket j when the prompt completes in bucket c
        elapsed = end[None, :] - start[:, None]
        cap = 1 + np.floor(np.maximum(elapsed, 0.0) / float(self._t_min[r]) + PACE_TOL)
        cap = np.minimum(cap, k_max).astype(np.int64)
        return {
            "first": f,
            "n": n,
            "first_ok": first_ok,
            "k_max": k_max,
            "need": need,
            "on_time": on_time,
            "allowed": allowed,
            "first_gain": np.where(first_ok, float(d.first_gain[r]), 0.0),
            "decode_gain": float(d.decode_gain[r]),
            "cap": cap,
            "lengths": end - start,
        }

    def _leader_layout(self) -> dict[str, Any]:
        """The leader columns of the ``chain`` family, with the bound's pair filter
        (:meth:`TdgHorizonBound.leader_pairs`): the requests whose first token can be on time
        in deadline order (``x_rr`` of position ``i`` is ``x`` column ``i``), the pairs
        ``x_rq`` (columns ``m ..``: their columns per joining position, and the joining and
        leading positions of each), each leader's bucket range
        (``f(q) - 1``, ``j1(q)``) for the interval rows."""
        able = [r for r in self.requests if self.tables[r]["first_ok"].any()]
        reqs, pairs = self.relaxation.leader_pairs(able)
        m = len(reqs)
        shared_r = np.repeat(np.arange(m), [len(q) for q in pairs]).astype(np.int64)
        shared_q = np.concatenate(pairs).astype(np.int64) if m else np.zeros(0, dtype=np.int64)
        ends = m + np.cumsum([len(q) for q in pairs], dtype=np.int64)
        return {
            "requests": reqs,
            "pairs": pairs,
            # x columns of position i's pairs, in the order of pairs[i]
            "shared": [np.arange(e - len(q), e) for e, q in zip(ends, pairs, strict=True)],
            "shared_r": shared_r,
            "shared_q": shared_q,
            "count": m + len(shared_r),
            "start": self.grid.first[reqs].astype(np.int64) - 1,
            "end": self.grid.first_deadline_bucket[reqs].astype(np.int64),
        }

    def chain_rows(self) -> ChainRows:
        """Rows (L1)-(L3) of the ``chain`` family in the master, as in the bound
        (:meth:`TdgHorizonBound._completion_rows`) with ``g1_r`` and ``phi_rj`` the sums of
        ``lam`` over ``r``'s columns on time and complete by bucket ``j``::

            g1_r - x_rr - sum_q x_rq <= 0                                   (L1)
            x_rq - x_qq <= 0                                                (L2)
            sum_(q : j1(q) <= j) x_rq - phi_rj <= 0  for j in {j1(q)}        (L3)
            x_rr + sum_q x_rq - phi_r,j1(r) <= 0"""
        lay = self.leaders
        assert lay is not None
        rows = ChainRows([], [], {}, {}, 0, [])
        reqs, j1 = lay["requests"], lay["end"]
        for i, r in enumerate(reqs.tolist()):
            q, x = lay["pairs"][i], lay["shared"][i]
            rows.first[r] = rows.add([(i, -1.0)] + [(c, -1.0) for c in x])
            for c, lead in zip(x, q, strict=True):
                rows.add([(c, 1.0), (lead, -1.0)])
            order = np.argsort(j1[q], kind="stable")
            xs, js = x[order], j1[q][order]
            buckets, own = [], []
            for jj in np.unique(js):
                own.append(rows.add([(c, 1.0) for c in xs[js <= jj]]))
                buckets.append(int(jj))
            own.append(rows.add([(c, 1.0) for c in xs] + [(i, 1.0)]))
            buckets.append(int(j1[i]))
            rows.upto[r] = (np.asarray(buckets, dtype=np.int64), np.asarray(own, dtype=np.int64))
        return rows

    def empty_column(self, r: int) -> Column:
        n = self.tables[r]["n"]
        return Column(r, -1, np.zeros(n, dtype=np.int64), np.zeros(n), 0.0)

    # -- pricing ----------------------------------------------------------------------------------
    def price(
        self,
        r: int,
        pi: np.ndarray,
        mu: np.ndarray,
        most: int = 1,
        floor: float = -math.inf,
        extra: np.ndarray | None = None,
    ) -> list[tuple[float, Column]]:
        """The best non-empty columns of ``r`` (one per completion bucket, at most ``most``,
        best first, each worth more than ``floor``) against the bucket-time duals ``pi`` (per bucket
        of ``r``'s range, clipped at 0) and the iteration duals ``mu`` (per bucket of the
        range), as ``(gain - pi . e - mu . K, column)`` (none when no bucket can complete the
        prompt).

        With ``rho_j = min_(i<=j) pi_i``, the cheapest work profile of a token profile ``K``
        costs ``sum_j rho_j (need(K_j) - need(K_(j-1)))``; with ``F_j(k) = wd on_time[j, k] -
        rho_j need(k)`` the value of going from ``k'`` to ``k`` tokens in bucket ``j`` is
        ``F_j(k) - F_j(k') - mu_j k``, so ``V_j(k) = F_j(k) - mu_j k + max_(k'<=k) (V_(j-1)(k')
        - F_j(k'))`` over every completion bucket ``c`` at once (one row of ``V`` per ``c``).
        ``extra[c]``: a constant added to every column completing in local bucket ``c`` (the
        ``chain`` rows' duals, :meth:`ChainRows.column_terms`)."""
        t = self.tables[r]
        pi = np.maximum(np.asarray(pi, dtype=float), 0.0)
        rho = np.minimum.accumulate(pi)
        if not t["allowed"].any():
            return []
        terms = profile_terms(t, rho, np.asarray(mu, dtype=float))
        best = completion_values(t, terms, most, extra)
        order = [int(c) for c in np.argsort(-best, kind="stable")[:most]]
        return [(float(best[c]), self._column(r, c, pi, terms)) for c in order if best[c] > floor]

    def _column(
        self, r: int, c: int, pi: np.ndarray, terms: tuple[np.ndarray, np.ndarray]
    ) -> Column:
        """The best column of ``r`` completing in bucket ``c`` (the programme of :meth:`price`
        for that row alone, with its choices kept), its work placed at the cheapest buckets.
        ``terms``: ``F`` and ``own`` per bucket (:func:`profile_terms`)."""
        t = self.tables[r]
        n = t["n"]
        choice = np.zeros((n - c, t["k_max"] + 1), dtype=np.int64)
        value = forward_row(t, terms, c, choice)
        tokens = np.zeros(n, dtype=np.int64)
        k = int(np.argmax(value))
        for j in range(n - 1, c - 1, -1):
            tokens[j] = k
            if j > c:
                k = int(choice[j - c, k])
        need = t["need"][tokens]
        # the cheapest bucket so far (the first of the least pi up to each bucket) takes the
        # bucket's work, added bucket by bucket
        below = pi < np.concatenate(([np.inf], np.minimum.accumulate(pi)[:-1]))
        cheapest = np.maximum.accumulate(np.where(below, np.arange(n), 0))
        work = np.zeros(n)
        np.add.at(work, cheapest[c:], np.diff(need, prepend=0.0)[c:])
        return Column(r, c, tokens, work, self.column_gain(r, c, tokens))

    def column_gain(self, r: int, c: int, tokens: np.ndarray) -> float:
        """TDG of a column: its first token if on time, and each decode token emitted in a
        bucket at or before its deadline's."""
        t = self.tables[r]
        gain = float(t["first_gain"][c])
        previous = 0
        for j in range(c, t["n"]):
            k = int(tokens[j])
            gain += t["decode_gain"] * (t["on_time"][j, k] - t["on_time"][j, previous])
            previous = k
        return gain

    # -- the master -------------------------------------------------------------------------------
    backends = ("highs",)

    def supports(self) -> frozenset[str]:
        """HiGHS only: the master goes to highspy directly."""
        return frozenset({"milp"})

    def lagrangian(
        self,
        pi: np.ndarray,
        mu: dict[int, np.ndarray],
        deadline: float = math.inf,
        chain: tuple[ChainRows, np.ndarray] | None = None,
        burst: tuple[list[tuple[np.ndarray, float]], np.ndarray] | None = None,
    ) -> tuple[float, dict[int, list[tuple[float, Column]]]] | None:
        """The Lagrangian bound at multipliers ``pi >= 0`` (bucket time, per bucket) and ``mu
        >= 0`` (iterations, per request and bucket of its range; both clipped at 0), and each
        request's best columns there (at most ``columns_per_round``); None when the clock
        passes ``deadline`` (``time.perf_counter``) first.

        ``L = sum_j pi_j L_j + sum_r max(0, best_r) + N_max max(0, max_i sum_(j>=i) c_j)``,
        ``best_r`` the best non-empty column of ``r`` (the empty one is worth 0), ``c_j`` the
        coefficient of ``N_j`` in the Lagrangian (``sum_r mu_rj - t_c (pi_j - pi_(j+1))``, less
        ``sum_j mu_rj`` at ``N_(f(r)-1)``): over ``N`` non-decreasing, non-negative and at most
        ``N_max`` = the window's uncached prompt and output tokens (every iteration holds one),
        its term is the last one. Every engine schedule's master point has such an ``N``, so
        ``L`` is at least the optimum for any multipliers.

        ``chain``: the master's ``chain`` rows and their multipliers ``y >= 0`` (clipped at
        0): a column's terms in them are a constant per completion bucket, added in its
        pricing; each leader column ``x`` in [0, 1] adds ``max(0, -(A_x^T y)_x)``; the (L4)
        rows' terms in ``N`` join its coefficients ``c_j``.

        ``burst``: the master's burst rows (each: its requests, ``F(S)``) and their
        multipliers ``z >= 0`` (clipped at 0): ``sum_S z_S F(S)`` joins the constant and a
        column of ``r`` whose first token is on time pays ``w1_r sum_(S ∋ r) z_S`` (a constant
        per completion bucket, added in its pricing)."""
        pi = np.maximum(np.asarray(pi, dtype=float), 0.0)
        value = self.fixed_gain + float(pi @ np.diff(self.grid.bounds))
        coef = -self.t_c * (pi - np.append(pi[1:], 0.0))
        y = None
        if chain is not None:
            rows, y = chain[0], np.maximum(np.asarray(chain[1], dtype=float), 0.0)
            assert self.leaders is not None
            ax, an = rows.transposed(y, self.leaders["count"], self.grid.buckets)
            value += float(np.maximum(0.0, -ax).sum())
            coef -= an
        burst_price: dict[int, float] = {}
        if burst is not None:
            z = np.maximum(np.asarray(burst[1], dtype=float), 0.0)
            for (members, capacity), z_s in zip(burst[0], z, strict=True):
                value += float(z_s) * capacity
                for r in members.tolist():
                    burst_price[int(r)] = burst_price.get(int(r), 0.0) + float(z_s)
        priced: dict[int, list[tuple[float, Column]]] = {}
        for r in self.requests:
            buckets = self.bucket_range(r)
            mu_r = np.maximum(np.asarray(mu[r], dtype=float), 0.0)
            extra = None
            t = self.tables[r]
            if chain is not None and y is not None:
                extra = chain[0].column_terms(r, y, t["first_ok"], t["first"])
            if burst_price.get(int(r), 0.0) > 0:
                paid = -burst_price[int(r)] * t["first_gain"]
                extra = paid if extra is None else extra + paid
            got = self.price(r, pi[buckets], mu_r, most=self.columns_per_round, extra=extra)
            priced[r] = got
            if got:
                value += max(0.0, got[0][0])
            coef[buckets] += mu_r
            if self.tables[r]["first"] >= 2:
                coef[self.tables[r]["first"] - 2] -= mu_r.sum()
            if time.perf_counter() > deadline:
                return None
        n_max = float((self.data.uncached + self.data.output).sum())
        value += n_max * max(0.0, float(np.cumsum(coef[::-1]).max()))
        return value, priced

    def _bucket_duals(
        self, backend: Any, time_limit: float
    ) -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
        """The bucket LP's optimal duals of its linking rows on :attr:`grid` (bucket time and
        iterations), as multipliers; None when it is not solved within ``time_limit``."""
        import highspy

        lp = self.relaxation.build_lp(self.grid)
        highs = backend_highs(backend)
        highs.passModel(
            highs_lp(
                lp["matrix"], -lp["cost"], lp["col_lo"], lp["col_hi"], lp["row_lo"], lp["row_hi"]
            )
        )
        run_highs_for(highs, time_limit)
        if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        dual = -np.asarray(highs.getSolution().row_dual)
        mu = {int(r): dual[lp["iteration_rows"][int(r)]] for r in self.requests}
        return dual[lp["capacity_rows"]], mu

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        """Column generation within ``time_limit`` (:meth:`generate`), as a bound result."""
        got = self.generate(backend, time_limit)
        return bound_result(
            COLUMNS_MODEL,
            got.status,
            got.bound,
            got.started,
            self.grid,
            ideal_gain(self.data),
            rounds=len(got.rounds),
            start_bound=got.start_bound,
            columns=len(got.master["columns"]),
            master=got.rounds[-1]["master"] if got.rounds else None,
            history=got.rounds,
            converged=got.converged,
            chain=self.chain,
        )

    def generate(self, backend: Any, time_limit: float) -> Generated:
        """Column generation within ``time_limit``. First the bucket LP on the same grid (at
        most ``start_share`` of the time): the Lagrangian bound at its duals (at most the
        bucket LP's value) and the columns priced there start the master, and its duals are the
        first stability centre. Then rounds: the master (primal simplex, warm), the Lagrangian
        bound at the smoothed point between the centre and the master's duals (the centre
        moves to it when it is lower), and up to ``columns_per_round`` columns per request
        whose reduced cost at the master's duals is positive; when none is (a mispricing) the
        master is kept and the point moves toward its duals. The bound is the least Lagrangian
        bound plus the bucket LP's margin, at most the ideal. Status: OPTIMAL when no column
        prices out at the master's own duals (the last bound is the master's optimum),
        FEASIBLE when the time ran out first (the bound holds), TIME_LIMIT with the ideal when
        no bound was computed. The master stays in HiGHS with its columns
        (:class:`Generated`)."""

        if backend.name != "highs":
            raise ValueError(f"{COLUMNS_MODEL} is solved by HiGHS's LP only, not {backend.name!r}")
        start = time.perf_counter()
        deadline = start + time_limit
        ideal = ideal_gain(self.data)
        bound, status = ideal, Status.TIME_LIMIT
        rounds: list[dict[str, float]] = []

        def settle(value: float) -> float:
            return min(value + LP_MARGIN_REL * abs(value) + LP_MARGIN_ABS, ideal)

        warm: list[Column] = []
        duals = None
        if self.start_share > 0:
            duals = self._bucket_duals(backend, time_limit * self.start_share)
        start_bound = None
        if duals is not None:
            got = self.lagrangian(*duals, deadline=deadline)
            if got is not None:
                start_bound = got[0]
                bound, status = settle(got[0]), Status.FEASIBLE
                warm = [column for priced in got[1].values() for _, column in priced]
        highs = backend_highs(backend)
        highs.setOptionValue("solver", "simplex")
        # a round adds columns at 0: the last basis stays primal feasible, so the primal
        # simplex goes on from it (the dual simplex restarts its phase 1)
        highs.setOptionValue("simplex_strategy", SIMPLEX_PRIMAL)
        master = self._master(highs)
        if warm:
            self._add_columns(highs, master, warm)
        converged = False
        chain: ChainRows | None = master.get("chain")
        # the stability centre: the least Lagrangian bound's value and multipliers so far
        centre: tuple[float, Multipliers] | None = None
        if duals is not None and start_bound is not None:
            centre = (start_bound, Multipliers(duals[0], duals[1]))
        out: Multipliers | None = None
        dual = np.zeros(0)
        z = math.nan
        misprices = 0
        while True:
            left = deadline - time.perf_counter()
            if left <= 1e-3:
                break
            fresh = out is None
            if fresh:
                if not lp_round(highs, left, f"{COLUMNS_MODEL} master"):
                    break
                z = -float(highs.getInfo().objective_function_value) + self.fixed_gain
                dual = -np.asarray(highs.getSolution().row_dual)
                out = self._master_multipliers(master, dual)
            assert out is not None
            # Wentges smoothing: price at a point between the centre and the master's duals,
            # nearer the master's after each mispricing (at them after ceil(smoothing /
            # (1 - smoothing)) mispricings in a row)
            alpha = (
                0.0 if centre is None else max(0.0, 1.0 - (misprices + 1) * (1.0 - self.smoothing))
            )
            here = out
            if centre is not None and alpha > 0.0:
                here = centre[1].towards(out, alpha)
            got = self.lagrangian(
                here.pi,
                here.mu,
                deadline=deadline,
                chain=None if chain is None or here.chain is None else (chain, here.chain),
                burst=None if here.burst is None else (master["burst"]["rows"], here.burst),
            )
            if got is None:
                break
            value, priced = got
            bound, status = min(bound, settle(value)), Status.FEASIBLE
            if centre is None or value < centre[0]:
                centre = (value, here)
            if alpha == 0.0:
                found = [
                    column
                    for r, columns in priced.items()
                    for reduced, column in columns
                    if reduced - dual[master["convexity_rows"][r]] > PRICE_TOL
                ]
            else:
                found = [
                    column
                    for columns in priced.values()
                    for _, column in columns
                    if self._reduced(master, column, dual) > PRICE_TOL
                ]
            cuts: list[tuple[int, int, np.ndarray]] = []
            burst_rows = 0
            if fresh:
                if chain is not None:
                    cuts = self._interval_rows(highs, master)
                burst_rows = self._burst_rows(highs, master) if self.burst else 0
            rounds.append({"master": z, "lagrangian": value, "columns": len(found)})
            if self.smoothing > 0:
                rounds[-1]["alpha"] = alpha
            if chain is not None:
                rounds[-1]["cuts"] = len(cuts)
            if self.burst:
                rounds[-1]["burst_rows"] = burst_rows
            if not found and not cuts and not burst_rows:
                if alpha == 0.0:
                    converged = True
                    break
                # a mispricing: the master is unchanged, the centre moved (or the next point
                # is nearer the master's duals)
                misprices += 1
                continue
            misprices = 0
            out = None
            if found:
                self._add_columns(highs, master, found)
        if converged:
            status = Status.OPTIMAL
        return Generated(highs, master, bound, status, start, start_bound, rounds, converged)

    def _master_multipliers(self, master: dict[str, Any], dual: np.ndarray) -> Multipliers:
        """The master's duals ``dual`` (signs as maximised) as :class:`Multipliers`."""
        chain: ChainRows | None = master.get("chain")
        return Multipliers(
            dual[master["time_rows"]],
            {int(r): dual[master["iteration_rows"][int(r)]] for r in self.requests},
            None if chain is None else dual[np.asarray(chain.highs, dtype=np.int64)],
            None if not self.burst else dual[np.asarray(master["burst"]["highs"], dtype=np.int64)],
        )

    def _reduced(self, master: dict[str, Any], column: Column, dual: np.ndarray) -> float:
        """The reduced cost of ``column`` at the master's duals ``dual`` (convexity row with
        them)."""
        rows, coef = self._column_entries(master, column)
        return column.gain - float(dual[rows.astype(np.int64)] @ coef)

    def integer_master(
        self,
        backend: Any,
        time_limit: float,
        runs: Sequence[Outcome] = (),
        start: Outcome | None = None,
        mip_share: float = 0.5,
    ) -> MasterPlan:
        """Price and branch within ``time_limit``: column generation (:meth:`generate`, the
        first ``1 - mip_share`` of the time), the columns of the engine ``runs``
        (:meth:`run_columns`: each run is an integer point of the master), then the
        restricted master over all of them as a MILP (each request's ``lam`` integer, ``N``
        fluid; HiGHS, the rest of the time), started from the run ``start`` (its columns and
        its fluid iteration count, a feasible point). Its incumbent picks one column per request: a
        schedule of the master, not of the engine (``N`` is fluid), so it is guidance for a
        primal, never a value; its value is at most the master's optimum over all columns."""
        import highspy

        if self.chain or self.burst:
            raise ValueError("the integer master is built without the chain or burst rows")
        got = self.generate(backend, time_limit * (1.0 - mip_share))
        highs = got.highs
        for run in runs:
            self._add_columns(highs, got.master, self.run_columns(run))
        if start is not None:
            first = int(highs.getNumCol())
            self._add_columns(highs, got.master, self.run_columns(start))
        B = self.grid.buckets
        count = int(highs.getNumCol())
        lams = np.arange(B, count, dtype=np.int32)
        highs.changeColsIntegrality(
            len(lams), lams, np.full(len(lams), highspy.HighsVarType.kInteger)
        )
        highs.setOptionValue("solver", "choose")
        highs.setOptionValue("simplex_strategy", SIMPLEX_DUAL)
        if start is not None:
            point = np.zeros(int(highs.getNumCol()))
            point[:B] = self.run_iterations(start)
            point[first:] = 1.0
            solution = highspy.HighsSolution()
            solution.col_value = point.tolist()
            solution.value_valid = True
            highs.setSolution(solution)
        left = got.started + time_limit - time.perf_counter()
        run_highs_for(highs, max(left, 1e-3))
        info = highs.getInfo()
        chosen: dict[int, Column] = {}
        value = math.nan
        if info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible:
            lam = np.asarray(highs.getSolution().col_value)[B:]
            columns = got.master["columns"]
            for r in self.requests:
                mine = [i for i, col in enumerate(columns) if col.request == r]
                chosen[int(r)] = columns[max(mine, key=lambda i: lam[i])]
            value = -float(info.objective_function_value) + self.fixed_gain
        return MasterPlan(
            columns=chosen,
            value=value,
            mip_bound=-float(info.mip_dual_bound) + self.fixed_gain,
            lp_bound=got.bound,
            converged=got.converged,
            runtime_s=time.perf_counter() - got.started,
        )

    def run_columns(self, outcome: Outcome) -> list[Column]:
        """The columns of an engine run (one per request of the master): ``K_j`` its tokens
        emitted by ``b_j``, the prompt complete in the bucket of its first token (the empty
        column when that is past the request's range), and its work in each bucket spread
        over its iterations' time, each iteration's share of the prompt work in proportion to
        its prefill tokens and each decode token's work its increment of ``W_r``. With the
        run's iterations counted fluidly as ``N``, this is the run's point of the master
        (docs/proserve.md, "Column generation per request": why the bound holds)."""
        from slolab.sim.outcome import PHASE_PREFILL

        bounds = self.grid.bounds
        offsets = np.asarray(outcome.token_offsets)
        times = np.asarray(outcome.token_times)
        starts, ends = np.asarray(outcome.it_start), np.asarray(outcome.it_end)
        entries = np.asarray(outcome.entry_offsets)
        owners = np.asarray(outcome.entry_request)
        phases = np.asarray(outcome.entry_phase)
        amounts = np.asarray(outcome.entry_tokens)
        prompt_work = self._prompt_work
        work = {int(r): np.zeros(self.grid.buckets) for r in self.requests}
        decoded = dict.fromkeys(work, 0)
        for i in range(len(starts)):
            lo, hi = float(starts[i]), float(ends[i])
            edges = np.clip(bounds, lo, hi)
            share = np.diff(edges) / (hi - lo) if hi > lo else np.zeros(self.grid.buckets)
            if hi <= lo:
                where = int(np.searchsorted(bounds, hi, side="left")) - 1
                share[int(np.clip(where, 0, len(share) - 1))] = 1.0
            for e in range(int(entries[i]), int(entries[i + 1])):
                r = int(owners[e])
                if r not in work:
                    continue
                if phases[e] == PHASE_PREFILL:
                    w = prompt_work[r] * float(amounts[e]) / float(self.data.uncached[r])
                else:
                    decoded[r] += 1
                    m = decoded[r]
                    w = float(self.relaxation.decode_work_s(m, r)) - float(
                        self.relaxation.decode_work_s(m - 1, r)
                    )
                work[r] += w * share
        columns = []
        for r in self.requests:
            t = self.tables[r]
            own = times[int(offsets[r]) : int(offsets[r + 1])]
            own = own[np.isfinite(own)]
            end = bounds[t["first"] : t["first"] + t["n"]]
            tokens = np.searchsorted(np.sort(own), end, side="right").astype(np.int64)
            tokens = np.minimum(tokens, t["k_max"])
            if not tokens[-1]:
                columns.append(self.empty_column(int(r)))
                continue
            c = int(np.argmax(tokens > 0))
            gain = self.column_gain(int(r), c, tokens)
            columns.append(Column(int(r), c, tokens, work[int(r)][self.bucket_range(int(r))], gain))
        return columns

    def run_iterations(self, outcome: Outcome) -> np.ndarray:
        """``N_j`` of an engine run: its iterations done by ``b_j``, each counted in
        proportion to its time before ``b_j`` (the fluid count of :meth:`run_columns`)."""
        starts, ends = np.asarray(outcome.it_start), np.asarray(outcome.it_end)
        ends_b = self.grid.bounds[1:, None]
        length = np.maximum(ends - starts, 1e-300)
        done = np.clip((ends_b - starts[None, :]) / length[None, :], 0.0, 1.0)
        return done.sum(axis=1)

    def first_token_kept(self, column: Column) -> bool:
        """Whether ``column`` earns its request's first token (completes it on time)."""
        return (
            column.complete >= 0 and self.tables[column.request]["first_gain"][column.complete] > 0
        )

    def completion_s(self, column: Column) -> float:
        """End of the bucket where ``column``'s prompt completes (inf: the empty column)."""
        if column.complete < 0:
            return math.inf
        return float(self.grid.bounds[self.tables[column.request]["first"] + column.complete])

    def bucket_range(self, r: int) -> np.ndarray:
        """0-based indices of the buckets of request ``r``'s range."""
        t = self.tables[r]
        return np.arange(t["first"], t["first"] + t["n"]) - 1  # 0-based bucket indices

    def _chain_terms(
        self, chain: ChainRows, col: Column, rows: np.ndarray, coef: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``rows``, ``coef`` with ``col``'s terms in the chain rows: 1 in (L1) when its first
        token is on time (it counts in ``g1_r``), -1 in each (L3) row whose bucket it completes
        by (it counts in ``phi_rj``)."""
        t = self.tables[col.request]
        js, own = chain.upto[col.request]
        done = own[js >= t["first"] + col.complete]
        extra_rows = [chain.highs[int(i)] for i in done]
        extra_coef = [-1.0] * len(done)
        if t["first_ok"][col.complete]:
            extra_rows.append(chain.highs[chain.first[col.request]])
            extra_coef.append(1.0)
        return (
            np.concatenate([rows, np.asarray(extra_rows, dtype=np.int64)]),
            np.concatenate([coef, np.asarray(extra_coef, dtype=float)]),
        )

    def _add_chain_rows(self, highs: Any, chain: ChainRows, since: int) -> None:
        """Add the chain rows ``since ..`` (their ``x`` and ``N`` terms; columns of the master
        already in it have no terms in them: (L4) rows, or the first rows before any ``lam``)
        as ``... <= 0`` rows of the master, recording where they are."""
        B = self.grid.buckets
        count = chain.count - since
        if count <= 0:
            return
        terms: list[list[tuple[int, float]]] = [[] for _ in range(count)]
        for row, i, v in chain.x_terms:
            if row >= since:
                terms[row - since].append((B + i, v))
        for row, j, v in chain.n_terms:
            if row >= since:
                terms[row - since].append((j, v))
        starts: list[int] = []
        idx: list[int] = []
        val: list[float] = []
        for row_terms in terms:
            starts.append(len(idx))
            idx += [c for c, _ in row_terms]
            val += [v for _, v in row_terms]
        first = int(highs.getNumRow())
        self._add_rows(
            highs, np.full(count, -highs.getInfinity()), np.zeros(count), starts, idx, val
        )
        chain.highs[since:] = list(range(first, first + count))

    def _interval_rows(
        self, highs: Any, master: dict[str, Any]
    ) -> list[tuple[int, int, np.ndarray]]:
        """The (L4) rows most violated by the master's last solution
        (:func:`~slolab.models.tdg_bound.interval_cuts`, as the bound separates them), added
        to the master: ``-N_e + N_s + sum x_qq <= 0``."""
        lay, chain = self.leaders, master["chain"]
        assert lay is not None
        m = len(lay["requests"])
        if not m:
            return []
        B = self.grid.buckets
        values = np.asarray(highs.getSolution().col_value)
        n_at = np.concatenate([[0.0], values[:B]])
        most = max(CUTS_PER_ROUND, self.data.n)
        cuts = interval_cuts(values[B : B + m], n_at, lay["start"], lay["end"], most)
        since = chain.count
        for s, e, chosen in cuts:
            n_terms = [(e - 1, -1.0)] + ([(s - 1, 1.0)] if s >= 1 else [])
            chain.add([(int(i), 1.0) for i in np.flatnonzero(chosen)], n_terms)
        self._add_chain_rows(highs, chain, since)
        return cuts

    def _burst_rows(self, highs: Any, master: dict[str, Any]) -> int:
        """The burst-capacity rows most violated by the master's last solution
        (:meth:`~slolab.models.tdg_burst.BurstTable.violated`, at most ``max(200, n)``), added
        to the master: ``sum_(r in S) w1_r sum_(p of r on time) lam_p <= F(S)``; how many."""
        table = self.relaxation.burst()
        if not len(table.requests):
            return 0
        values = np.asarray(highs.getSolution().col_value)
        first = int(highs.getNumCol()) - len(master["columns"])
        kept = np.zeros(self.data.n)
        lam_cols: dict[int, list[int]] = {}
        for i, col in enumerate(master["columns"]):
            if self.first_token_kept(col):
                kept[col.request] += values[first + i]
                lam_cols.setdefault(col.request, []).append(first + i)
        gain = kept[table.requests] * table.weights
        layout = master["burst"]
        found = table.violated(gain, max(CUTS_PER_ROUND, self.data.n))
        for mask, capacity in found:
            members = table.requests[mask]
            idx: list[int] = []
            val: list[float] = []
            for r in members.tolist():
                cols = lam_cols.get(int(r), [])
                idx += cols
                val += [float(self.data.first_gain[r])] * len(cols)
            row = int(highs.getNumRow())
            self._add_rows(
                highs, np.full(1, -highs.getInfinity()), np.full(1, capacity), [0], idx, val
            )
            layout["rows"].append((members, capacity))
            layout["highs"].append(row)
            for r in members.tolist():
                layout["of"].setdefault(int(r), []).append(row)
        return len(found)

    def _master(self, highs: Any) -> dict[str, Any]:
        """The master with the iteration counts ``N_j`` and one empty column per request
        (minimised as ``-gain``), and where its rows are."""
        B = self.grid.buckets
        inf = highs.getInfinity()
        lengths = np.diff(self.grid.bounds)
        # columns 0..B-1: N_j (no cost); then the chain family's leader columns x in [0, 1]
        highs.addVars(B, np.zeros(B), np.full(B, inf))
        if self.leaders is not None and self.leaders["count"]:
            nx = self.leaders["count"]
            highs.addVars(nx, np.zeros(nx), np.ones(nx))
        # rows 0..B-1: bucket time  t_c (N_j - N_(j-1)) + work <= L_j
        idx: list[int] = []
        val: list[float] = []
        starts: list[int] = []
        for j in range(B):
            starts.append(len(idx))
            idx.append(j)
            val.append(self.t_c)
            if j >= 1:
                idx.append(j - 1)
                val.append(-self.t_c)
        self._add_rows(highs, np.full(B, -inf), lengths, starts, idx, val)
        time_rows = np.arange(B)
        # rows: N_j - N_(j-1) >= 0
        if B > 1:
            idx, val, starts = [], [], []
            for j in range(1, B):
                starts.append(len(idx))
                idx += [j, j - 1]
                val += [1.0, -1.0]
            self._add_rows(highs, np.zeros(B - 1), np.full(B - 1, inf), starts, idx, val)
        iteration_rows: dict[int, np.ndarray] = {}
        convexity_rows: dict[int, int] = {}
        for r in self.requests:
            f = self.tables[r]["first"]
            buckets = self.bucket_range(r)
            idx, val, starts = [], [], []
            for j in buckets:
                starts.append(len(idx))
                idx.append(int(j))
                val.append(-1.0)
                if f >= 2:  # release cut: only iterations after b_(f-1)
                    idx.append(f - 2)
                    val.append(1.0)
            first_row = highs.getNumRow()
            self._add_rows(
                highs, np.full(len(buckets), -inf), np.zeros(len(buckets)), starts, idx, val
            )
            iteration_rows[r] = first_row + np.arange(len(buckets))
            convexity_rows[r] = highs.getNumRow()
            self._add_rows(highs, np.ones(1), np.ones(1), [0], [], [])
        master: dict[str, Any] = {
            "time_rows": time_rows,
            "iteration_rows": iteration_rows,
            "convexity_rows": convexity_rows,
            "columns": [],
        }
        if self.leaders is not None:
            chain = self.chain_rows()
            self._add_chain_rows(highs, chain, 0)
            master["chain"] = chain
        if self.burst:
            master["burst"] = {"rows": [], "highs": [], "of": {}}
        self._add_columns(highs, master, [self.empty_column(int(r)) for r in self.requests])
        return master

    @staticmethod
    def _add_rows(
        highs: Any,
        lower: np.ndarray,
        upper: np.ndarray,
        starts: list[int],
        idx: list[int],
        val: list[float],
    ) -> None:
        highs.addRows(
            len(lower),
            np.asarray(lower, dtype=float),
            np.asarray(upper, dtype=float),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=float),
        )

    def _column_entries(self, master: dict[str, Any], col: Column) -> tuple[np.ndarray, np.ndarray]:
        """The master rows of ``col`` and its coefficients there: its work in the bucket-time
        rows, its token counts in the iteration rows, 1 in its request's convexity row, and its
        terms in the chain and burst rows when the master has them."""
        buckets = self.bucket_range(col.request)
        placed = col.work > 0
        tokens = col.tokens > 0
        rows = np.concatenate(
            [
                master["time_rows"][buckets[placed]],
                master["iteration_rows"][col.request][tokens],
                [master["convexity_rows"][col.request]],
            ]
        )
        coef = np.concatenate([col.work[placed], col.tokens[tokens].astype(float), [1.0]])
        chain: ChainRows | None = master.get("chain")
        if chain is not None and col.complete >= 0 and col.request in chain.first:
            rows, coef = self._chain_terms(chain, col, rows, coef)
        if "burst" in master and self.first_token_kept(col):
            mine = master["burst"]["of"].get(col.request, [])
            weight = float(self.data.first_gain[col.request])
            rows = np.concatenate([rows, np.asarray(mine, dtype=np.int64)])
            coef = np.concatenate([coef, np.full(len(mine), weight)])
        return rows, coef

    def _add_columns(self, highs: Any, master: dict[str, Any], columns: list[Column]) -> None:
        """Add ``columns`` to the master: cost ``-gain``, their entries
        (:meth:`_column_entries`; kept, in the master's column order, in
        ``master["columns"]``)."""
        master["columns"].extend(columns)
        starts: list[int] = []
        idx: list[np.ndarray] = []
        val: list[np.ndarray] = []
        count = 0
        for col in columns:
            starts.append(count)
            rows, coef = self._column_entries(master, col)
            idx.append(rows.astype(np.int32))
            val.append(coef)
            count += len(rows)
        highs.addCols(
            len(columns),
            np.array([-col.gain for col in columns], dtype=float),
            np.zeros(len(columns)),
            np.full(len(columns), highs.getInfinity()),
            count,
            np.asarray(starts, dtype=np.int32),
            np.concatenate(idx),
            np.concatenate(val),
        )


register_model(COLUMNS_MODEL)(TdgHorizonColumns)

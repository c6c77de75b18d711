"""An upper bound on the optimal TDG of a ``tdg-horizon`` window that scales to real outputs.

:class:`TdgHorizonBound` (model ``tdg-horizon-bound``) is a time-bucketed linear programme,
aggregated per request and bucket, that relaxes the engine's semantics on one server: every
iteration lasts its timing-model time, iterations do not overlap, a request's tokens come out
in order, at most one per iteration and only in iterations after its arrival (the release
cuts), the first one when its (chunked) prompt completes. Its
optimum is never below the best TDG any schedule reaches (proof in ``docs/proserve.md``, "A
bound that scales"), and never above the ideal gain. It has no schedule: the harness labels it
``bound``.

Time is cut at boundaries ``0 = b_0 < b_1 < ... < b_B`` (every arrival, every earliest prompt
completion, every first-token deadline, and a grid of spacing ``Delta``); bucket ``j`` is
``(b_(j-1), b_j]`` of length ``L_j``. Per request ``r`` and bucket ``j`` of its active range
(arrival to last deadline):

- ``phi_rj`` in [0, 1]: the prompt is complete by ``b_j``;
- ``K_rj``: tokens emitted by ``b_j`` (first token included);
- ``G_rj``: decode tokens on time whose deadline is in a bucket ``<= j``;
- ``Phi_rj``: work of ``r`` processed by ``b_j`` (seconds, iterations spread uniformly over
  their duration: the *fluid* view);
- ``T_rj = sum_(i<=j) L_i phi_ri``: time elapsed since the prompt completed (at most);

and globally ``N_j``, the fluid number of iterations by ``b_j``. Constraints::

    sum_r (Phi_rj - Phi_r(j-1)) + t_c (N_j - N_(j-1)) <= L_j           capacity
    K_rj <= N_j - N_(first(r)-1)                one token of r per iteration after a_r
    phi_rj <= K_rj <= o_r phi_rj                the first token comes with the prompt
    Phi_rj >= P_r phi_rj + W_r(K_rj - phi_rj)   work of the prompt and decodes (tangents of W)
    t_min_r (K_rj - phi_rj) <= T_rj             a decode token per iteration of >= t_min_r
    G_rj <= K_rj - phi_rj,  0 <= G_rj - G_r(j-1) <= D_rj - D_r(j-1)
    g1_r <= phi_r,j1(r)                         first token by its deadline's boundary

    max  sum_r w1_r g1_r + wd_r G_r,e(r)

with ``P_r`` the prompt's work (``a_tok p_r + a_seq``), ``W_r(m)`` the work of ``m`` decode
tokens (convex in ``m``), ``t_min_r`` the shortest iteration holding a decode token of ``r``,
``D_rj`` the decode tokens of ``r`` whose deadline rounds up to a boundary ``<= b_j``.

This is the ``bucket`` family. The ``chain`` family (the default) adds what the fluid
iteration count ``N`` misses: every on-time first token is emitted by an iteration that ends
by its deadline, shared only with first tokens whose prompts can all be done by the earliest
of their deadlines. With ``x_rr`` (``r``'s first token on time and the earliest-deadline one of
its iteration, its *leader*) and ``x_rq`` (on time in the iteration led by ``q``)::

    g1_r <= x_rr + sum_q x_rq,   x_rq <= x_qq,   sum_(q : j1(q) <= j) x_rq <= phi_rj
    N_e - N_s >= sum_(q : f(q) - 1 >= s, j1(q) <= e) x_qq         (interval rows)

the interval rows added in rounds, most violated first; then, on the grid of events with the
coarsest spacing, the same LP with integral ``g1`` and ``x`` (HiGHS's MILP, its dual bound),
whose rounds add the *start rows* too: the prompts completed in iterations that cannot start
before ``b_u`` (their own arrival or their leader's is later) fit in ``(b_u, b_e]`` unless
one more iteration runs in ``[b_s, b_e]``::

    Work + t_c Lead <= (b_e - b_u) + c (N_e - N_s - Lead),   c = max(0, b_u - b_s - t_c)

(``Work``: those prompts' work; ``Lead``: their leaders arriving at or after ``b_u``; see
:meth:`TdgHorizonBound._start_cuts`). Each family's value is reported; the bound is the least.

The LP is built with numpy and solved by HiGHS (highspy) directly: at 500 requests it has
hundreds of thousands of columns, too many to write through PuLP. Two grids are solved in turn:
a coarse one (the uniform grid alone, a quarter of the pairs) and the fine one; the bound is
the smaller optimum (:meth:`TdgHorizonBound.solve_with`).

References
----------
ProServe, Sec. 2 (TDG, Eq. 3) and Sec. 4.1 (the affine iteration time, Eq. 4-7). The capacity
reasoning is the interval (energetic) relaxation of preemptive single-machine scheduling with
release dates and deadlines.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.proserve import (
    ON_TIME_TOL_S,
    HorizonData,
    require_affine,
)
from slolab.models.tdg_burst import BurstTable, burst_table
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.highs import backend_highs, highs_lp, lp_round, run_highs_for
from slolab.solvers.registry import register_model
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_TOKENS,
)

__all__ = [
    "BOUND_MODEL",
    "BucketGrid",
    "TdgHorizonBound",
    "bound_result",
    "ideal_gain",
    "interval_cuts",
]

logger = logging.getLogger("slolab")

#: A row ``sum coef x <= upper`` added in a round: (columns, coefficients, upper).
Row = tuple[np.ndarray, np.ndarray, float]

#: Registry name of the bound.
BOUND_MODEL = "tdg-horizon-bound"
#: Grid spacings tried, finest first (s); the finest whose LP stays within the size budget wins.
GRID_SPACINGS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
#: Default budget of (request, bucket) pairs (about 5 columns and 12 rows each): the LP then
#: solves in 5-60 s on one core.
DEFAULT_MAX_PAIRS = 8_000
#: Relative and absolute margin added to the LP optimum (covers HiGHS's feasibility tolerances).
LP_MARGIN_REL = 1e-6
LP_MARGIN_ABS = 1e-6
#: The coarse LP (no event boundaries) gets 1/COARSE_SHARE of the pairs and of the time left.
COARSE_SHARE = 4
#: Families of the bound: the bucket LP alone, or with the completion-leader rows.
FAMILIES = ("bucket", "chain")
#: Interval rows added per round of the ``chain`` family (at least one per request).
CUTS_PER_ROUND = 200
#: An interval row is added when violated by more than this many iterations.
CUT_TOL = 1e-6
#: A start row is added when violated by more than this many seconds.
START_CUT_TOL_S = 1e-7
#: The integral phase of the ``chain`` family runs only with at least this much time left (s).
MIP_MIN_S = 1.0
#: ... and on windows whose grid of events has at most this many (request, bucket) pairs
#: (beyond it the MILP does not finish within minutes: 435 s at 5,728 pairs, docs/proserve.md).
MIP_MAX_PAIRS = 4_000


def ideal_gain(data: HorizonData) -> float:
    """Every token on time: ``sum_r w1_r + wd_r (o_r - 1)``."""
    return float((data.first_gain + data.decode_gain * (data.output - 1)).sum())


def interval_cuts(
    lead: np.ndarray, n_at: np.ndarray, start: np.ndarray, end: np.ndarray, most: int
) -> list[tuple[int, int, np.ndarray]]:
    """The most violated interval rows (L4) ``N_e - N_s >= sum_(q : s <= start_q, end_q <= e)
    x_qq`` (at most ``most``, most violated first), as ``(s, e, mask of the leaders in it)``.

    ``lead``: the leaders' values ``x_qq``; ``n_at[j]``: ``N_j`` (``n_at[0] = N_0 = 0``);
    ``start``, ``end``: each leader's bucket range (``f(q) - 1``, ``j1(q)``). A 2-D cumulative
    table over the distinct starts and ends gives every row's excess at once."""
    s_vals, s_idx = np.unique(start, return_inverse=True)
    e_vals, e_idx = np.unique(end, return_inverse=True)
    mass = np.zeros((len(s_vals), len(e_vals)))
    np.add.at(mass, (s_idx, e_idx), lead)
    # leaders with start >= s_i and end <= e_k
    count = np.cumsum(np.cumsum(mass[::-1], axis=0)[::-1], axis=1)
    inside = n_at[e_vals][None, :] - n_at[s_vals][:, None]
    excess = count - inside
    excess[s_vals[:, None] >= e_vals[None, :]] = 0.0
    flat = np.flatnonzero(excess > CUT_TOL)
    if not len(flat):
        return []
    flat = flat[np.argsort(-excess.flat[flat], kind="stable")[:most]]
    cuts = []
    for f in flat:
        i, k = divmod(int(f), len(e_vals))
        chosen = (start >= s_vals[i]) & (end <= e_vals[k])
        cuts.append((int(s_vals[i]), int(e_vals[k]), chosen))
    return cuts


@dataclass(frozen=True, slots=True)
class BucketGrid:
    """The time boundaries of the LP and each request's active range of buckets.

    ``bounds[0] = 0``; bucket ``j`` (1-based) is ``(bounds[j-1], bounds[j]]``. ``first[r]`` and
    ``last[r]`` are the first and last bucket of request ``r``'s range (``first`` holds its
    arrival, ``last`` its last deadline); ``first_deadline_bucket[r]`` the bucket whose end is
    the first boundary at or after the first token's deadline (plus the on-time tolerance).
    """

    bounds: np.ndarray
    first: np.ndarray
    last: np.ndarray
    first_deadline_bucket: np.ndarray
    spacing_s: float

    @property
    def buckets(self) -> int:
        return len(self.bounds) - 1

    @property
    def pairs(self) -> int:
        return int((self.last - self.first + 1).sum())


def _round_up(bounds: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index ``j`` of the first boundary ``b_j >= t``."""
    return np.searchsorted(bounds, t, side="left")


def bound_result(
    model: str,
    status: Status,
    bound: float,
    start: float,
    grid: BucketGrid,
    ideal: float,
    **details: Any,
) -> Result:
    """The result of a bound of a window solved on ``grid`` since ``start``
    (``time.perf_counter``): no schedule, the bound as objective, the ideal gain and the
    grid's size in ``details`` before ``details``."""
    return Result(
        status=status,
        objective=bound,
        bound=bound,
        runtime_s=time.perf_counter() - start,
        backend="highs",
        model=model,
        sense="max",
        details={
            "ideal": ideal,
            "buckets": grid.buckets,
            "pairs": grid.pairs,
            "spacing_s": grid.spacing_s,
            **details,
        },
    )


class TdgHorizonBound(ExactModel):
    """Time-bucketed LP upper bound on the optimal TDG of a tdg-horizon window (see the module
    docstring and docs/proserve.md).

    Parameters
    ----------
    instance : Instance
        A ``tdg-horizon`` instance (any output lengths; memory assumed not to bind, as for the
        exact model).
    spacing_s : float, optional
        Grid spacing (s). Default: the finest of :data:`GRID_SPACINGS_S` whose LP has at most
        ``max_pairs`` (request, bucket) pairs.
    max_pairs : int
        Size budget used to pick the spacing.
    release_cuts : bool
        Count against a request's tokens only the iterations after its arrival
        (``K_rj <= N_j - N_(first(r)-1)``, the release cuts; default). False gives the plain
        bucket LP (``K_rj <= N_j``), never tighter.
    family : {"chain", "bucket"}
        ``bucket``: the bucket LP alone; ``chain`` (default): the bucket LP, then its
        completion-leader rows in rounds (its first round is the bucket LP), then the
        integral phase; every family's value is in the result's ``details["families"]``,
        the least is the bound and ``details["tightest"]`` names it.
    integral : bool
        Run the ``chain`` family's integral phase (default), on windows whose grid of events
        has at most :data:`MIP_MAX_PAIRS` pairs, with half the time the coarse LP leaves.
    start_rows : bool
        Add the start rows (:meth:`_start_cuts`: an iteration starts after the arrivals of
        what it holds) in the integral phase's rounds (default); False gives the former
        integral phase. The LP rounds never use them (they moved no LP optimum measurably).
    burst_rows : bool
        Add the burst-capacity rows ``sum_(r in S) w1_r g1_r <= F(S)`` over the interval sets
        (:mod:`slolab.models.tdg_burst`), separated in every round of every family (the
        ``bucket`` family then runs in rounds too) and in the integral phase. Default False:
        the former rounds. The families' names get ``+burst`` (``bucket+burst``, ...).

    Notes
    -----
    One class of about 810 lines, on purpose: the bucket LP (:meth:`build_lp`), the rows
    each round adds (:meth:`_completion_rows`, :meth:`_leader_cuts`, :meth:`_start_cuts`,
    :meth:`_burst_cuts`, picked by :meth:`_violated_rows`) and the rounds themselves
    (:meth:`_solve_lp`, :meth:`_solve_integral`) all read one column layout (the ``lp``
    mapping of index arrays
    :meth:`build_lp` returns, with the leader columns) and the window's derived times
    (:meth:`prompt_work_s`, :meth:`decode_work_s`, ...). They are one formulation with its
    separation routines; apart, every part would take that layout and those times as
    arguments, and the rounds would read the rows' index arithmetic from another module.
    """

    sense = "max"
    bound_only = True
    #: HiGHS's LP method ("ipm": interior point with crossover, or "simplex").
    lp_method = "ipm"

    def __init__(
        self,
        instance: Instance,
        spacing_s: float | None = None,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        release_cuts: bool = True,
        family: str = "chain",
        integral: bool = True,
        start_rows: bool = True,
        burst_rows: bool = False,
    ) -> None:
        super().__init__(instance)
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
        self.release_cuts = release_cuts
        self.family = family
        self.integral = integral
        self.start_rows = start_rows
        self.burst_rows = burst_rows
        self._burst: BurstTable | None = None
        self.data = HorizonData.of(instance, max_iterations=1)
        self.t_c, coef = require_affine(instance.timing, BOUND_MODEL)
        if (coef < 0).any() or self.t_c < 0:
            raise ValueError(
                f"{BOUND_MODEL} needs non-negative timing coefficients (a longer batch never "
                "runs faster)"
            )
        self.a_tok = float(coef[F_PREFILL_TOKENS])
        self.a_seq = float(coef[F_NUM_PREFILL])
        self.a_dec = float(coef[F_DECODE_TOKENS] + coef[F_NUM_DECODE])
        self.a_kv = float(coef[F_DECODE_KV])
        if spacing_s is not None and not spacing_s > 0:
            raise ValueError(f"spacing_s must be > 0, got {spacing_s}")
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
        self.grid = self._grid(spacing_s, max_pairs)
        #: grids solved in turn, coarsest first (the last is :attr:`grid`)
        self.grids = [self.grid]
        if spacing_s is None and max_pairs >= 4:
            coarse = self._grid(None, max_pairs // COARSE_SHARE, events=False)
            if coarse.pairs < self.grid.pairs:
                self.grids.insert(0, coarse)
        #: grid of the integral phase (``chain`` family): every event boundary and the
        #: coarsest uniform spacing; None when it is off or the grid exceeds MIP_MAX_PAIRS
        self.integral_grid: BucketGrid | None = None
        if family == "chain" and integral:
            grid = self._grid(spacing_s or GRID_SPACINGS_S[-1], 2**62)
            if grid.pairs <= MIP_MAX_PAIRS:
                self.integral_grid = grid

    # -- data of the relaxation -------------------------------------------------------------------
    def prompt_work_s(self) -> np.ndarray:
        """Least work of each prompt: its uncached tokens (less a snapshot's given cached
        prefix, :attr:`HorizonData.uncached`) and at least one chunk (s)."""
        return self.a_tok * self.data.uncached + self.a_seq

    def earliest_first_token_s(self) -> np.ndarray:
        """Arrival plus the prompt run alone in one iteration: no schedule emits it sooner."""
        return self.data.arrival_s + self.t_c + self.prompt_work_s()

    def decode_work_s(self, m: np.ndarray | float, r: int) -> np.ndarray | float:
        """``W_r(m)``: work of the first ``m`` decode tokens of ``r`` (token ``k`` reads
        ``p_r + k - 1`` KV tokens, a given cached prefix included): ``m (a_dec + a_kv p) +
        a_kv m (m + 1) / 2``."""
        p = float(self.data.prompt[r])
        return m * (self.a_dec + self.a_kv * p) + self.a_kv * m * (m + 1) / 2.0

    def shortest_decode_iteration_s(self) -> np.ndarray:
        """``t_min_r``: an iteration holding a decode token of ``r`` lasts at least this."""
        return self.t_c + self.a_dec + self.a_kv * (self.data.prompt + 1)

    def _deadlines_finite(self) -> np.ndarray:
        return np.isfinite(self.data.first_deadline_s)

    def burst(self) -> BurstTable:
        """The burst capacities of the window's interval sets (:func:`burst_table`; built once):
        first-token deadlines plus the on-time tolerance, each prompt's least work."""
        if self._burst is None:
            d = self.data
            self._burst = burst_table(
                d.arrival_s,
                d.first_deadline_s + ON_TIME_TOL_S,
                self.prompt_work_s(),
                d.first_gain,
                self.t_c,
                self.earliest_first_token_s(),
            )
        return self._burst

    def last_deadline_s(self) -> np.ndarray:
        d = self.data
        return d.first_deadline_s + (d.output - 1) * d.tpot_s

    def _grid(self, spacing_s: float | None, max_pairs: int, events: bool = True) -> BucketGrid:
        """The finest grid within ``max_pairs``; ``events=False`` leaves out the arrivals,
        earliest first tokens and first deadlines (a coarser relaxation, still valid: releases
        round down and deadlines up to the grid)."""
        d = self.data
        finite = self._deadlines_finite()
        if not finite.any():
            end = float(d.arrival_s.max()) + 1.0
        else:
            end = float(self.last_deadline_s()[finite].max()) + 2 * ON_TIME_TOL_S
        points = np.concatenate(
            [
                d.arrival_s,
                self.earliest_first_token_s(),
                d.first_deadline_s[finite] + ON_TIME_TOL_S,
            ]
        )
        points = points[points < end] if events else np.zeros(0)
        candidates = GRID_SPACINGS_S if spacing_s is None else (float(spacing_s),)
        grid = None
        for spacing in candidates:
            steps = math.ceil(end / spacing)
            uniform = np.arange(1, steps + 1) * spacing
            bounds = np.unique(np.concatenate([[0.0], points, uniform]))
            grid = self._ranges(bounds, spacing)
            if grid.pairs <= max_pairs:
                break
        assert grid is not None
        return grid

    def _ranges(self, bounds: np.ndarray, spacing: float) -> BucketGrid:
        d = self.data
        # first bucket: the one holding the arrival (it starts there when arrivals are boundaries)
        first = np.searchsorted(bounds, d.arrival_s, side="right")
        first = np.minimum(first, len(bounds) - 1)
        finite = self._deadlines_finite()
        last_deadline = np.where(finite, self.last_deadline_s(), d.arrival_s)
        last = np.maximum(_round_up(bounds, last_deadline + ON_TIME_TOL_S), first)
        last = np.minimum(last, len(bounds) - 1)
        j1 = _round_up(bounds, np.where(finite, d.first_deadline_s + ON_TIME_TOL_S, 0.0))
        return BucketGrid(bounds, first.astype(np.int64), last.astype(np.int64), j1, spacing)

    # -- the LP -----------------------------------------------------------------------------------
    def build_lp(self, grid: BucketGrid | None = None) -> dict[str, Any]:
        """The LP on ``grid`` (default :attr:`grid`) as arrays: costs, column bounds, a CSC
        matrix and row bounds (maximize), with where the linking rows are: each request's
        iteration rows (``iteration_rows[r]``, one per bucket of its range) and the bucket
        capacity rows (``capacity_rows``, the last ``B``)."""
        import scipy.sparse as sp

        d = self.data
        grid = self.grid if grid is None else grid
        B = grid.buckets
        lengths = np.diff(grid.bounds)
        cols_cost: list[np.ndarray] = []
        cols_lo: list[np.ndarray] = []
        cols_hi: list[np.ndarray] = []
        next_col = [0]

        def add_cols(n: int, lo: Any, hi: Any, cost: Any = 0.0) -> np.ndarray:
            idx = np.arange(next_col[0], next_col[0] + n)
            next_col[0] += n
            cols_lo.append(np.broadcast_to(np.asarray(lo, dtype=float), (n,)).copy())
            cols_hi.append(np.broadcast_to(np.asarray(hi, dtype=float), (n,)).copy())
            cols_cost.append(np.broadcast_to(np.asarray(cost, dtype=float), (n,)).copy())
            return idx

        rows_i: list[np.ndarray] = []
        rows_j: list[np.ndarray] = []
        rows_v: list[np.ndarray] = []
        row_lo: list[np.ndarray] = []
        row_hi: list[np.ndarray] = []
        next_row = [0]

        def add_rows(terms: list[tuple[np.ndarray, Any]], lo: Any, hi: Any) -> None:
            """Rows ``lo <= sum_t coef_t x[cols_t] <= hi``, one per position of the arrays."""
            n = len(terms[0][0])
            if n == 0:
                return
            idx = np.arange(next_row[0], next_row[0] + n)
            next_row[0] += n
            for cols, coef in terms:
                rows_i.append(idx)
                rows_j.append(np.asarray(cols))
                rows_v.append(np.broadcast_to(np.asarray(coef, dtype=float), (n,)).copy())
            row_lo.append(np.broadcast_to(np.asarray(lo, dtype=float), (n,)).copy())
            row_hi.append(np.broadcast_to(np.asarray(hi, dtype=float), (n,)).copy())

        inf = np.inf
        # N_j, j = 1..B: fluid iterations by b_j (cumulative)
        N = add_cols(B, 0.0, inf)
        add_rows([(N[1:], 1.0), (N[:-1], -1.0)], 0.0, inf)
        capacity_terms: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (bucket, col, coef)
        capacity_terms.append((np.arange(1, B + 1), N, np.full(B, self.t_c)))
        capacity_terms.append((np.arange(2, B + 1), N[:-1], np.full(B - 1, -self.t_c)))

        finite = self._deadlines_finite()
        prompt_work = self.prompt_work_s()
        earliest = self.earliest_first_token_s()
        t_min = self.shortest_decode_iteration_s()
        fixed_gain = 0.0
        phi_of: dict[int, tuple[int, np.ndarray]] = {}  # r -> (first bucket, phi columns)
        iteration_rows: dict[int, np.ndarray] = {}  # r -> its rows K_rj <= N_j (- N_(f-1))
        g1_of: dict[int, int] = {}
        for r in range(d.n):
            o = int(d.output[r])
            if not finite[r]:
                # no deadline: every token is on time whatever happens (counted in full)
                fixed_gain += float(d.first_gain[r] + d.decode_gain[r] * (o - 1))
                continue
            j = np.arange(int(grid.first[r]), int(grid.last[r]) + 1)  # buckets, 1-based
            n = len(j)
            end = grid.bounds[j]
            # decode tokens k = 2..o by deadline bucket
            deadlines = d.first_deadline_s[r] + np.arange(1, o) * d.tpot_s[r] + ON_TIME_TOL_S
            per_bucket = np.bincount(
                np.clip(_round_up(grid.bounds, deadlines) - j[0], 0, n - 1), minlength=n
            )
            phi_hi = np.where(end >= earliest[r] - 1e-12, 1.0, 0.0)
            phi = add_cols(n, 0.0, phi_hi)
            K = add_cols(n, 0.0, float(o))
            G = add_cols(n, 0.0, float(o - 1))
            G_cost = np.zeros(n)
            G_cost[-1] = float(d.decode_gain[r])
            cols_cost[-1] += G_cost
            Phi = add_cols(n, 0.0, inf)
            T = add_cols(n, 0.0, inf)
            # monotone phi and Phi
            add_rows([(phi[1:], 1.0), (phi[:-1], -1.0)], 0.0, inf)
            add_rows([(Phi[1:], 1.0), (Phi[:-1], -1.0)], 0.0, inf)
            # capacity: increments of Phi
            capacity_terms.append((j, Phi, np.ones(n)))
            capacity_terms.append((j[1:], Phi[:-1], -np.ones(n - 1)))
            # one token of r per iteration; none before the prompt
            iteration_rows[r] = np.arange(next_row[0], next_row[0] + n)
            if self.release_cuts and j[0] >= 2:
                # r's iterations start at or after its arrival, so lie inside (b_(first-1), b_j]
                before = np.full(n, N[j[0] - 2])
                add_rows([(K, 1.0), (N[j - 1], -1.0), (before, 1.0)], -inf, 0.0)
            else:
                add_rows([(K, 1.0), (N[j - 1], -1.0)], -inf, 0.0)
            add_rows([(K, 1.0), (phi, -float(o))], -inf, 0.0)
            add_rows([(K, 1.0), (phi, -1.0)], 0.0, inf)
            # work: Phi >= P phi + W(m0) + s (K - phi - m0), tangents at m0 = 0 and (o - 1) / 2
            for m0 in sorted({0, (o - 1) // 2}):
                w0 = float(self.decode_work_s(m0, r))
                slope = float(self.decode_work_s(m0 + 1, r)) - w0
                add_rows(
                    [(Phi, 1.0), (phi, -(float(prompt_work[r]) - slope)), (K, -slope)],
                    w0 - slope * m0,
                    inf,
                )
            # T_j = T_(j-1) + L_j phi_j
            add_rows([(T[:1], 1.0), (phi[:1], -lengths[j[0] - 1])], 0.0, 0.0)
            add_rows([(T[1:], 1.0), (T[:-1], -1.0), (phi[1:], -lengths[j[1:] - 1])], 0.0, 0.0)
            # decode tokens after the prompt, one per iteration of >= t_min
            add_rows([(K, float(t_min[r])), (phi, -float(t_min[r])), (T, -1.0)], -inf, 0.0)
            # on-time decode tokens
            add_rows([(G, 1.0), (K, -1.0), (phi, 1.0)], -inf, 0.0)
            add_rows([(G[:1], 1.0)], -inf, float(per_bucket[0]))
            if n > 1:
                add_rows([(G[1:], 1.0), (G[:-1], -1.0)], 0.0, per_bucket[1:].astype(float))
            # first token
            g1 = add_cols(1, 0.0, 1.0, float(d.first_gain[r]))
            j1 = int(grid.first_deadline_bucket[r])
            if j1 < j[0] or phi_hi[min(j1, j[-1]) - j[0]] == 0.0:
                cols_hi[-1][:] = 0.0
            else:
                add_rows([(g1, 1.0), (phi[[min(j1, j[-1]) - j[0]]], -1.0)], -inf, 0.0)
                phi_of[r] = (int(j[0]), phi)
                g1_of[r] = int(g1[0])

        leaders: dict[str, np.ndarray] = {}
        if self.family == "chain" and g1_of:
            leaders = self._completion_rows(grid, phi_of, g1_of, add_cols, add_rows)

        cap_rows = np.concatenate([t[0] for t in capacity_terms]) - 1 + next_row[0]
        rows_i.append(cap_rows)
        rows_j.append(np.concatenate([t[1] for t in capacity_terms]))
        rows_v.append(np.concatenate([t[2] for t in capacity_terms]))
        row_lo.append(np.full(B, -inf))
        row_hi.append(lengths.copy())
        next_row[0] += B

        ncol, nrow = next_col[0], next_row[0]
        matrix = sp.csc_matrix(
            (np.concatenate(rows_v), (np.concatenate(rows_i), np.concatenate(rows_j))),
            shape=(nrow, ncol),
        )
        return {
            "cost": np.concatenate(cols_cost),
            "col_lo": np.concatenate(cols_lo),
            "col_hi": np.concatenate(cols_hi),
            "matrix": matrix,
            "row_lo": np.concatenate(row_lo),
            "row_hi": np.concatenate(row_hi),
            "fixed_gain": fixed_gain,
            "iterations": N,
            "bounds": grid.bounds,
            "leaders": leaders,
            "first_tokens": np.array(sorted(g1_of.values()), dtype=np.int64),
            "first_token_of": g1_of,
            "iteration_rows": iteration_rows,
            "capacity_rows": np.arange(nrow - B, nrow),
        }

    def leader_pairs(self, requests: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``requests`` in (first deadline, index) order, and for each position ``i`` the
        positions ``q < i`` of :math:`C(r)`: the earlier-deadline requests whose completion
        iteration could also complete ``r = requests[i]`` (``e_r <= d_q1 + tol`` and
        ``min(a_r, a_q) + t_c + P_r + P_q <= d_q1 + tol``; docs/proserve.md, "A second family")."""
        d = self.data
        reqs = np.array(sorted(requests, key=lambda r: (d.first_deadline_s[r], r)), dtype=np.int64)
        arrival = d.arrival_s[reqs]
        deadline = d.first_deadline_s[reqs] + ON_TIME_TOL_S + 1e-12
        work = self.prompt_work_s()[reqs]
        earliest = self.earliest_first_token_s()[reqs]
        pairs = []
        for i in range(len(reqs)):
            # leaders before r whose iteration can also complete r's prompt by their deadline
            q = np.arange(i)
            ok = (earliest[i] <= deadline[q]) & (
                np.minimum(arrival[i], arrival[q]) + self.t_c + work[i] + work[q] <= deadline[q]
            )
            pairs.append(q[ok])
        return reqs, pairs

    def _completion_rows(
        self,
        grid: BucketGrid,
        phi_of: dict[int, tuple[int, np.ndarray]],
        g1_of: dict[int, int],
        add_cols: Any,
        add_rows: Any,
    ) -> dict[str, np.ndarray]:
        """The completion-leader columns and rows of the ``chain`` family.

        ``x_rq`` (``q`` before ``r`` in (first deadline, index) order, both able to complete in
        one iteration by ``d_q``): ``r``'s first token is on time and emitted by the iteration
        that emits ``q``'s, ``q`` the earliest-deadline on-time first token in it (its
        *leader*); ``x_rr``: ``r`` leads its own. Rows::

            g1_r <= x_rr + sum_q x_rq,      x_rq <= x_qq,
            sum_(q : j1(q) <= j) x_rq <= phi_rj   for j in {j1(q)} and j1(r)

        Returns the leaders' columns with the bucket range their iteration lies in (``start``
        = ``f(q) - 1``, ``end`` = ``j1(q)``), for the interval rows of :meth:`_leader_cuts`.
        """
        reqs, pairs = self.leader_pairs(list(g1_of))
        work = self.prompt_work_s()[reqs]
        j1 = grid.first_deadline_bucket[reqs].astype(np.int64)
        m = len(reqs)
        lead = add_cols(m, 0.0, 1.0)
        shared: list[np.ndarray] = []
        shared_q: list[np.ndarray] = []
        for i in range(m):
            r = int(reqs[i])
            q = pairs[i]
            x = add_cols(len(q), 0.0, 1.0) if len(q) else np.zeros(0, dtype=np.int64)
            shared.append(x)
            shared_q.append(q)
            g1 = np.array([g1_of[r]])
            add_rows(
                [(g1, 1.0), (np.array([lead[i]]), -1.0)] + [(np.array([c]), -1.0) for c in x],
                -np.inf,
                0.0,
            )
            if len(q):
                add_rows([(x, 1.0), (lead[q], -1.0)], -np.inf, 0.0)
            first, phi = phi_of[r]
            order = np.argsort(j1[q], kind="stable")
            xs, js = x[order], j1[q][order]
            for jj in np.unique(js):
                mine = xs[js <= jj]
                add_rows(
                    [(np.array([c]), 1.0) for c in mine] + [(np.array([phi[jj - first]]), -1.0)],
                    -np.inf,
                    0.0,
                )
            add_rows(
                [(np.array([c]), 1.0) for c in xs]
                + [(np.array([lead[i]]), 1.0), (np.array([phi[j1[i] - first]]), -1.0)],
                -np.inf,
                0.0,
            )
        start = grid.first[reqs].astype(np.int64) - 1
        return {
            "columns": lead,
            "start": start,
            "end": j1,
            "shared": np.concatenate(shared),
            # position (in deadline order) of the joining request and of the leader of each
            # shared column, each request's first-token column and its prompt work
            "shared_r": np.repeat(np.arange(m), [len(q) for q in shared_q]),
            "shared_q": np.concatenate(shared_q).astype(np.int64),
            "first_tokens": np.array([g1_of[int(r)] for r in reqs], dtype=np.int64),
            "work": work,
        }

    @staticmethod
    def _leader_cuts(
        values: np.ndarray, iterations: np.ndarray, leaders: dict[str, np.ndarray], most: int
    ) -> list[tuple[int, int, np.ndarray]]:
        """The most violated interval rows ``N_e - N_s >= sum_(q : s <= start_q, end_q <= e)
        x_qq`` at ``values`` (at most ``most``), as ``(s, e, leader columns)``."""
        if not len(leaders.get("columns", ())):
            return []
        n_at = np.concatenate([[0.0], values[iterations]])  # N_0 = 0
        return [
            (s, e, leaders["columns"][chosen])
            for s, e, chosen in interval_cuts(
                values[leaders["columns"]], n_at, leaders["start"], leaders["end"], most
            )
        ]

    backends = ("highs",)

    def supports(self) -> frozenset[str]:
        """HiGHS only: the LP goes to highspy directly (see the module docstring)."""
        return frozenset({"milp"})

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        """Solve the LPs of :attr:`grids` with HiGHS, coarsest first; the bound is the least
        optimum found plus a margin, at most the ideal.

        The coarse LP gets a quarter of the time limit, the fine one the rest (half of it when
        the integral phase follows, which gets what is left). With the ``chain`` family each LP
        is re-solved (dual simplex, warm) after adding its most violated interval rows, until
        none is violated or the time is up; every round's optimum is a bound, its first
        round's that of the ``bucket`` family; then the integral phase on
        :attr:`integral_grid`. ``details["families"]`` holds each family's least value
        (``bucket``, ``chain``, ``chain-integral``), ``details["tightest"]`` the least (the
        ``bucket`` family on a tie). Status: OPTIMAL when every phase finished (the fine LP to
        its last interval row, the MILP to optimality), FEASIBLE when some bound was found but
        a phase was cut by the time (the bound holds), TIME_LIMIT with the ideal gain (the
        trivial bound) when none was.
        """
        if backend.name != "highs":
            raise ValueError(f"{BOUND_MODEL} is solved by HiGHS's LP only, not {backend.name!r}")
        start = time.perf_counter()
        ideal = ideal_gain(self.data)
        bound, status = ideal, Status.TIME_LIMIT
        families: dict[str, float] = {}
        levels: list[dict[str, Any]] = []
        plan = [(grid, False) for grid in self.grids]
        if self.integral_grid is not None:
            plan.append((self.integral_grid, True))
        finished = True
        for i, (grid, integral) in enumerate(plan):
            left = time_limit - (time.perf_counter() - start)
            share = left if i + 1 == len(plan) else left / COARSE_SHARE
            if grid is self.grid and self.integral_grid is not None:
                share = left / 2
            if share <= 0:
                finished = False
                break
            level = self._solve_lp(grid, backend, share, integral=integral)
            levels.append(level)
            for family, value in level["families"].items():
                value = min(value + LP_MARGIN_REL * abs(value) + LP_MARGIN_ABS, ideal)
                families[family] = min(families.get(family, ideal), value)
                bound = min(bound, value)
            if level["families"] and status == Status.TIME_LIMIT:
                status = Status.FEASIBLE
            if grid is self.grid:
                finished = finished and level["converged"]
            if integral:
                finished = finished and level["integral_done"]
        if status == Status.FEASIBLE and finished and len(levels) == len(plan):
            status = Status.OPTIMAL
        finest = next((lv for lv in levels if lv["pairs"] == self.grid.pairs), {})
        tightest = min(families, key=lambda f: (families[f], f != "bucket")) if families else None
        return bound_result(
            BOUND_MODEL,
            status,
            bound,
            start,
            self.grid,
            ideal,
            release_cuts=self.release_cuts,
            family=self.family,
            families=families,
            tightest=tightest,
            columns=finest.get("columns"),
            rows=finest.get("rows"),
            levels=levels,
        )

    def _solve_lp(
        self, grid: BucketGrid, backend: Any, time_limit: float, integral: bool = False
    ) -> dict[str, Any]:
        """Solve the LP on ``grid`` (with the ``chain`` family: in rounds of interval rows)
        within ``time_limit``; a summary with each family's optimum (absent when not solved)
        and whether the last LP solved is the family's whole LP (``converged``)."""

        start = time.perf_counter()
        lp = self.build_lp(grid)
        built = time.perf_counter() - start
        model = highs_lp(
            lp["matrix"],
            lp["cost"],
            lp["col_lo"],
            lp["col_hi"],
            lp["row_lo"],
            lp["row_hi"],
            maximize=True,
        )
        highs = backend_highs(backend)
        highs.setOptionValue("solver", self.lp_method)
        highs.passModel(model)
        families: dict[str, float] = {}
        rounds: list[float] = []
        round_s: list[float] = []  # time from the build to the end of each round
        cuts_added = 0
        converged = False
        first_solve_s = 0.0
        code = None
        while True:
            left = time_limit - (time.perf_counter() - start)
            if left <= 1e-3 and rounds:
                break
            optimal = lp_round(highs, left, f"{BOUND_MODEL} LP")
            if not rounds:
                first_solve_s = time.perf_counter() - start - built
            code = highs.getModelStatus()
            if not optimal:
                break
            value = float(highs.getInfo().objective_function_value) + lp["fixed_gain"]
            rounds.append(value)
            round_s.append(time.perf_counter() - start)
            tag = "+burst" if self.burst_rows else ""
            families.setdefault("bucket", value)
            if self.family == "chain":
                families["chain" + tag] = value
            elif tag:
                families["bucket" + tag] = value
            else:
                converged = True
                break
            cuts, _ = self._violated_rows(highs, lp)
            if not cuts:
                converged = True
                break
            self._add_cuts(highs, cuts)
            cuts_added += len(cuts)
            # the basis of the last optimum stays valid: the dual simplex warm-starts from it
            highs.setOptionValue("solver", "simplex")
        mip: dict[str, Any] = {}
        # HiGHS's MILP re-solves the root LP and checks its clock only between its steps, so
        # it may overrun its limit by about one LP solve: that much is kept back
        left = time_limit - (time.perf_counter() - start) - first_solve_s
        # with no first token that can be on time there is nothing to make integral
        integral_done = converged and not lp["leaders"]
        if integral and converged and lp["leaders"] and left > MIP_MIN_S:
            value, mip = self._solve_integral(highs, lp, left)
            if value is not None:
                families["chain-integral" + ("+burst" if self.burst_rows else "")] = value
            integral_done = mip["status"] == "Optimal"
        return {
            "spacing_s": grid.spacing_s,
            "pairs": grid.pairs,
            "columns": int(highs.getNumCol()),
            "rows": int(highs.getNumRow()),
            "status": highs.modelStatusToString(code) if code is not None else "not run",
            "value": rounds[-1] if rounds else None,
            "families": families,
            "rounds": len(rounds),
            "round_s": round_s,
            "cuts": cuts_added,
            "converged": converged,
            "mip": mip,
            "integral_done": integral_done,
            "runtime_s": time.perf_counter() - start,
            "build_s": built,
        }

    def _solve_integral(
        self, highs: Any, lp: dict[str, Any], time_limit: float
    ) -> tuple[float | None, dict[str, Any]]:
        """The LP of the last round with integral first tokens and leaders (``g1``, ``x``),
        solved by HiGHS's MILP within ``time_limit``: its dual bound (None when HiGHS found
        none) and a summary. Interval rows violated by an incumbent are added and the MILP
        re-solved while time is left; every dual bound holds (it bounds a relaxation)."""
        import highspy

        start = time.perf_counter()
        integral = np.concatenate(
            [lp["first_tokens"], lp["leaders"]["columns"], lp["leaders"]["shared"]]
        )
        highs.changeColsIntegrality(
            len(integral),
            integral.astype(np.int32),
            np.full(len(integral), highspy.HighsVarType.kInteger),
        )
        best: float | None = None
        rounds = 0
        start_cuts = 0
        status = "not run"
        while True:
            left = time_limit - (time.perf_counter() - start)
            if left <= MIP_MIN_S and rounds:
                break
            run_highs_for(highs, left)
            rounds += 1
            code = highs.getModelStatus()
            status = highs.modelStatusToString(code)
            dual = float(highs.getInfo().mip_dual_bound)
            if math.isfinite(dual):
                dual += lp["fixed_gain"]
                best = dual if best is None else min(best, dual)
            if code != highspy.HighsModelStatus.kOptimal:
                break
            cuts, starts = self._violated_rows(highs, lp, self.start_rows)
            if not cuts:
                break
            self._add_cuts(highs, cuts)
            start_cuts += starts
        return best, {
            "status": status,
            "dual_bound": best,
            "rounds": rounds,
            "integral_columns": int(len(integral)),
            "start_cuts": start_cuts,
            "runtime_s": time.perf_counter() - start,
        }

    def _violated_rows(
        self, highs: Any, lp: dict[str, Any], start_rows: bool = False
    ) -> tuple[list[Row], int]:
        """The interval rows (:meth:`_leader_cuts`) and, with ``start_rows``, the start rows
        (:meth:`_start_cuts`) most violated by HiGHS's last solution, as rows ``sum coef x <=
        upper``, and how many of them are start rows."""
        values = np.asarray(highs.getSolution().col_value)
        iterations = lp["iterations"]
        most = max(CUTS_PER_ROUND, self.data.n)
        rows: list[Row] = []
        if self.burst_rows:
            rows += self._burst_cuts(values, lp, most)
        leader_cuts = (
            self._leader_cuts(values, iterations, lp["leaders"], most) if lp["leaders"] else []
        )
        for s, e, leaders in leader_cuts:
            # N_e - N_s - sum x_qq >= 0, written -N_e + N_s + sum x_qq <= 0 (N_0 = 0)
            cols = [int(iterations[e - 1])] + ([int(iterations[s - 1])] if s >= 1 else [])
            coefs = [-1.0] + ([1.0] if s >= 1 else [])
            rows.append(
                (
                    np.concatenate([np.asarray(cols, dtype=np.int64), leaders]),
                    np.concatenate([coefs, np.ones(len(leaders))]),
                    0.0,
                )
            )
        starts = self._start_cuts(values, lp, most) if start_rows else []
        return rows + starts, len(starts)

    def _burst_cuts(self, values: np.ndarray, lp: dict[str, Any], most: int) -> list[Row]:
        """The burst-capacity rows ``sum_(r in S) w1_r g1_r <= F(S)`` most violated at
        ``values`` (:meth:`BurstTable.violated`; at most ``most``). A request without a ``g1``
        column (its first token cannot be on time on this grid) has no term."""
        table = self.burst()
        g1_of = lp["first_token_of"]
        cols = np.array([g1_of.get(int(r), -1) for r in table.requests], dtype=np.int64)
        present = cols >= 0
        gain = np.where(present, values[np.maximum(cols, 0)], 0.0) * table.weights
        rows: list[Row] = []
        for mask, capacity in table.violated(gain, most):
            chosen = mask & present
            rows.append((cols[chosen], table.weights[chosen], capacity))
        return rows

    def _start_cuts(self, values: np.ndarray, lp: dict[str, Any], most: int) -> list[Row]:
        """The most violated start rows at ``values`` (at most ``most``; docs/proserve.md,
        "Start rows", with the proof). For boundaries ``s < u < e`` (``s`` and
        ``u`` where first buckets start, ``e`` where first deadlines round to), with ``c =
        max(0, b_u - b_s - t_c)``::

            Work + t_c Lead <= (b_e - b_u) + c (N_e - N_s - Lead)            (S1)
            Work + t_c Lead <= (b_e - b_u) + c                   when c > 0  (S2)

        ``Lead = sum x_qq`` over the leaders arriving at or after ``b_u`` with ``j1(q) <= e``;
        ``Work = sum P_r g1_r`` over the requests arriving at or after ``b_u`` with ``j1(r) <=
        e``, plus ``sum P_r x_rq`` over the requests arriving in ``[b_s, b_u)`` joining such a
        leader ``q``. Per ``(u, e)`` only the ``s`` most violating each row is kept.
        """
        leaders = lp["leaders"]
        if not len(leaders.get("columns", ())):
            return []
        bounds = lp["bounds"]
        iterations = lp["iterations"]
        work = leaders["work"]
        lead_cols, g1_cols = leaders["columns"], leaders["first_tokens"]
        shared, sr, sq = leaders["shared"], leaders["shared_r"], leaders["shared_q"]
        lead, x = values[lead_cols], values[shared]
        a_vals, a_idx = np.unique(leaders["start"], return_inverse=True)
        e_vals, e_idx = np.unique(leaders["end"], return_inverse=True)
        na, ne = len(a_vals), len(e_vals)

        def late_by(weights: np.ndarray) -> np.ndarray:
            """``[u, e]``: sum of ``weights`` over arrival class ``>= u``, deadline ``<= e``."""
            mass = np.zeros((na, ne))
            np.add.at(mass, (a_idx, e_idx), weights)
            return np.cumsum(np.cumsum(mass[::-1], axis=0)[::-1], axis=1)

        late_work = late_by(work * values[g1_cols] + self.t_c * lead)
        late_lead = late_by(lead)
        n_at = np.concatenate([[0.0], values[iterations]])  # N_0 = 0
        b_s, n_s = bounds[a_vals], n_at[a_vals]
        b_e, n_e = bounds[e_vals], n_at[e_vals]
        found: list[tuple[float, int, int, int, bool]] = []  # (violation, s, u, e, S2)
        for i in range(1, na):
            # joiners arriving in class h < i of leaders arriving in class >= i: [h, e] mass
            keep = (a_idx[sq] >= i) & (a_idx[sr] < i)
            mass = np.zeros((i, ne))
            np.add.at(mass, (a_idx[sr[keep]], e_idx[sq[keep]]), work[sr[keep]] * x[keep])
            # joined[h, k]: joiners of classes h..i-1 whose leader's deadline class is <= k
            joined = np.cumsum(np.cumsum(mass, axis=1)[::-1], axis=0)[::-1]
            c = np.maximum(0.0, bounds[a_vals[i]] - b_s[:i] - self.t_c)[:, None]
            base = late_work[i][None, :] + joined - (b_e - bounds[a_vals[i]])[None, :]
            first = base - c * (n_e[None, :] - n_s[:i, None] - late_lead[i][None, :])
            second = np.where(c > 0, base - c, -np.inf)
            valid = e_vals > a_vals[i]
            for viol, is_second in ((first, False), (second, True)):
                s_best = np.argmax(viol, axis=0)
                best = viol[s_best, np.arange(ne)]
                for k in np.flatnonzero(valid & (best > START_CUT_TOL_S)):
                    found.append((float(best[k]), int(s_best[k]), i, int(k), is_second))
        found.sort(key=lambda f: -f[0])
        rows: list[Row] = []
        for _, s_cls, u_cls, e_cls, is_second in found[:most]:
            c_su = max(0.0, float(bounds[a_vals[u_cls]] - b_s[s_cls]) - self.t_c)
            late = (a_idx >= u_cls) & (e_idx <= e_cls)
            joins = (
                (a_idx[sr] >= s_cls)
                & (a_idx[sr] < u_cls)
                & (a_idx[sq] >= u_cls)
                & (e_idx[sq] <= e_cls)
            )
            cols = [g1_cols[late], lead_cols[late], shared[joins]]
            lead_coef = self.t_c + (0.0 if is_second else c_su)
            coefs = [work[late], np.full(int(late.sum()), lead_coef), work[sr[joins]]]
            upper = float(b_e[e_cls] - bounds[a_vals[u_cls]])
            if is_second:
                upper += c_su
            elif c_su > 0:
                cols.append(np.array([iterations[e_vals[e_cls] - 1]], dtype=np.int64))
                coefs.append(np.array([-c_su]))
                if a_vals[s_cls] >= 1:
                    cols.append(np.array([iterations[a_vals[s_cls] - 1]], dtype=np.int64))
                    coefs.append(np.array([c_su]))
            rows.append((np.concatenate(cols), np.concatenate(coefs), upper))
        return rows

    @staticmethod
    def _add_cuts(highs: Any, rows: list[Row]) -> None:
        """Add the rows ``sum coef x <= upper`` of :meth:`_violated_rows`."""
        starts = np.cumsum([0] + [len(cols) for cols, _, _ in rows[:-1]])
        highs.addRows(
            len(rows),
            np.full(len(rows), -np.inf),
            np.array([upper for _, _, upper in rows], dtype=float),
            int(sum(len(cols) for cols, _, _ in rows)),
            starts.astype(np.int32),
            np.concatenate([cols for cols, _, _ in rows]).astype(np.int32),
            np.concatenate([coefs for _, coefs, _ in rows]).astype(float),
        )


register_model(BOUND_MODEL)(TdgHorizonBound)

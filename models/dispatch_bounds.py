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
- the cost is at least the available worker-seconds plus the start-up delays.

Maximizing ``(1/n) sum_r m_r - lambda C`` over it (``m_r`` binary, or continuous for the LP)
bounds the objective of every schedule the engine can run on the window from above; the proof
is in docs/hyperflexis.md ("Bounds at trace scale").

References
----------
HyperFlexis, Sec. 3 (Eqs. 1-4) and Sec. 6 (start-up delays).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.dispatch_scale import PROBLEM, ScaleWindow
from slolab.sim.metrics import ON_TIME_TOLERANCE_S
from slolab.solvers.backend import Backend
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.registry import register_model

__all__ = ["DispatchBound", "RelaxationBound", "ideal_bound", "relaxation_bound"]

logger = logging.getLogger("slolab")

#: Default number of time buckets of the relaxation.
DEFAULT_BUCKETS = 64


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
        HiGHS's status (``optimal`` or ``time limit``).
    integral : bool
        Whether ``m_r`` were binary.
    buckets, variables, constraints : int
        Size of the LP.
    runtime_s : float
        Wall time of build and solve.
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
    prefill_work = v.prefill_part_s(p)
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


def relaxation_bound(
    instance: Instance,
    *,
    buckets: int = DEFAULT_BUCKETS,
    integral: bool = False,
    time_limit: float = 60.0,
    threads: int = 1,
) -> RelaxationBound:
    """The work-and-availability relaxation of a ``dispatch-scale`` window, solved by HiGHS.

    Parameters
    ----------
    instance : Instance
        A ``dispatch-scale`` window.
    buckets : int
        About this many time buckets (>= 2); more is tighter and larger.
    integral : bool
        Binary ``m_r`` (a MILP whose dual bound is reported) or continuous (the LP).
    time_limit : float
        Seconds for HiGHS; a MILP stopped by it reports its dual bound (still valid).
    threads : int
        HiGHS threads.

    Returns
    -------
    RelaxationBound
        The bound, never above :func:`ideal_bound`; the ideal bound itself, status
        ``time limit``, when the LP does not finish within ``time_limit``.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2:
        raise ValueError(f"buckets must be an integer >= 2, got {buckets!r}")
    start = time.perf_counter()
    data = ScaleWindow.of(instance)
    n, n0, W = data.n, data.initial_servers, data.max_servers
    lam = data.cost_weight
    ideal = ideal_bound(data)
    meets = [r for r in range(n) if data.can_meet(r)]
    if not meets:
        return RelaxationBound(0.0, 0.0, 0.0, 0.0, "optimal", integral, 0, 0, 0, 0.0)
    v = data.view
    overhead = v.any_s + min(v.prefill_s, v.decode_s)
    profiles: list[Any] = [None] * n
    for r in meets:
        profiles[r] = _request_profile(data, r)
    t = _boundaries(data, profiles, buckets)
    B = len(t) - 1
    length = np.diff(t)
    # variables: m (len meets), F[r, b] for b in r's range, X0[b], Xn[b], up[b], O[b]
    cols: list[str] = []
    lo: list[float] = []
    hi: list[float] = []
    cost: list[float] = []
    integrality: list[int] = []

    def var(kind: str, lower: float, upper: float, c: float, integer: int = 0) -> int:
        cols.append(kind)
        lo.append(lower)
        hi.append(upper)
        cost.append(c)
        integrality.append(integer)
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
    m = {r: var("m", 0.0, 1.0, -1.0 / n, 1 if integral else 0) for r in meets}
    X0 = [var("X0", 0.0, float(n0), lam * length[b]) for b in range(B)]
    # a new worker serves from its switch-on plus the start-up delay, at the earliest delta
    Xn = [
        var("Xn", 0.0, float(W) if t[b] >= data.startup_s - 1e-12 else 0.0, lam * length[b])
        for b in range(B)
    ]
    up = [var("up", 0.0, math.inf, lam * data.startup_s) for b in range(B)]
    overhead_s = [var("O", 0.0, math.inf, 0.0) for b in range(B)]
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
    for b in range(B):
        # work + overhead <= available worker-seconds
        row(
            work_in[b] + [(overhead_s[b], 1.0), (X0[b], -length[b]), (Xn[b], -length[b])],
            -math.inf,
            0.0,
        )
        row([(X0[b], 1.0), (Xn[b], 1.0)], -math.inf, float(W))
        if b:
            row([(X0[b], 1.0), (X0[b - 1], -1.0)], -math.inf, 0.0)
        row([(up[b], 1.0), (Xn[b], -1.0)] + ([(Xn[b - 1], 1.0)] if b else []), 0.0, math.inf)
    A = coo_array((vals, (rows, colidx)), shape=(len(rlo), len(cols))).tocsr()
    problem = (
        np.asarray(cost),
        LinearConstraint(A, np.asarray(rlo), np.asarray(rhi)),
        Bounds(np.asarray(lo), np.asarray(hi)),
    )

    def run(kinds: np.ndarray) -> Any:
        remaining = max(time_limit - (time.perf_counter() - start), 0.1)
        return milp(
            problem[0],
            constraints=problem[1],
            bounds=problem[2],
            integrality=kinds,
            options={"time_limit": remaining, "disp": False, "presolve": True},
        )

    # the LP first (its optimum is a bound), then binary m_r within what is left
    res = run(np.zeros(len(cols), dtype=int))
    if res.status != 0:
        # no LP optimum within the limit: the ideal bound is all that is proved
        logger.warning("%s relaxation: %s; reporting the ideal bound", PROBLEM, res.message)
        return RelaxationBound(
            bound=ideal,
            ideal=ideal,
            met=float(len(meets)),
            cost_server_s=0.0,
            status="time limit",
            integral=integral,
            buckets=B,
            variables=len(cols),
            constraints=len(rlo),
            runtime_s=time.perf_counter() - start,
        )
    bound = -float(res.fun)
    status = "optimal"
    if integral and time.perf_counter() - start < time_limit:
        mip = run(np.asarray(integrality))
        dual = getattr(mip, "mip_dual_bound", None)
        if mip.status == 0:
            bound, res = min(bound, -float(mip.fun)), mip
        else:
            status = "time limit"
            if dual is not None and math.isfinite(dual):
                bound = min(bound, -float(dual))
            if mip.x is not None:
                res = mip
    elif integral:
        status = "time limit"
    x = res.x
    met = float(sum(x[m[r]] for r in meets))
    c_on = float(
        sum(length[b] * (x[X0[b]] + x[Xn[b]]) + data.startup_s * x[up[b]] for b in range(B))
    )
    return RelaxationBound(
        bound=min(bound, ideal),
        ideal=ideal,
        met=met,
        cost_server_s=c_on,
        status=status,
        integral=integral,
        buckets=B,
        variables=len(cols),
        constraints=len(rlo),
        runtime_s=time.perf_counter() - start,
    )


@register_model("dispatch-bound")
class DispatchBound(ExactModel):
    """The relaxation of :func:`relaxation_bound` as a bound-only model of ``dispatch-scale``
    (method ``bound``): HiGHS on the bucketed MILP, its dual bound reported.

    Options: ``buckets`` (default :data:`DEFAULT_BUCKETS`), ``integral`` (default False: the LP).
    """

    sense = "max"
    bound_only = True

    def __init__(
        self, instance: Instance, *, buckets: int = DEFAULT_BUCKETS, integral: bool = False
    ) -> None:
        super().__init__(instance)
        self.data = ScaleWindow.of(instance)
        self.buckets = buckets
        self.integral = integral

    def supports(self) -> frozenset[str]:
        """HiGHS only (through SciPy's ``milp``)."""
        return frozenset({"milp"})

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        if backend.name != "highs":
            raise ValueError(f"model 'dispatch-bound' runs on highs only, got {backend.name!r}")
        found = relaxation_bound(
            self.instance,
            buckets=self.buckets,
            integral=self.integral,
            time_limit=time_limit,
            threads=backend.threads,
        )
        return Result(
            status=Status.OPTIMAL if found.status == "optimal" else Status.TIME_LIMIT,
            objective=found.bound if found.status == "optimal" else None,
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
            },
        )

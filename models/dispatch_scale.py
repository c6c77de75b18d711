"""HyperFlexis's joint dispatch and scaling problem, exact (``dispatch-scale``).

A short window of requests reaches a co-located cluster that starts with ``n0`` ready workers
and may switch on more, up to ``W`` workers, at the start of any scaling slot of length
``Delta``. A worker switched on at ``s Delta`` pays from then and serves from
``s Delta + delta`` (its start-up delay); a worker leaves (stops paying) when its last
iteration ends. Requests wait in a central queue until their worker takes them, so a request
may be served by a worker switched on after it arrived (HyperFlexis's dispatcher holds its
global queue the same way). Decide which worker serves each request, which workers are switched on and
when, and every worker's iterations (each request's whole-prompt prefill and its decode
tokens), to trade

- cost: worker-seconds from switch-on to departure (HyperFlexis Eq. 3), against
- satisfaction: requests meeting their TTFT and TPOT (Eq. 4), under the deadline definition
  (token ``k`` by ``arrival + TTFT + (k - 1) TPOT``),

with iteration times from the latency model (Eq. 1 prefill, quadratic in the prompt; Eq. 2
decode step, linear in batch and context). Two objectives:

- :class:`DispatchScale` (``dispatch-scale``): maximize ``A - lambda C``, attainment minus the
  price ``lambda`` (setting ``cost_weight_per_server_s``) of the worker-seconds ``C``;
- :class:`DispatchScaleCost`: minimize ``C`` subject to at least ``m`` requests met (the
  epsilon-constraint method); :func:`pareto_front` solves it for every ``m`` and keeps the
  non-dominated points (the exact Pareto front).

Each has an iteration-indexed MILP (PuLP: HiGHS, CBC), a CP-SAT model and an exhaustive
search (dynamic programming over every worker's iteration sequences with exact dominance). The
solvers' time arithmetic is relaxed by a tolerance (1 us in the MILP; integer nanoseconds,
durations rounded down and deadlines up, in CP-SAT), so their bounds are valid; every
incumbent is then replayed in the engine with its scaling plan and scored by the shared
metrics, and a solve is OPTIMAL only when that replayed value reaches the bound. The math, the
class of schedules the models range over and why it contains every online heuristic's
schedule are in ``docs/hyperflexis.md``.

References
----------
HyperFlexis, Sec. 3 (Eqs. 1-4, the joint decision at every event), Sec. 6 (scaling, start-up
delays) and Table 2 (start-up times by weight source).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Instance, cached_prompt_tokens
from slolab.sim.metrics import ON_TIME_TOLERANCE_S, token_deadline_s
from slolab.sim.scaling import ScaleAction, ScalePlan
from slolab.sim.schedule import PlannedIteration, Schedule
from slolab.solvers.backend import Backend, RawSolve
from slolab.solvers.base import (
    CpFormulation,
    ExactModel,
    FrontPoint,
    MilpFormulation,
    Result,
    Status,
)
from slolab.solvers.registry import register_model
from slolab.timing.base import F_SPEC, TimingModel
from slolab.timing.forms import PhaseAffine, phase_affine

__all__ = [
    "PROBLEM",
    "Composition",
    "DispatchScale",
    "DispatchScaleCost",
    "ScaleDecision",
    "ScaleWindow",
    "pareto_front",
]

logger = logging.getLogger("slolab")

#: ``Instance.problem`` of the windows.
PROBLEM = "dispatch-scale"
#: Seconds by which the MILP relaxes every deadline (covers the solver's feasibility tolerance).
MILP_DEADLINE_SLACK_S = 1e-6
#: CP-SAT works in integer nanoseconds.
NS_PER_S = 1_000_000_000
#: Largest denominator of the CP-SAT price of a worker-second (see ``_CpSat.weighted``).
PRICE_DENOMINATOR = 10**6
#: Relative tolerance within which a replayed incumbent reaches the bound (a proof).
CERTIFY_TOL = 1e-6

#: One iteration: (requests prefilled whole, requests decoding one token), each sorted.
Composition = tuple[tuple[int, ...], tuple[int, ...]]


# -- problem data --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleWindow:
    """A dispatch-scale window: requests, workers, slots, start-up delay, price, latency model.

    Attributes
    ----------
    arrival_s, ttft_s, tpot_s : float arrays (n,)
        Arrivals and SLOs (inf TTFT, 0 TPOT: no constraint).
    prompt, output : int arrays (n,)
        Lengths.
    cached : int array (n,)
        Each request's prompt tokens in the snapshot's given prefix cache (the workload's
        ``cached_tokens``, zeros without it): its prefill computes ``prompt - cached`` tokens,
        their attention over the cached prefix, and holds only those against the KV capacity;
        its decode steps read the whole context (docs/engine.md, "A snapshot's given cache").
    initial_servers : int
        Workers ready at time 0 (``n0``), free until their first use is decided.
    max_servers : int
        Workers in all (``W``): ``W - n0`` may be switched on, each once.
    slot_s, startup_s : float
        Scaling slot ``Delta`` and start-up delay ``delta`` (s).
    cost_weight : float
        ``lambda``, attainment given up per worker-second.
    max_batch_size, max_batch_tokens : int
        Per-iteration caps (0 tokens: none).
    timing : TimingModel
        The instance's latency model; ``view`` its :class:`PhaseAffine` form.
    """

    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    cached: np.ndarray
    initial_servers: int
    max_servers: int
    slot_s: float
    startup_s: float
    cost_weight: float
    max_batch_size: int
    max_batch_tokens: int
    timing: TimingModel
    view: PhaseAffine

    @classmethod
    def of(cls, instance: Instance) -> ScaleWindow:
        """The window of a ``dispatch-scale`` instance (clear errors for anything else)."""
        from slolab.sim.metrics import COST_WEIGHT_KEY, deadline_slos

        if instance.problem != PROBLEM:
            raise ValueError(f"expected a {PROBLEM!r} instance, got {instance.problem!r}")
        cl = instance.cluster
        pools = cl.resolved_pools()
        if cl.mode != "colocated" or len(pools) != 1:
            raise ValueError(f"{PROBLEM} needs a co-located cluster of one pool")
        wl = instance.workload
        if "running" in wl and np.asarray(wl["running"], dtype=bool).any():
            raise ValueError(f"{PROBLEM} starts from empty workers (no running rows)")
        definition = str(instance.settings.get("definition", "deadline"))
        if definition != "deadline":
            raise ValueError(
                f"{PROBLEM} models the deadline definition of attainment, got {definition!r}"
            )
        view = phase_affine(instance.timing)
        if view is None:
            raise ValueError(
                f"{PROBLEM} needs a latency model affine once the phases are known (linear, or "
                f"a phase sum of linear parts), got {getattr(instance.timing, 'name', '?')!r}"
            )
        prompt = wl.prompt_tokens.astype(np.int64)
        output = wl.output_tokens.astype(np.int64)
        cached = cached_prompt_tokens(wl)
        if view.any_s < 0 or view.prefill_s < 0 or view.decode_s < 0 or (view.coef < 0).any():
            raise ValueError(f"{PROBLEM} needs a latency model with non-negative terms")
        if view.coef[F_SPEC] != 0:
            raise ValueError(f"{PROBLEM} models no speculative decoding")
        pool = pools[0]
        kv = int(pool.kv_capacity_tokens)  # type: ignore[arg-type]
        need = int((prompt + output - cached).sum())
        if kv < need:
            raise ValueError(
                f"{PROBLEM} assumes memory never binds: KV capacity {kv} < {need} tokens of the "
                "whole window"
            )
        cap = int(pool.max_batch_tokens)  # type: ignore[arg-type]
        computed = prompt - cached
        if cap and int(computed.max()) + 1 > cap:
            raise ValueError(
                f"{PROBLEM} prefills whole prompts: max_batch_tokens {cap} is below the longest "
                f"prompt {int(computed.max())} + 1 (its uncached tokens)"
            )
        settings = instance.settings
        max_servers = int(settings.get("max_servers", cl.servers))
        if max_servers < cl.servers:
            raise ValueError(f"max_servers {max_servers} is below the initial {cl.servers}")
        slot_s = float(settings.get("slot_s", 1.0))
        if not (math.isfinite(slot_s) and slot_s > 0):
            raise ValueError(f"slot_s must be a finite number > 0, got {slot_s}")
        weight = float(settings.get(COST_WEIGHT_KEY, 0.0))
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"{COST_WEIGHT_KEY} must be a finite number >= 0, got {weight}")
        ttft, tpot = deadline_slos(wl)
        return cls(
            arrival_s=np.asarray(wl.arrival_s, dtype=float),
            ttft_s=np.asarray(ttft, dtype=float),
            tpot_s=np.asarray(tpot, dtype=float),
            prompt=prompt,
            output=output,
            cached=cached,
            initial_servers=int(cl.servers),
            max_servers=max_servers,
            slot_s=slot_s,
            startup_s=float(pool.startup_s),  # type: ignore[arg-type]
            cost_weight=weight,
            max_batch_size=int(pool.max_batch_size),  # type: ignore[arg-type]
            max_batch_tokens=cap,
            timing=instance.timing,
            view=view,
        )

    @property
    def n(self) -> int:
        return len(self.prompt)

    def prefill_tokens(self, r: int) -> int:
        """Prompt tokens request ``r``'s prefill computes: those outside the given cache."""
        return int(self.prompt[r] - self.cached[r])

    def prefill_part_s(self, r: int) -> float:
        """Coefficient terms of request ``r``'s whole-prompt prefill (no intercept): its
        uncached tokens, their attention over its cached prefix."""
        return self.view.prefill_part_s(int(self.prompt[r]), int(self.cached[r]))

    @property
    def new_servers(self) -> int:
        return self.max_servers - self.initial_servers

    @property
    def iterations(self) -> int:
        """Iterations a worker may run: every token of the window (whole-prompt prefills emit
        one token each, decodes one), so no schedule of the class needs more."""
        return int(self.output.sum())

    def slot_time_s(self, s: int) -> float:
        """Start of scaling slot ``s`` (s)."""
        return s * self.slot_s

    @property
    def slots(self) -> int:
        """Slots at which a worker may be switched on: up to the last arrival plus the window's
        work done one request at a time (a request that arrives before its worker is switched
        on waits in the central queue)."""
        work = self.horizon_s() - float(self.arrival_s.max()) - self.startup_s
        return int(math.floor((float(self.arrival_s.max()) + work) / self.slot_s)) + 1

    def deadline_s(self, r: int, token: int) -> float:
        """Deadline of token ``token`` (1-based) of request ``r`` (the metrics' formula)."""
        return float(
            token_deadline_s(
                float(self.arrival_s[r]), float(self.ttft_s[r]), float(self.tpot_s[r]), token
            )
        )

    def iteration_s(self, prefill: Sequence[int], decode: Sequence[tuple[int, int]]) -> float:
        """Time of an iteration prefilling ``prefill`` whole and decoding ``(request, context)``
        pairs (context: KV tokens the request holds)."""
        v = self.view
        t = v.any_s
        if prefill:
            t += v.prefill_s + sum(self.prefill_part_s(r) for r in prefill)
        if decode:
            t += v.decode_s + len(decode) * v.decode_token_s + v.kv_s * sum(c for _, c in decode)
        return t

    def alone_s(self, r: int) -> float:
        """The least time from request ``r``'s first iteration start to its last token: its
        prefill, then its decodes, each in an iteration of its own."""
        p, o = int(self.prompt[r]), int(self.output[r])
        t = self.iteration_s((r,), ())
        for g in range(1, o):
            t += self.iteration_s((), ((r, p + g),))
        return t

    def can_meet(self, r: int) -> bool:
        """False when request ``r`` misses its SLO even alone on a worker ready at once."""
        p, o = int(self.prompt[r]), int(self.output[r])
        end = float(self.arrival_s[r]) + self.iteration_s((r,), ())
        if end > self.deadline_s(r, 1) + ON_TIME_TOLERANCE_S:
            return False
        for g in range(1, o):
            end += self.iteration_s((), ((r, p + g),))
            if end > self.deadline_s(r, g + 1) + ON_TIME_TOLERANCE_S:
                return False
        return True

    def horizon_s(self) -> float:
        """An end every earliest-start schedule's iterations finish by: the last arrival, the
        start-up delay, then every request's tokens one iteration each."""
        v = self.view
        work = 0.0
        for r in range(self.n):
            p, o = int(self.prompt[r]), int(self.output[r])
            work += v.any_s + v.prefill_s + self.prefill_part_s(r)
            work += (o - 1) * (v.any_s + v.decode_s + v.decode_token_s + v.kv_s * (p + o))
        return float(self.arrival_s.max()) + self.startup_s + work + 1e-3


# -- decisions and schedules ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """What a method decided on a window.

    ``routing[r]`` is the worker of request ``r`` (model index: ``0 .. n0 - 1`` the initial
    workers, then the ones that may be switched on); ``on_slot[w]`` the slot a new worker is
    switched on at (None: not switched on; None for initial workers); ``iterations[w]`` the
    worker's compositions in order.
    """

    routing: tuple[int, ...]
    on_slot: tuple[int | None, ...]
    iterations: tuple[tuple[Composition, ...], ...]


def iteration_ends(data: ScaleWindow, comps: Sequence[Composition], ready_s: float) -> list[float]:
    """End of each iteration, every one started as early as the engine starts it."""
    generated: dict[int, int] = {}
    end = ready_s
    ends = []
    for prefill, decode in comps:
        start = max([end] + [float(data.arrival_s[r]) for r in prefill])
        ctx = [(r, int(data.prompt[r]) + generated[r]) for r in decode]
        end = start + data.iteration_s(prefill, ctx)
        for r in decode:
            generated[r] += 1
        for r in prefill:
            generated[r] = 1
        ends.append(end)
    return ends


def worker_score(
    data: ScaleWindow, comps: Sequence[Composition], ready_s: float
) -> tuple[int, float, frozenset[int]]:
    """``(requests met, end of the last iteration, requests served and not met)`` of a
    worker's iterations from ``ready_s``."""
    if not comps:
        return 0, ready_s, frozenset()
    ends = iteration_ends(data, comps, ready_s)
    emitted: dict[int, int] = {}
    late: set[int] = set()
    for (prefill, decode), end in zip(comps, ends, strict=True):
        for r in (*prefill, *decode):
            token = emitted.get(r, 0) + 1
            emitted[r] = token
            if end > data.deadline_s(r, token) + ON_TIME_TOLERANCE_S:
                late.add(r)
    missed = frozenset(r for r, k in emitted.items() if k < int(data.output[r]) or r in late)
    return len(emitted) - len(missed), ends[-1], missed


def iteration_starts(
    data: ScaleWindow,
    comps: Sequence[Composition],
    ready_s: float,
    ends: Sequence[float] | None = None,
) -> list[float]:
    """Start of each iteration, every one as early as the engine starts it (the latest of the
    previous end and its prompts' arrivals); ``ends``: :func:`iteration_ends` of the same, when the
    caller has it."""
    if ends is None:
        ends = iteration_ends(data, comps, ready_s)
    return [
        max([ends[k - 1] if k else ready_s] + [float(data.arrival_s[r]) for r in prefill])
        for k, (prefill, _) in enumerate(comps)
    ]


def decision_schedule(data: ScaleWindow, decision: ScaleDecision) -> Schedule:
    """The replayable :class:`Schedule` (with its :class:`ScalePlan`) of a decision.

    Engine ids: the initial workers keep theirs; workers switched on take the next ids in the
    order of their switch-on (ties by model index), as the engine gives them. The plan switches
    them on at their slots, drains an unused initial worker at 0 and every used worker in the
    middle of its last iteration (after every arrival routed to it, before it ends), so each
    leaves exactly when its last iteration ends.
    """
    n0 = data.initial_servers
    on_slot = {
        w: slot for w in range(n0, data.max_servers) if (slot := data_on(decision, w)) is not None
    }
    new = sorted(on_slot, key=lambda w: (on_slot[w], w))
    engine_id = {w: w for w in range(n0)}
    for k, w in enumerate(new):
        engine_id[w] = n0 + k
    actions: list[tuple[float, ScaleAction]] = [
        (data.slot_time_s(on_slot[w]), ScaleAction.on("main")) for w in new
    ]
    per_server: list[tuple[PlannedIteration, ...]] = [() for _ in range(n0 + len(new))]
    for w, eid in engine_id.items():
        comps = decision.iterations[w]
        on = 0.0 if w < n0 else data.slot_time_s(on_slot[w])
        if not comps:
            actions.append((on, ScaleAction.drain(eid)))
            continue
        ready = on if w < n0 else on + data.startup_s
        ends = iteration_ends(data, comps, ready)
        last_start = max(
            [ends[-2] if len(ends) > 1 else ready]
            + [float(data.arrival_s[r]) for r in comps[-1][0]]
        )
        actions.append(((last_start + ends[-1]) / 2.0, ScaleAction.drain(eid)))
        per_server[eid] = tuple(
            PlannedIteration(
                tuple((r, "prefill", data.prefill_tokens(r)) for r in prefill)
                + tuple((r, "decode", 1) for r in decode)
            )
            for prefill, decode in comps
        )
    return Schedule(tuple(per_server), plan=ScalePlan.of(actions))


def data_on(decision: ScaleDecision, w: int) -> int | None:
    """Slot worker ``w`` is switched on at (None: initial or unused)."""
    return decision.on_slot[w] if w < len(decision.on_slot) else None


def _check_decision(data: ScaleWindow, decision: ScaleDecision) -> None:
    """Raise ValueError when a decision leaves the class (a solver read-out bug)."""
    for r, w in enumerate(decision.routing):
        if not 0 <= w < data.max_servers:
            raise ValueError(f"request {r} routed to worker {w} of {data.max_servers}")
        if w >= data.initial_servers and data_on(decision, w) is None:
            raise ValueError(f"request {r} routed to worker {w}, which is never switched on")


# -- the models ----------------------------------------------------------------------------------


@register_model(PROBLEM)
class DispatchScale(ExactModel):
    """dispatch-scale: maximize attainment minus the price of the worker-seconds.

    ``J = (1 / n) sum_r m_r - lambda sum_w C_w`` over the class of schedules described in the
    module docstring; see :meth:`milp` for the formulation.
    """

    sense = "max"

    def __init__(self, instance: Instance) -> None:
        super().__init__(instance)
        self.data = ScaleWindow.of(instance)

    # -- evaluation (the engine and the shared metrics) ----------------------------------------
    def evaluate(self, schedule: Schedule) -> float:
        """The objective of ``schedule`` replayed with its plan."""
        from slolab.sim import metrics, replay

        out = replay(self.instance, schedule)
        table = metrics.request_table(self.instance, out)
        return metrics.attainment_minus_cost_objective(self.instance, out, table)

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        return _certified(self, backend.solve_model(self, time_limit), self.evaluate)

    # -- MILP ---------------------------------------------------------------------------------
    def milp(self) -> MilpFormulation:
        """Iteration-indexed MILP (families in :class:`_Milp`).

        ``max (1/n) sum_r m_r - lambda sum_w C_w`` subject to routing, switch-on, service,
        iteration-time, deadline and cost constraints.
        """
        form = _Milp(self.data)
        form.objective_weighted()
        return form.formulation()

    def cpsat(self) -> CpFormulation:
        """The same model in CP-SAT (integer nanoseconds, conditional constraints)."""
        form = _CpSat(self.data)
        return form.weighted()

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Every routing, switch-on slot and iteration sequence (see :class:`_Exhaustive`)."""
        search = _Exhaustive(self.data, time.perf_counter() + time_limit)
        value, decision = search.weighted()
        return value, decision_schedule(self.data, decision)


class DispatchScaleCost(DispatchScale):
    """The epsilon-constraint problem: least worker-seconds with at least ``min_met`` requests
    meeting their SLO (one point of the Pareto front)."""

    sense = "min"

    def __init__(self, instance: Instance, min_met: int = 0) -> None:
        super().__init__(instance)
        if isinstance(min_met, bool) or not 0 <= int(min_met) <= self.data.n:
            raise ValueError(f"min_met must be an integer in [0, {self.data.n}], got {min_met!r}")
        self.min_met = int(min_met)

    def evaluate(self, schedule: Schedule) -> float:
        """Worker-seconds of ``schedule`` replayed with its plan (NaN below ``min_met``)."""
        from slolab.sim import metrics, replay

        out = replay(self.instance, schedule)
        met = int(metrics.met(self.instance, out, "deadline").sum())
        if met < self.min_met:
            return math.nan
        return metrics.server_seconds(self.instance, out)

    def milp(self) -> MilpFormulation:
        """The MILP of :class:`DispatchScale` with ``sum_r m_r >= min_met``, minimizing ``sum C``."""
        form = _Milp(self.data)
        form.objective_cost(self.min_met)
        return form.formulation()

    def cpsat(self) -> CpFormulation:
        return _CpSat(self.data).cost(self.min_met)

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        search = _Exhaustive(self.data, time.perf_counter() + time_limit)
        found = search.least_cost(self.min_met)
        if found is None:
            return None
        cost, decision = found
        return cost, decision_schedule(self.data, decision)


def _certified(model: DispatchScale, raw: RawSolve, evaluate: Any) -> Result:
    """The Result of a relaxed solve: objective = the incumbent's replayed value; OPTIMAL only
    when it reaches the bound (up to :data:`CERTIFY_TOL`)."""
    if raw.schedule is None:
        return raw.to_result(model)
    value = float(evaluate(raw.schedule))
    status = raw.status
    bound = raw.bound
    sense = model.sense
    if math.isnan(value):
        logger.info("%s: the incumbent misses its attainment level once replayed", model.name)
        return Result(
            status=Status.UNKNOWN,
            objective=None,
            bound=bound,
            runtime_s=raw.runtime_s,
            backend=raw.backend,
            model=model.name or type(model).__name__,
            sense=sense,
            schedule=None,
            log=raw.log,
            details={**raw.details, "relaxed_objective": raw.objective},
        )
    if status == Status.OPTIMAL:
        relaxed = float(raw.objective) if raw.objective is not None else value
        if sense == "max":
            bound = relaxed if bound is None else min(float(bound), relaxed)
            reached = value >= bound - CERTIFY_TOL * max(1.0, abs(bound))
        else:
            bound = relaxed if bound is None else max(float(bound), relaxed)
            reached = value <= bound + CERTIFY_TOL * max(1.0, abs(bound))
        if not reached:
            logger.info(
                "%s: the relaxed optimum %.9g is not reached by its replay (%.9g): FEASIBLE",
                model.name,
                bound,
                value,
            )
            status = Status.FEASIBLE
    if bound is not None:
        bound = max(float(bound), value) if sense == "max" else min(float(bound), value)
    return Result(
        status=status,
        objective=value,
        bound=bound,
        runtime_s=raw.runtime_s,
        backend=raw.backend,
        model=model.name or type(model).__name__,
        sense=sense,
        schedule=raw.schedule,
        log=raw.log,
        details={**raw.details, "relaxed_objective": raw.objective},
    )


# -- MILP ----------------------------------------------------------------------------------------


class _Milp:
    """Variables and constraint families of the iteration-indexed MILP (docs/hyperflexis.md).

    Indices: requests ``r``, workers ``w`` (``w < n0`` initial), iterations ``k`` of a worker,
    scaling slots ``s``. Variables: ``y_rw`` routing, ``u_w`` worker used, ``o_ws`` switched on
    at slot ``s`` (new workers), ``v_rwk`` / ``x_rwk`` prefill / decode of ``r`` in iteration
    ``k`` of ``w``, ``z_wk`` iteration used, ``hp_wk`` / ``hd_wk`` iteration has a prefill /
    decode, ``q_rwk`` KV tokens read, ``S_wk`` / ``E_wk`` start and end, ``m_r`` met, ``C_w``
    worker-seconds.
    """

    def __init__(self, data: ScaleWindow) -> None:
        import pulp

        self.pulp = pulp
        self.d = data
        d = data
        self.R = range(d.n)
        self.Wr = range(d.max_servers)
        self.K = range(d.iterations)
        self.Sl = range(d.slots)
        self.H = d.horizon_s()
        self.prob = pulp.LpProblem("dispatch_scale", pulp.LpMaximize)
        V = self.prob.add_variable
        R, Wr, K = self.R, self.Wr, self.K
        n0 = d.initial_servers
        self.y = {(r, w): V(f"y_{r}_{w}", cat="Binary") for r in R for w in Wr}
        self.u = {w: V(f"u_{w}", cat="Binary") for w in Wr}
        self.o = {(w, s): V(f"o_{w}_{s}", cat="Binary") for w in Wr[n0:] for s in self.Sl}
        self.v = {(r, w, k): V(f"v_{r}_{w}_{k}", cat="Binary") for r in R for w in Wr for k in K}
        self.x = {(r, w, k): V(f"x_{r}_{w}_{k}", cat="Binary") for r in R for w in Wr for k in K}
        self.z = {(w, k): V(f"z_{w}_{k}", cat="Binary") for w in Wr for k in K}
        self.hp = {(w, k): V(f"hp_{w}_{k}", cat="Binary") for w in Wr for k in K}
        self.hd = {(w, k): V(f"hd_{w}_{k}", cat="Binary") for w in Wr for k in K}
        self.q = {
            (r, w, k): V(f"q_{r}_{w}_{k}", 0, int(d.prompt[r] + d.output[r]))
            for r in R
            for w in Wr
            for k in K
        }
        self.S = {(w, k): V(f"S_{w}_{k}", 0, self.H) for w in Wr for k in K}
        self.E = {(w, k): V(f"E_{w}_{k}", 0, self.H) for w in Wr for k in K}
        self.m = {r: V(f"m_{r}", cat="Binary") for r in R}
        self.C = {w: V(f"C_{w}", 0, self.H) for w in Wr}
        self.routing()
        self.switch_on()
        self.service()
        self.iterations()
        self.times()
        self.deadlines()
        self.cost()

    def on_s(self, w: int) -> Any:
        """Switch-on time of worker ``w``: ``sum_s s Delta o_ws`` (0 for initial workers)."""
        if w < self.d.initial_servers:
            return 0
        return self.pulp.lpSum(self.d.slot_time_s(s) * self.o[w, s] for s in self.Sl)

    def routing(self) -> None:
        """``sum_w y_rw = 1``; ``y_rw <= u_w <= sum_r y_rw``; identical initial workers in order:
        ``y_rw <= sum_{r' < r} y_r'(w-1)`` for ``1 <= w < n0``."""
        d, prob, y, u = self.d, self.prob, self.y, self.u
        for r in self.R:
            prob += self.pulp.lpSum(y[r, w] for w in self.Wr) == 1, f"routed_{r}"
        for w in self.Wr:
            prob += u[w] <= self.pulp.lpSum(y[r, w] for r in self.R), f"used_{w}"
            for r in self.R:
                prob += y[r, w] <= u[w], f"route_used_{r}_{w}"
        for w in range(1, d.initial_servers):
            for r in self.R:
                earlier = self.pulp.lpSum(y[j, w - 1] for j in range(r))
                prob += y[r, w] <= earlier, f"initial_order_{r}_{w}"

    def switch_on(self) -> None:
        """New workers: ``sum_s o_ws = u_w`` (a request that arrives before its worker is on
        waits in the central queue); used first and switched on in order: ``u_w >= u_(w+1)``,
        ``on_w <= on_(w+1) + H (1 - u_(w+1))``."""
        d, prob = self.d, self.prob
        news = list(self.Wr[d.initial_servers :])
        for w in news:
            prob += self.pulp.lpSum(self.o[w, s] for s in self.Sl) == self.u[w], f"on_once_{w}"
        for w, nxt in itertools.pairwise(news):
            prob += self.u[w] >= self.u[nxt], f"new_used_first_{w}"
            prob += (
                self.on_s(w) <= self.on_s(nxt) + self.H * (1 - self.u[nxt]),
                f"new_on_order_{w}",
            )

    def service(self) -> None:
        """Whole-prompt prefill once on its worker, then ``o_r - 1`` decodes:
        ``sum_k v_rwk = y_rw``, ``sum_k x_rwk = (o_r - 1) y_rw``, ``x_rwk <= sum_{j<k} v_rwj``."""
        d, prob, v, x, y = self.d, self.prob, self.v, self.x, self.y
        lp = self.pulp.lpSum
        for r in self.R:
            o = int(d.output[r])
            for w in self.Wr:
                prob += lp(v[r, w, k] for k in self.K) == y[r, w], f"prefill_once_{r}_{w}"
                prob += lp(x[r, w, k] for k in self.K) == (o - 1) * y[r, w], f"decodes_{r}_{w}"
                for k in self.K:
                    before = lp(v[r, w, j] for j in range(k))
                    prob += x[r, w, k] <= before, f"decode_after_prefill_{r}_{w}_{k}"

    def iterations(self) -> None:
        """``v, x <= z_wk <= sum_r (v + x)``, used first ``z_w(k+1) <= z_wk``; phases
        ``hp_wk >= v_rwk``, ``hd_wk >= x_rwk``; caps ``sum_r (v + x) <= B``,
        ``sum_r p_r v + x <= cap``. Valid cuts on a worker's iteration count (each emits a
        token; a request needs ``o_r`` of them): ``o_r y_rw <= sum_k z_wk <= sum_r o_r y_rw``."""
        d, prob, v, x, z = self.d, self.prob, self.v, self.x, self.z
        lp = self.pulp.lpSum
        for w in self.Wr:
            count = lp(z[w, k] for k in self.K)
            prob += count <= lp(int(d.output[r]) * self.y[r, w] for r in self.R), f"its_{w}"
            for r in self.R:
                prob += count >= int(d.output[r]) * self.y[r, w], f"its_of_{r}_{w}"
            for k in self.K:
                entries = lp(v[r, w, k] + x[r, w, k] for r in self.R)
                prob += z[w, k] <= entries, f"nonempty_{w}_{k}"
                prob += entries <= d.max_batch_size * z[w, k], f"batch_size_{w}_{k}"
                if d.max_batch_tokens:
                    tokens = lp(d.prefill_tokens(r) * v[r, w, k] + x[r, w, k] for r in self.R)
                    prob += tokens <= d.max_batch_tokens, f"batch_tokens_{w}_{k}"
                if k + 1 < len(self.K):
                    prob += z[w, k + 1] <= z[w, k], f"used_first_{w}_{k}"
                for r in self.R:
                    prob += self.hp[w, k] >= v[r, w, k], f"has_prefill_{r}_{w}_{k}"
                    prob += self.hd[w, k] >= x[r, w, k], f"has_decode_{r}_{w}_{k}"

    def times(self) -> None:
        """``S_w0 >= ready_w`` (``on_w + delta`` for a new worker), ``S_wk >= E_w(k-1)``,
        ``S_wk >= a_r v_rwk``, ``E_wk = S_wk + tau_wk`` with ``tau_wk = b z + b_p hp + b_d hd +
        sum_r (P_r v_rwk + D x_rwk + kv q_rwk)`` and ``q_rwk >= p_r + 1 + sum_{j<k} x_rwj -
        (p_r + o_r)(1 - x_rwk)`` (the KV a decode reads)."""
        d, prob = self.d, self.prob
        lp = self.pulp.lpSum
        view = d.view
        for w in self.Wr:
            if w >= d.initial_servers:
                ready = lp((d.slot_time_s(s) + d.startup_s) * self.o[w, s] for s in self.Sl)
                prob += self.S[w, 0] >= ready, f"ready_{w}"
            for k in self.K:
                if k:
                    prob += self.S[w, k] >= self.E[w, k - 1], f"after_{w}_{k}"
                tau = view.any_s * self.z[w, k]
                if view.prefill_s:
                    tau += view.prefill_s * self.hp[w, k]
                if view.decode_s:
                    tau += view.decode_s * self.hd[w, k]
                tau += lp(
                    d.prefill_part_s(r) * self.v[r, w, k]
                    + view.decode_token_s * self.x[r, w, k]
                    + view.kv_s * self.q[r, w, k]
                    for r in self.R
                )
                prob += self.E[w, k] == self.S[w, k] + tau, f"duration_{w}_{k}"
                for r in self.R:
                    a = float(d.arrival_s[r])
                    prob += self.S[w, k] >= a * self.v[r, w, k], f"arrived_{r}_{w}_{k}"
                    p, o = int(d.prompt[r]), int(d.output[r])
                    before = lp(self.x[r, w, j] for j in range(k))
                    prob += (
                        self.q[r, w, k] >= p + 1 + before - (p + o) * (1 - self.x[r, w, k]),
                        f"context_{r}_{w}_{k}",
                    )

    def deadlines(self) -> None:
        """A met request's first token by ``d_r1`` and its decode token ``1 + D`` by
        ``d_r1 + TPOT_r D`` (``D = sum_{j<=k} x_rwj``): ``E_wk <= d + slack + H (2 - v_rwk -
        m_r)`` and ``E_wk <= d_r1 + TPOT_r D + slack + H (2 - x_rwk - m_r)``."""
        d, prob = self.d, self.prob
        lp = self.pulp.lpSum
        H = self.H
        for r in self.R:
            if not d.can_meet(r):
                prob += self.m[r] == 0, f"hopeless_{r}"
                continue
            d1 = float(d.arrival_s[r] + d.ttft_s[r])
            if not math.isfinite(d1):
                continue
            tpot = float(d.tpot_s[r])
            for w in self.Wr:
                for k in self.K:
                    E, v, x, m = self.E[w, k], self.v[r, w, k], self.x[r, w, k], self.m[r]
                    slack = d1 + MILP_DEADLINE_SLACK_S
                    prob += E <= slack + H * (2 - v - m), f"first_on_time_{r}_{w}_{k}"
                    done = lp(self.x[r, w, j] for j in range(k + 1))
                    prob += (
                        E <= slack + tpot * done + H * (2 - x - m),
                        f"decode_on_time_{r}_{w}_{k}",
                    )

    def cost(self) -> None:
        """``C_w >= E_wk - on_w - H (1 - z_wk)``: a worker pays from switch-on to its last
        iteration's end. Valid cuts: a worker pays at least its start-up and its busy time,
        ``C_w >= delta u_w + sum_k tau_wk``, and at least until a request it serves could
        finish alone, ``C_w >= (a_r + L_r) y_rw - on_w`` (``L_r``: :meth:`ScaleWindow.alone_s`).
        """
        d, prob, lp = self.d, self.prob, self.pulp.lpSum
        for w in self.Wr:
            for k in self.K:
                prob += (
                    self.C[w] >= self.E[w, k] - self.on_s(w) - self.H * (1 - self.z[w, k]),
                    f"cost_{w}_{k}",
                )
            delta = d.startup_s * self.u[w] if w >= d.initial_servers else 0
            busy = lp(self.E[w, k] - self.S[w, k] for k in self.K)
            prob += self.C[w] >= delta + busy, f"cost_busy_{w}"
            for r in self.R:
                alone = float(d.arrival_s[r]) + d.alone_s(r)
                prob += self.C[w] >= alone * self.y[r, w] - self.on_s(w), f"cost_alone_{r}_{w}"

    def objective_weighted(self) -> None:
        """``max (1/n) sum_r m_r - lambda sum_w C_w``."""
        d = self.d
        lp = self.pulp.lpSum
        self.prob.sense = self.pulp.LpMaximize
        self.prob += lp(self.m[r] for r in self.R) * (1.0 / d.n) - d.cost_weight * lp(
            self.C[w] for w in self.Wr
        )

    def objective_cost(self, min_met: int) -> None:
        """``min sum_w C_w`` subject to ``sum_r m_r >= min_met``."""
        lp = self.pulp.lpSum
        self.prob.sense = self.pulp.LpMinimize
        self.prob += lp(self.m[r] for r in self.R) >= min_met, "attainment_level"
        self.prob += lp(self.C[w] for w in self.Wr)

    def decision(self) -> ScaleDecision:
        """The decision of the solution the variables hold."""
        d = self.d

        def on(var: Any) -> bool:
            return (var.value() or 0) > 0.5

        routing = tuple(next(w for w in self.Wr if on(self.y[r, w])) for r in self.R)
        slots: list[int | None] = [None] * d.max_servers
        for w in self.Wr[d.initial_servers :]:
            for s in self.Sl:
                if on(self.o[w, s]):
                    slots[w] = s
        its = []
        for w in self.Wr:
            comps = []
            for k in self.K:
                prefill = tuple(r for r in self.R if on(self.v[r, w, k]))
                decode = tuple(r for r in self.R if on(self.x[r, w, k]))
                if prefill or decode:
                    comps.append((prefill, decode))
            its.append(tuple(comps))
        decision = ScaleDecision(routing, tuple(slots), tuple(its))
        _check_decision(d, decision)
        return decision

    def formulation(self) -> MilpFormulation:
        return MilpFormulation(
            self.prob, to_schedule=lambda: decision_schedule(self.d, self.decision())
        )


# -- CP-SAT --------------------------------------------------------------------------------------


class _CpSat:
    """The MILP's model in CP-SAT, in integer nanoseconds: durations and switch-on times rounded
    down (starts, arrivals) or up (switch-on times in the cost), deadlines rounded up, so every
    schedule of the class is feasible with at least its value (a relaxation certified by
    replay)."""

    def __init__(self, data: ScaleWindow) -> None:
        from ortools.sat.python import cp_model

        d = data
        self.d = d
        m = cp_model.CpModel()
        self.m = m
        R, Wr, K, Sl = range(d.n), range(d.max_servers), range(d.iterations), range(d.slots)
        self.R, self.Wr, self.K, self.Sl = R, Wr, K, Sl
        n0 = d.initial_servers
        ns = NS_PER_S
        H = math.ceil(d.horizon_s() * ns)
        self.H = H
        view = d.view
        y = {(r, w): m.new_bool_var(f"y_{r}_{w}") for r in R for w in Wr}
        u = {w: m.new_bool_var(f"u_{w}") for w in Wr}
        o = {(w, s): m.new_bool_var(f"o_{w}_{s}") for w in Wr[n0:] for s in Sl}
        v = {(r, w, k): m.new_bool_var(f"v_{r}_{w}_{k}") for r in R for w in Wr for k in K}
        x = {(r, w, k): m.new_bool_var(f"x_{r}_{w}_{k}") for r in R for w in Wr for k in K}
        z = {(w, k): m.new_bool_var(f"z_{w}_{k}") for w in Wr for k in K}
        S = {(w, k): m.new_int_var(0, H, f"S_{w}_{k}") for w in Wr for k in K}
        E = {(w, k): m.new_int_var(0, H, f"E_{w}_{k}") for w in Wr for k in K}
        met = {r: m.new_bool_var(f"m_{r}") for r in R}
        C = {w: m.new_int_var(0, H, f"C_{w}") for w in Wr}
        self.y, self.o, self.v, self.x, self.met, self.C = y, o, v, x, met, C
        # routing and identical initial workers in order
        for r in R:
            m.add_exactly_one(y[r, w] for w in Wr)
        for w in Wr:
            m.add(u[w] <= sum(y[r, w] for r in R))
            for r in R:
                m.add_implication(y[r, w], u[w])
        for w in range(1, n0):
            for r in R:
                m.add(y[r, w] <= sum(y[j, w - 1] for j in range(r)))
        # switch-on: once, by every routed arrival, new workers used first and in order
        on_floor: dict[int, Any] = {}
        on_ceil: dict[int, Any] = {}
        for w in Wr[n0:]:
            m.add(sum(o[w, s] for s in Sl) == u[w])
            on_floor[w] = sum(math.floor(d.slot_time_s(s) * ns) * o[w, s] for s in Sl)
            on_ceil[w] = sum(math.ceil(d.slot_time_s(s) * ns) * o[w, s] for s in Sl)
        for w, nxt in itertools.pairwise(list(Wr[n0:])):
            m.add(u[w] >= u[nxt])
            m.add(on_floor[w] <= on_floor[nxt]).only_enforce_if(u[nxt])
        # service and iterations
        b_any = math.floor(view.any_s * ns)
        b_p = math.floor(view.prefill_s * ns)
        b_d = math.floor(view.decode_s * ns)
        part = {r: math.floor(d.prefill_part_s(r) * ns) for r in R}
        dec = math.floor(view.decode_token_s * ns)
        kv = math.floor(view.kv_s * ns)
        delta = math.floor(d.startup_s * ns)
        for r in R:
            o_r = int(d.output[r])
            for w in Wr:
                m.add(sum(v[r, w, k] for k in K) == y[r, w])
                m.add(sum(x[r, w, k] for k in K) == (o_r - 1) * y[r, w])
                for k in K:
                    if k == 0:
                        m.add(x[r, w, k] == 0)
                    else:
                        m.add(x[r, w, k] <= sum(v[r, w, j] for j in range(k)))
        for w in Wr:
            ready: Any = 0
            if w >= n0:
                ready = sum((math.floor(d.slot_time_s(s) * ns) + delta) * o[w, s] for s in Sl)
            for k in K:
                entries = [v[r, w, k] for r in R] + [x[r, w, k] for r in R]
                m.add(sum(entries) >= 1).only_enforce_if(z[w, k])
                m.add(sum(entries) == 0).only_enforce_if(z[w, k].negated())
                m.add(sum(entries) <= d.max_batch_size)
                if d.max_batch_tokens:
                    m.add(
                        sum(d.prefill_tokens(r) * v[r, w, k] + x[r, w, k] for r in R)
                        <= d.max_batch_tokens
                    )
                if k + 1 < len(K):
                    m.add_implication(z[w, k + 1], z[w, k])
                hp = m.new_bool_var(f"hp_{w}_{k}")
                hd = m.new_bool_var(f"hd_{w}_{k}")
                m.add_max_equality(hp, [v[r, w, k] for r in R])
                m.add_max_equality(hd, [x[r, w, k] for r in R])
                # every iteration starts as early as the engine starts it (an optimal schedule of
                # the class does, see _Exhaustive): the latest of the previous end, the ready
                # time and the arrivals of the requests it prefills
                earliest = [E[w, k - 1] if k else ready]
                earliest += [math.floor(float(d.arrival_s[r]) * ns) * v[r, w, k] for r in R]
                m.add_max_equality(S[w, k], earliest)
                reads = []
                for r in R:
                    p, o_r = int(d.prompt[r]), int(d.output[r])
                    read = m.new_int_var(0, kv * (p + o_r), f"q_{r}_{w}_{k}")
                    before = sum(x[r, w, j] for j in range(k))
                    m.add(read == kv * (p + 1 + before)).only_enforce_if(x[r, w, k])
                    m.add(read == 0).only_enforce_if(x[r, w, k].negated())
                    reads.append(read)
                m.add(
                    E[w, k]
                    == S[w, k]
                    + b_any * z[w, k]
                    + b_p * hp
                    + b_d * hd
                    + sum(part[r] * v[r, w, k] + dec * x[r, w, k] for r in R)
                    + sum(reads)
                )
                # deadlines of a met request
                for r in R:
                    d1 = float(d.arrival_s[r] + d.ttft_s[r])
                    if not math.isfinite(d1) or not d.can_meet(r):
                        continue
                    d1_ns = math.ceil((d1 + ON_TIME_TOLERANCE_S) * ns)
                    tpot_ns = math.ceil(float(d.tpot_s[r]) * ns)
                    # one enforcement literal per constraint: a met request's token in this
                    # iteration (CP-SAT 9.15 wrongly proved some models infeasible with the
                    # two-literal enforcement [v or x, met])
                    first = m.new_bool_var(f"g_{r}_{w}_{k}")
                    m.add_bool_or([v[r, w, k].negated(), met[r].negated(), first])
                    m.add(E[w, k] <= d1_ns).only_enforce_if(first)
                    later = m.new_bool_var(f"h_{r}_{w}_{k}")
                    m.add_bool_or([x[r, w, k].negated(), met[r].negated(), later])
                    done = sum(x[r, w, j] for j in range(k + 1))
                    m.add(E[w, k] <= d1_ns + tpot_ns * done).only_enforce_if(later)
                # cost: from switch-on (rounded up) to the last iteration's end
                on = on_ceil.get(w, 0)
                m.add(C[w] >= E[w, k] - on).only_enforce_if(z[w, k])
            count = sum(z[w, k] for k in K)
            m.add(count <= sum(int(d.output[r]) * y[r, w] for r in R))
            for r in R:
                m.add(count >= int(d.output[r])).only_enforce_if(y[r, w])
        for r in R:
            if not d.can_meet(r):
                m.add(met[r] == 0)

    def weighted(self) -> CpFormulation:
        """``max (1/n) sum m - lambda sum C`` in integers: ``den n J`` with ``C`` in
        nanoseconds, ``den`` the least power of ten (at most :data:`PRICE_DENOMINATOR`) that
        makes the price ``lambda n den`` per second whole, the price rounded down when none
        does (a valid upper bound). Small coefficients keep CP-SAT's presolve, which expands
        the objective through the time constraints, clear of integer overflow."""
        d = self.d
        per_s = d.cost_weight * d.n
        den = 1
        while den < PRICE_DENOMINATOR and not math.isclose(
            per_s * den, round(per_s * den), rel_tol=0.0, abs_tol=1e-9
        ):
            den *= 10
        # price per nanosecond, in units of 1 / (den NS_PER_S) of n J
        price = math.floor(per_s * den + 1e-9)
        self.m.maximize(
            den * NS_PER_S * sum(self.met[r] for r in self.R)
            - price * sum(self.C[w] for w in self.Wr)
        )
        scale = den * NS_PER_S * d.n
        return CpFormulation(self.m, to_schedule=self.to_schedule, objective_of=lambda v: v / scale)

    def cost(self, min_met: int) -> CpFormulation:
        """``min sum_w C_w`` (ns) subject to ``sum_r m_r >= min_met``."""
        self.m.add(sum(self.met[r] for r in self.R) >= min_met)
        self.m.minimize(sum(self.C[w] for w in self.Wr))
        return CpFormulation(
            self.m, to_schedule=self.to_schedule, objective_of=lambda v: v / NS_PER_S
        )

    def to_schedule(self, solver: Any) -> Schedule:
        d = self.d
        routing = tuple(next(w for w in self.Wr if solver.value(self.y[r, w])) for r in self.R)
        slots: list[int | None] = [None] * d.max_servers
        for (w, s), var in self.o.items():
            if solver.value(var):
                slots[w] = s
        its = []
        for w in self.Wr:
            comps = []
            for k in self.K:
                prefill = tuple(r for r in self.R if solver.value(self.v[r, w, k]))
                decode = tuple(r for r in self.R if solver.value(self.x[r, w, k]))
                if prefill or decode:
                    comps.append((prefill, decode))
            its.append(tuple(comps))
        decision = ScaleDecision(routing, tuple(slots), tuple(its))
        _check_decision(d, decision)
        return decision_schedule(d, decision)


# -- exhaustive search ---------------------------------------------------------------------------


class _Exhaustive:
    """Every routing (identical workers counted once), every switch-on slot and every iteration
    sequence of every worker.

    Given the routing and a worker's ready time, the workers are independent, so each worker's
    best schedules are found alone: a dynamic program over states (tokens each request has
    emitted, requests still on time) keeps, per state, the earliest end of the last iteration.
    That is exact: iterations start as early as possible and their durations do not depend on
    when they start, so an earlier end makes every later token earlier and the worker leave no
    later. Per worker the search returns the least worker-seconds for each number of requests
    met; the workers are combined by a min-plus sum over those numbers.
    """

    def __init__(self, data: ScaleWindow, deadline: float) -> None:
        self.d = data
        self.deadline = deadline
        self.calls = 0
        self._memo: dict[tuple[tuple[int, ...], float], dict[int, tuple[float, tuple]]] = {}

    def _tick(self) -> None:
        self.calls += 1
        if self.calls % 512 == 0 and time.perf_counter() > self.deadline:
            raise TimeoutError(f"exhaustive search over {PROBLEM} passed its time limit")

    def worker_front(
        self, members: tuple[int, ...], ready_s: float
    ) -> dict[int, tuple[float, tuple[Composition, ...]]]:
        """``met count -> (least end of the last iteration, iterations)`` for one worker
        serving ``members`` from ``ready_s``."""
        key = (members, ready_s)
        if key in self._memo:
            return self._memo[key]
        d = self.d
        n = len(members)
        out = [int(d.output[r]) for r in members]
        start_state = (tuple([0] * n), (1 << n) - 1)
        best: dict[tuple[tuple[int, ...], int], tuple[float, Any]] = {start_state: (ready_s, None)}
        total_goal = sum(out)
        levels: dict[int, list[tuple[tuple[int, ...], int]]] = {0: [start_state]}
        finals: dict[int, tuple[float, tuple[tuple[int, ...], int]]] = {}
        for level in range(total_goal + 1):
            for state in levels.pop(level, []):
                end, _ = best[state]
                progress, alive = state
                if level == total_goal:
                    count = bin(alive).count("1")
                    if count not in finals or end < finals[count][0]:
                        finals[count] = (end, state)
                    continue
                actionable = [i for i in range(n) if progress[i] < out[i]]
                for size in range(1, min(len(actionable), d.max_batch_size) + 1):
                    for subset in itertools.combinations(actionable, size):
                        self._tick()
                        prefill = tuple(members[i] for i in subset if progress[i] == 0)
                        decode_idx = [i for i in subset if progress[i] > 0]
                        if d.max_batch_tokens:
                            tokens = sum(d.prefill_tokens(r) for r in prefill) + len(decode_idx)
                            if tokens > d.max_batch_tokens:
                                continue
                        start = max([end] + [float(d.arrival_s[r]) for r in prefill])
                        ctx = [
                            (members[i], int(d.prompt[members[i]]) + progress[i])
                            for i in decode_idx
                        ]
                        new_end = start + d.iteration_s(prefill, ctx)
                        new_progress = list(progress)
                        new_alive = alive
                        for i in subset:
                            r = members[i]
                            token = progress[i] + 1
                            if new_end > d.deadline_s(r, token) + ON_TIME_TOLERANCE_S:
                                new_alive &= ~(1 << i)
                            new_progress[i] = token
                        nxt = (tuple(new_progress), new_alive)
                        known = best.get(nxt)
                        if known is None or new_end < known[0]:
                            if known is None:
                                levels.setdefault(level + size, []).append(nxt)
                            best[nxt] = (new_end, (state, subset))
        result: dict[int, tuple[float, tuple[Composition, ...]]] = {}
        for count, (end, state) in finals.items():
            comps: list[Composition] = []
            cur = state
            while best[cur][1] is not None:
                prev, subset = best[cur][1]
                prev_progress = prev[0]
                prefill = tuple(sorted(members[i] for i in subset if prev_progress[i] == 0))
                decode = tuple(sorted(members[i] for i in subset if prev_progress[i] > 0))
                comps.append((prefill, decode))
                cur = prev
            result[count] = (end, tuple(reversed(comps)))
        self._memo[key] = result
        return result

    def _groups(self) -> list[tuple[tuple[int, ...], ...]]:
        """Partitions of the requests into at most ``W`` labelled groups: the first ``n0``
        groups go to the (identical) initial workers in canonical order, the rest to new ones
        (also identical), each non-empty new group once."""
        d = self.d
        n, n0, W = d.n, d.initial_servers, d.max_servers
        seen: set[tuple[tuple[int, ...], ...]] = set()
        out = []
        for labels in itertools.product(range(W), repeat=n):
            initial = [tuple(r for r in range(n) if labels[r] == w) for w in range(n0)]
            new = [tuple(r for r in range(n) if labels[r] == w) for w in range(n0, W)]
            key = tuple(sorted(initial)) + tuple(sorted(g for g in new if g))
            canonical = (*sorted(initial), *sorted(g for g in new if g))
            if key in seen:
                continue
            seen.add(key)
            out.append(canonical)
        return out

    def _new_worker_front(
        self, members: tuple[int, ...]
    ) -> dict[int, tuple[float, tuple[Composition, ...], int]]:
        """Best over the switch-on slots of a new worker: ``count -> (cost, iterations, slot)``."""
        d = self.d
        front: dict[int, tuple[float, tuple[Composition, ...], int]] = {}
        for s in range(d.slots):
            on = d.slot_time_s(s)
            for count, (end, comps) in self.worker_front(members, on + d.startup_s).items():
                cost = end - on
                if count not in front or cost < front[count][0]:
                    front[count] = (cost, comps, s)
        return front

    def front(self) -> dict[int, tuple[float, ScaleDecision]]:
        """``met count -> (least worker-seconds, decision)`` over every decision."""
        d = self.d
        n0 = d.initial_servers
        best: dict[int, tuple[float, ScaleDecision]] = {}
        for groups in self._groups():
            fronts: list[dict[int, tuple[float, tuple[Composition, ...], int | None]]] = []
            for w, members in enumerate(groups):
                if not members:
                    fronts.append({0: (0.0, (), None)})
                elif w < n0:
                    fronts.append(
                        {
                            c: (end, comps, None)
                            for c, (end, comps) in self.worker_front(members, 0.0).items()
                        }
                    )
                else:
                    fronts.append(dict(self._new_worker_front(members)))
            if any(not f for f in fronts):
                continue
            combined: dict[int, tuple[float, list]] = {0: (0.0, [])}
            for f in fronts:
                nxt: dict[int, tuple[float, list]] = {}
                for c1, (cost1, picks) in combined.items():
                    for c2, entry in f.items():
                        c, cost = c1 + c2, cost1 + entry[0]
                        if c not in nxt or cost < nxt[c][0]:
                            nxt[c] = (cost, [*picks, entry])
                combined = nxt
            for count, (cost, picks) in combined.items():
                if count in best and best[count][0] <= cost:
                    continue
                routing = [0] * d.n
                slots: list[int | None] = [None] * d.max_servers
                its: list[tuple[Composition, ...]] = [()] * d.max_servers
                for w, (members, (_, comps, slot)) in enumerate(zip(groups, picks, strict=True)):
                    for r in members:
                        routing[r] = w
                    slots[w] = slot
                    its[w] = comps
                best[count] = (cost, ScaleDecision(tuple(routing), tuple(slots), tuple(its)))
        return best

    def weighted(self) -> tuple[float, ScaleDecision]:
        """The decision maximizing ``count / n - lambda cost``."""
        d = self.d
        found = self.front()
        count, (cost, decision) = max(
            found.items(), key=lambda item: (item[0] / d.n - d.cost_weight * item[1][0], item[0])
        )
        return count / d.n - d.cost_weight * cost, decision

    def least_cost(self, min_met: int) -> tuple[float, ScaleDecision] | None:
        """The cheapest decision meeting at least ``min_met`` requests (None: none does)."""
        found = [(cost, decision) for c, (cost, decision) in self.front().items() if c >= min_met]
        if not found:
            return None
        return min(found, key=lambda item: item[0])


# -- the Pareto front ----------------------------------------------------------------------------


def pareto_front(
    instance: Instance,
    *,
    solver: str = "highs",
    time_limit: float = 60.0,
    threads: int = 1,
    seed: int = 0,
) -> list[FrontPoint]:
    """The exact cost-attainment front of a window by the epsilon-constraint method.

    For every level ``m = n, n - 1, ..., 0`` the least worker-seconds with at least ``m``
    requests met (:class:`DispatchScaleCost`, ``time_limit`` seconds each); levels no decision
    reaches are left out, and so is a level whose cost a higher level matches or beats
    (dominated). Each point carries its replayed cost and attainment, its status (OPTIMAL when
    proved), the lower bound on its cost, and its schedule.

    References
    ----------
    HyperFlexis, Sec. 3 (cost Eq. 3 against satisfaction Eq. 4).
    """
    from slolab.solvers.registry import solve

    data = ScaleWindow.of(instance)
    points: list[FrontPoint] = []
    for level in range(data.n, -1, -1):
        model = DispatchScaleCost(instance, min_met=level)
        res = solve(model, solver=solver, time_limit=time_limit, threads=threads, seed=seed)
        if res.schedule is None or res.objective is None:
            if res.status != Status.INFEASIBLE:
                logger.warning("front level %d: %s without a schedule", level, res.status.value)
            continue
        from slolab.sim import metrics, replay

        out = replay(instance, res.schedule)
        attainment = float(metrics.attainment(instance, out, "deadline"))
        points.append(
            FrontPoint(
                cost_server_s=float(res.objective),
                attainment=attainment,
                status=res.status,
                cost_bound=res.bound,
                level=level / data.n,
                runtime_s=res.runtime_s,
                backend=res.backend,
                schedule=res.schedule,
            )
        )
    return non_dominated(points)


def non_dominated(points: Sequence[FrontPoint]) -> list[FrontPoint]:
    """The points no other point beats in both cost (lower) and attainment (higher), by
    attainment from high to low; of equal points the first is kept."""
    ordered = sorted(points, key=lambda p: (-p.attainment, p.cost_server_s))
    kept: list[FrontPoint] = []
    for p in ordered:
        if kept and p.cost_server_s >= kept[-1].cost_server_s - 1e-12:
            continue
        kept.append(p)
    return kept

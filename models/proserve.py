"""ProServe's batching problems, exact: one iteration (``tdg-batch``) and a short horizon
(``tdg-horizon``), both maximizing the Token-level Deadline-aware Gain (TDG).

- **tdg-batch** (:class:`TdgBatch`): at one scheduling point of one server, the queue holds
  decoding requests (the next token's deadline), prefilling and waiting requests (the prompt
  tokens left). Choose the decode tokens and prefill chunk sizes of the next iteration, whose time
  (affine in the batch shape at the current contexts) must stay within SlideBatching's latency
  budget ``t_budget = max(min remain, eta)``, to maximize the TDG of the tokens the iteration
  emits by their deadlines. A MILP (integer chunk sizes), a CP-SAT model and brute force.
- **tdg-horizon** (:class:`TdgHorizon`): a window of requests on one server from an empty
  state; every iteration's composition (prefill chunks, decode tokens) over at most ``K``
  iterations is a decision, iterations start as early as the engine allows, and the total TDG
  is maximized. An iteration-indexed MILP with token-level deadlines, a CP-SAT model and brute
  force.

Both models are *relaxations certified by evaluation*: deadlines are relaxed by a tolerance (1 us
in the MILPs; whole nanoseconds, times rounded down and deadlines up, in CP-SAT), so the
solver's bound is a valid upper bound; the incumbent's schedule is then evaluated exactly, with
the engine's arithmetic (:meth:`TdgBatch.evaluate`, :meth:`TdgHorizon.evaluate`), and that value
is the reported objective. A solve is OPTIMAL only when the evaluated value reaches the bound.
The math and the proofs are in ``docs/proserve.md``.

References
----------
ProServe, Sec. 2 (TDG, Eq. 3), Sec. 4.1 (the affine latency estimator, Eq. 4-7), Sec. 4.2
(SlideBatching's latency budget and its knapsack view of one batch).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import CACHED_COLUMN, Instance, cached_prompt_tokens
from slolab.sim.engine import warm_start_state
from slolab.sim.schedule import PlannedIteration, Schedule
from slolab.solvers.backend import Backend, RawSolve
from slolab.solvers.base import CpFormulation, ExactModel, MilpFormulation, Result, Status
from slolab.solvers.registry import register_model
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    LinearTiming,
    TimingModel,
    prefill_chunk_attention,
)

__all__ = [
    "BATCH_PROBLEM",
    "HORIZON_PROBLEM",
    "BatchItems",
    "HorizonData",
    "TdgBatch",
    "TdgHorizon",
    "proserve_timing",
]

logger = logging.getLogger("slolab")

#: ``Instance.problem`` of the two problems.
BATCH_PROBLEM = "tdg-batch"
HORIZON_PROBLEM = "tdg-horizon"
#: Seconds by which the MILPs relax every deadline (covers the solvers' feasibility tolerance).
MILP_DEADLINE_SLACK_S = 1e-6
#: The metrics' on-time tolerance (s): a token at ``t <= d + 1e-9`` is on time.
ON_TIME_TOL_S = 1e-9
#: CP-SAT works in integer nanoseconds and in gains scaled by 1e9 (rounded up).
NS_PER_S = 1e9
GAIN_SCALE = 1e9
#: Relative tolerance within which an evaluated incumbent reaches the bound (a proof).
CERTIFY_TOL = 1e-6


def proserve_timing() -> LinearTiming:
    """The affine iteration time of the ProServe instances (ProServe's estimator form, Eq. 7).

    ``t_c + a * tokens + b * decode KV tokens``: the slope line of the ``"llama2-7b-h100"`` fit
    (intercept 4.35 ms, 19.07 us per token, 0.157 us per KV token read by decode attention)
    without its prefill-attention term, which makes an iteration's time quadratic in a chunk's
    size (at most 8% of a 2,000-token prefill). See docs/proserve.md.
    """
    from slolab.timing import resolve_timing
    from slolab.timing.forms import RooflineTiming

    roofline = resolve_timing("llama2-7b-h100")
    assert isinstance(roofline, RooflineTiming)
    coefficients = dict(roofline.lines[-1].coefficients)
    coefficients.pop("prefill_attention_work", None)
    return LinearTiming(roofline.lines[-1].intercept_s, coefficients, name="proserve-affine")


def require_affine(timing: TimingModel, what: str) -> tuple[float, np.ndarray]:
    """``(intercept, coefficients)`` of a timing model affine in the batch shape and linear in
    chunk sizes; ``what`` (the model's name) is named when ``timing`` is not."""
    view = timing.affine()
    if view is None:
        raise ValueError(
            f"{what} needs an iteration time affine in the batch shape; the timing model "
            f"{getattr(timing, 'name', type(timing).__name__)!r} is not (use "
            "models.proserve.proserve_timing() or another LinearTiming)"
        )
    intercept, coef = view
    if coef[F_PREFILL_ATTN] != 0:
        raise ValueError(
            f"{what} needs an iteration time linear in chunk sizes; the timing model charges "
            "prefill attention work, which is quadratic in a chunk (use proserve_timing())"
        )
    return float(intercept), np.asarray(coef, dtype=float)


def _iteration_s(timing: TimingModel, features: np.ndarray) -> float:
    return float(timing.times(features[None, :])[0])


def certified_result(model: Any, raw: RawSolve, evaluate: Any) -> Result:
    """The Result of a relaxed solve: objective = the incumbent's exact value; OPTIMAL only when
    it reaches the relaxation's bound."""
    if raw.schedule is None:
        return raw.to_result(model)
    value = float(evaluate(raw.schedule))
    status = raw.status
    bound = raw.bound
    if status == Status.OPTIMAL:
        relaxed = float(raw.objective) if raw.objective is not None else value
        bound = relaxed if bound is None else min(float(bound), relaxed)
        if value < bound - CERTIFY_TOL * max(1.0, abs(bound)):
            logger.info(
                "%s: the relaxed optimum %.9g is not reached by its schedule (%.9g): FEASIBLE",
                model.name,
                bound,
                value,
            )
            status = Status.FEASIBLE
    if bound is not None:
        bound = max(float(bound), value)
    return Result(
        status=status,
        objective=value,
        bound=bound,
        runtime_s=raw.runtime_s,
        backend=raw.backend,
        model=model.name,
        sense="max",
        schedule=raw.schedule,
        log=raw.log,
        details={**raw.details, "relaxed_objective": raw.objective},
    )


# -- tdg-batch --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchItems:
    """One scheduling point as knapsack items (rows are the instance's requests).

    ``decode[r]``: the request is decoding (its item is one decode token); otherwise its item is
    a prefill chunk of up to ``remaining[r]`` tokens that earns only when it completes the
    prompt. ``slack_s[r]`` is the next token's deadline minus the scheduling time (inf without a
    TTFT SLO), ``gain[r]`` its TDG weight, ``prefix[r]`` the request's cached tokens (a decode
    token's context, a chunk's prefix). Memory: a decode token takes one KV token, a completing
    chunk its tokens plus one.

    A snapshot's given cache (:func:`~slolab.instances.records.cached_prompt_tokens`): a waiting
    request's remaining prompt is its uncached part ``p - k`` and its chunk's prefix the ``k``
    cached tokens, held outside the capacity (a running request's cache must be 0, as the engine
    requires).
    """

    now_s: float
    budget_s: float
    decode: np.ndarray
    remaining: np.ndarray
    prefix: np.ndarray
    slack_s: np.ndarray
    gain: np.ndarray
    kv_free_tokens: int
    max_batch_size: int
    max_batch_tokens: int

    @classmethod
    def of(cls, instance: Instance) -> BatchItems:
        from slolab.sim.metrics import tdg_request_weights

        if instance.problem != BATCH_PROBLEM:
            raise ValueError(f"expected a {BATCH_PROBLEM!r} instance, got {instance.problem!r}")
        for key in ("scheduling_time_s", "latency_budget_s"):
            if key not in instance.settings:
                raise ValueError(f"a {BATCH_PROBLEM!r} instance needs the setting {key!r}")
        wl = instance.workload
        n = len(wl)
        warm = warm_start_state(instance)
        if warm is None:
            running = np.zeros(n, dtype=bool)
            remaining = wl.prompt_tokens.astype(np.int64)
            generated = np.zeros(n, dtype=np.int64)
        else:
            running, remaining, generated = warm
        # a waiting request finds its given cached prefix when it starts (outside the capacity)
        cached = cached_prompt_tokens(wl)
        bad = np.flatnonzero(running & (cached > 0))
        if len(bad):
            r = int(bad[0])
            raise ValueError(
                f"{BATCH_PROBLEM}: request {r} is running and has {CACHED_COLUMN} "
                f"{int(cached[r])}: a running request's KV is its own, give it 0"
            )
        remaining = remaining - cached
        now = float(instance.settings["scheduling_time_s"])
        late = np.flatnonzero(wl.arrival_s > now + ON_TIME_TOL_S)
        if len(late):
            raise ValueError(
                f"request {int(late[0])} arrives at {wl.arrival_s[late[0]]} s, after the "
                f"scheduling time {now} s"
            )
        decode = running & (remaining == 0)
        held = np.where(running, wl.prompt_tokens - remaining + generated, 0)
        first, later = tdg_request_weights(instance)
        ttft = np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf)
        tpot = np.nan_to_num(np.asarray(wl["tpot_slo_s"], dtype=float), nan=0.0)
        deadline = wl.arrival_s + ttft + generated * tpot
        cl = instance.cluster
        return cls(
            now_s=now,
            budget_s=float(instance.settings["latency_budget_s"]),
            decode=decode,
            remaining=np.where(decode, 0, remaining).astype(np.int64),
            prefix=(held + cached).astype(np.int64),
            slack_s=deadline - now,
            gain=np.where(generated == 0, first, later),
            kv_free_tokens=int(cl.kv_capacity_tokens - held.sum()),
            max_batch_size=int(cl.max_batch_size),
            max_batch_tokens=int(cl.max_batch_tokens),
        )

    @property
    def n(self) -> int:
        return len(self.decode)


def _batch_features(items: BatchItems, decodes: Sequence[int], chunks: Sequence[tuple[int, int]]):
    f = np.zeros(N_FEATURES)
    for r in decodes:
        f[F_DECODE_TOKENS] += 1
        f[F_NUM_DECODE] += 1
        f[F_DECODE_KV] += int(items.prefix[r])
    for r, c in chunks:
        f[F_PREFILL_TOKENS] += c
        f[F_NUM_PREFILL] += 1
        f[F_PREFILL_ATTN] += prefill_chunk_attention(c, int(items.prefix[r]))
    return f


@register_model(BATCH_PROBLEM)
class TdgBatch(ExactModel):
    """tdg-batch: the best next iteration at one scheduling point (a 0-1/integer knapsack).

    With ``x_r`` (decode token), ``c_r`` (chunk tokens, integer), ``z_r`` (the chunk completes
    the prompt), ``v_r`` (a chunk is present) and ``y_r`` (the item's token is earned):

    - ``T = t_c + sum_r x_r a_dec(r) + sum_r (a_tok c_r + a_seq v_r) <= t_budget``;
    - ``T <= slack_r + M (1 - y_r)``, ``y_r <= x_r`` (decode) or ``y_r <= z_r`` (prefill),
      ``rem_r z_r <= c_r <= rem_r v_r``;
    - memory ``sum x_r + sum (c_r + z_r) <= free KV``; sequences and tokens within the caps;
    - maximize ``sum_r gain_r y_r``.

    A partial chunk earns nothing in this iteration and only adds time, so optima use whole
    remainders or nothing (brute force, which tries every chunk size, confirms it).

    References
    ----------
    ProServe, Sec. 4.2 ("each local batch formation can be modeled as a knapsack problem: the
    latency budget t_budget serves as the knapsack capacity").
    """

    sense = "max"

    def __init__(self, instance: Instance) -> None:
        super().__init__(instance)
        self.items = BatchItems.of(instance)
        self.t_c, self.coef = require_affine(instance.timing, BATCH_PROBLEM)

    # -- exact evaluation -----------------------------------------------------------------
    def evaluate(self, schedule: Schedule) -> float:
        """TDG of the tokens the schedule's one iteration emits on time (engine arithmetic)."""
        its = [it for per in schedule.iterations for it in per]
        if not its:
            return 0.0
        if len(its) != 1:
            raise ValueError(f"a {BATCH_PROBLEM!r} schedule has one iteration, got {len(its)}")
        decodes = [r for r, ph, _ in its[0].entries if ph == "decode"]
        chunks = [(r, t) for r, ph, t in its[0].entries if ph == "prefill"]
        return self._value(decodes, chunks)

    def _value(self, decodes: Sequence[int], chunks: Sequence[tuple[int, int]]) -> float:
        it = self.items
        if not decodes and not chunks:
            return 0.0
        end = it.now_s + _iteration_s(self.instance.timing, _batch_features(it, decodes, chunks))
        earned = [r for r in decodes] + [r for r, c in chunks if c == it.remaining[r]]
        deadline = it.now_s + it.slack_s
        return float(sum(it.gain[r] for r in earned if end <= deadline[r] + ON_TIME_TOL_S))

    def _feasible(self, decodes: Sequence[int], chunks: Sequence[tuple[int, int]]) -> bool:
        it = self.items
        if not decodes and not chunks:
            return True
        t = _iteration_s(self.instance.timing, _batch_features(it, decodes, chunks))
        memory = len(decodes) + sum(c + (c == it.remaining[r]) for r, c in chunks)
        tokens = len(decodes) + sum(c for _, c in chunks)
        return (
            t <= it.budget_s + ON_TIME_TOL_S
            and memory <= it.kv_free_tokens
            and len(decodes) + len(chunks) <= it.max_batch_size
            and (not it.max_batch_tokens or tokens <= it.max_batch_tokens)
        )

    def _schedule(self, decodes: Sequence[int], chunks: Sequence[tuple[int, int]]) -> Schedule:
        entries = tuple((int(r), "prefill", int(c)) for r, c in chunks) + tuple(
            (int(r), "decode", 1) for r in decodes
        )
        if not entries:
            return Schedule(((),))
        return Schedule(((PlannedIteration(entries, not_before_s=self.items.now_s),),))

    def _decode_s(self, r: int) -> float:
        return float(
            self.coef[F_DECODE_TOKENS]
            + self.coef[F_NUM_DECODE]
            + self.coef[F_DECODE_KV] * self.items.prefix[r]
        )

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        return certified_result(self, backend.solve_model(self, time_limit), self.evaluate)

    # -- MILP ---------------------------------------------------------------------------------
    def milp(self) -> MilpFormulation:
        import pulp

        it = self.items
        prob = pulp.LpProblem("tdg_batch", pulp.LpMaximize)
        dec = np.flatnonzero(it.decode)
        pre = np.flatnonzero(~it.decode)
        x = {int(r): prob.add_variable(f"x_{r}", cat="Binary") for r in dec}
        c = {
            int(r): prob.add_variable(f"c_{r}", 0, int(it.remaining[r]), cat="Integer") for r in pre
        }
        z = {int(r): prob.add_variable(f"z_{r}", cat="Binary") for r in pre}
        v = {int(r): prob.add_variable(f"v_{r}", cat="Binary") for r in pre}
        y = {int(r): prob.add_variable(f"y_{r}", cat="Binary") for r in range(it.n)}
        duration = (
            self.t_c
            + pulp.lpSum(self._decode_s(r) * x[r] for r in x)
            + pulp.lpSum(
                self.coef[F_PREFILL_TOKENS] * c[r] + self.coef[F_NUM_PREFILL] * v[r] for r in c
            )
        )
        prob += pulp.lpSum(float(it.gain[r]) * y[r] for r in y)
        prob += duration <= it.budget_s + MILP_DEADLINE_SLACK_S, "budget"
        self._item_links(prob, x, c, z, v, y)
        self._on_time(prob, duration, y)
        self._capacity(prob, x, c, z, v, pulp)
        self.variables = {"x": x, "c": c, "z": z, "v": v, "y": y}

        def to_schedule() -> Schedule:
            decodes = [r for r, var in x.items() if (var.value() or 0) > 0.5]
            chunks = [(r, round(var.value() or 0)) for r, var in c.items()]
            return self._schedule(decodes, [(r, k) for r, k in chunks if k > 0])

        return MilpFormulation(prob, to_schedule=to_schedule)

    def _item_links(self, prob: Any, x: dict, c: dict, z: dict, v: dict, y: dict) -> None:
        """``y_r <= x_r`` (decode); ``y_r <= z_r``, ``rem z_r <= c_r <= rem v_r``, ``v_r <= c_r``."""
        rem = self.items.remaining
        for r in x:
            prob += y[r] <= x[r], f"earn_decode_{r}"
        for r in c:
            prob += y[r] <= z[r], f"earn_prefill_{r}"
            prob += c[r] >= int(rem[r]) * z[r], f"complete_{r}"
            prob += c[r] <= int(rem[r]) * v[r], f"present_{r}"
            prob += v[r] <= c[r], f"nonempty_{r}"

    def _on_time(self, prob: Any, duration: Any, y: dict) -> None:
        """``T <= slack_r + M (1 - y_r)`` for items whose slack is below the budget."""
        it = self.items
        for r, yr in y.items():
            slack = float(it.slack_s[r])
            if slack >= it.budget_s:
                continue
            if slack < self.t_c:
                prob += yr == 0, f"late_{r}"
                continue
            big_m = it.budget_s - slack
            prob += duration <= slack + MILP_DEADLINE_SLACK_S + big_m * (1 - yr), f"on_time_{r}"

    def _capacity(self, prob: Any, x: dict, c: dict, z: dict, v: dict, pulp: Any) -> None:
        """Memory ``sum x + sum (c + z) <= free``; ``sum x + sum v <= B``; tokens cap."""
        it = self.items
        prob += pulp.lpSum(x.values()) + pulp.lpSum(c[r] + z[r] for r in c) <= it.kv_free_tokens
        prob += pulp.lpSum(x.values()) + pulp.lpSum(v.values()) <= it.max_batch_size
        if it.max_batch_tokens:
            prob += pulp.lpSum(x.values()) + pulp.lpSum(c.values()) <= it.max_batch_tokens

    # -- CP-SAT ---------------------------------------------------------------------------------
    def cpsat(self) -> CpFormulation:
        from ortools.sat.python import cp_model

        it = self.items
        m = cp_model.CpModel()
        dec = [int(r) for r in np.flatnonzero(it.decode)]
        pre = [int(r) for r in np.flatnonzero(~it.decode)]
        x = {r: m.new_bool_var(f"x_{r}") for r in dec}
        c = {r: m.new_int_var(0, int(it.remaining[r]), f"c_{r}") for r in pre}
        z = {r: m.new_bool_var(f"z_{r}") for r in pre}
        v = {r: m.new_bool_var(f"v_{r}") for r in pre}
        y = {r: m.new_bool_var(f"y_{r}") for r in range(it.n)}
        # times in ns rounded down, deadlines up: a relaxation (certified by evaluation)
        tok_ns = math.floor(self.coef[F_PREFILL_TOKENS] * NS_PER_S)
        seq_ns = math.floor(self.coef[F_NUM_PREFILL] * NS_PER_S)
        duration = (
            math.floor(self.t_c * NS_PER_S)
            + sum(math.floor(self._decode_s(r) * NS_PER_S) * x[r] for r in dec)
            + sum(tok_ns * c[r] + seq_ns * v[r] for r in pre)
        )
        m.add(duration <= math.ceil((it.budget_s + ON_TIME_TOL_S) * NS_PER_S))
        for r in dec:
            m.add_implication(y[r], x[r])
        for r in pre:
            m.add_implication(y[r], z[r])
            m.add(c[r] >= int(it.remaining[r]) * z[r])
            m.add(c[r] <= int(it.remaining[r]) * v[r])
            m.add(c[r] >= v[r])
        for r in range(it.n):
            slack = float(it.slack_s[r])
            if math.isfinite(slack):
                m.add(duration <= math.ceil((slack + ON_TIME_TOL_S) * NS_PER_S)).only_enforce_if(
                    y[r]
                )
        m.add(sum(x.values()) + sum(c[r] + z[r] for r in pre) <= it.kv_free_tokens)
        m.add(sum(x.values()) + sum(v.values()) <= it.max_batch_size)
        if it.max_batch_tokens:
            m.add(sum(x.values()) + sum(c.values()) <= it.max_batch_tokens)
        m.maximize(sum(math.ceil(float(it.gain[r]) * GAIN_SCALE) * y[r] for r in y))

        def to_schedule(solver: Any) -> Schedule:
            decodes = [r for r in dec if solver.value(x[r])]
            chunks = [(r, int(solver.value(c[r]))) for r in pre if solver.value(c[r]) > 0]
            return self._schedule(decodes, chunks)

        return CpFormulation(m, to_schedule=to_schedule, objective_of=lambda v: v / GAIN_SCALE)

    # -- brute force ----------------------------------------------------------------------------
    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Every decode subset and every chunk size ``0..rem`` of every prefill request."""
        it = self.items
        deadline = time.perf_counter() + time_limit
        options = [
            [0, 1] if it.decode[r] else list(range(int(it.remaining[r]) + 1)) for r in range(it.n)
        ]
        best: tuple[float, list[int], list[tuple[int, int]]] = (0.0, [], [])
        for count, choice in enumerate(itertools.product(*options)):
            if count % 512 == 0 and time.perf_counter() > deadline:
                raise TimeoutError(f"brute force over {BATCH_PROBLEM} passed {time_limit} s")
            decodes = [r for r in range(it.n) if it.decode[r] and choice[r]]
            chunks = [(r, choice[r]) for r in range(it.n) if not it.decode[r] and choice[r]]
            if not self._feasible(decodes, chunks):
                continue
            value = self._value(decodes, chunks)
            if value > best[0] + 1e-12:
                best = (value, decodes, chunks)
        return best[0], self._schedule(best[1], best[2])


# -- tdg-horizon ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HorizonData:
    """A window of requests on one server, from an empty state.

    ``cached[r]``: request ``r``'s prompt tokens in the snapshot's given cache
    (:func:`~slolab.instances.records.cached_prompt_tokens`, zeros without one). It prefills
    only :attr:`uncached` tokens, their attention over the cached prefix; its decode tokens read
    its whole context (``prompt + generated``); the cached tokens are held outside the capacity.
    """

    arrival_s: np.ndarray
    prompt: np.ndarray
    cached: np.ndarray
    output: np.ndarray
    first_deadline_s: np.ndarray
    tpot_s: np.ndarray
    first_gain: np.ndarray
    decode_gain: np.ndarray
    max_iterations: int
    max_batch_size: int
    max_batch_tokens: int

    @classmethod
    def of(cls, instance: Instance, max_iterations: int | None = None) -> HorizonData:
        from slolab.sim.metrics import tdg_request_weights

        if instance.problem != HORIZON_PROBLEM:
            raise ValueError(f"expected a {HORIZON_PROBLEM!r} instance, got {instance.problem!r}")
        wl = instance.workload
        cl = instance.cluster
        if cl.mode != "colocated" or cl.servers != 1:
            raise ValueError(f"{HORIZON_PROBLEM} needs one co-located server")
        if "running" in wl and np.asarray(wl["running"], dtype=bool).any():
            raise ValueError(f"{HORIZON_PROBLEM} starts from an empty server (no running rows)")
        cached = cached_prompt_tokens(wl)
        need = int((wl.prompt_tokens + wl.output_tokens - cached).sum())
        if cl.kv_capacity_tokens < need:
            raise ValueError(
                f"{HORIZON_PROBLEM} assumes memory never binds: KV capacity "
                f"{cl.kv_capacity_tokens} < {need} tokens of the whole window"
            )
        first, later = tdg_request_weights(instance)
        ttft = np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf)
        k = max_iterations or instance.settings.get("max_iterations")
        if k is None:
            k = int(wl.output_tokens.sum()) + len(wl)
        if int(k) < 1:
            raise ValueError(f"max_iterations must be >= 1, got {k}")
        return cls(
            arrival_s=np.asarray(wl.arrival_s, dtype=float),
            prompt=wl.prompt_tokens.astype(np.int64),
            cached=cached,
            output=wl.output_tokens.astype(np.int64),
            first_deadline_s=wl.arrival_s + ttft,
            tpot_s=np.nan_to_num(np.asarray(wl["tpot_slo_s"], dtype=float), nan=0.0),
            first_gain=first,
            decode_gain=later,
            max_iterations=int(k),
            max_batch_size=int(cl.max_batch_size),
            max_batch_tokens=int(cl.max_batch_tokens),
        )

    @property
    def n(self) -> int:
        return len(self.prompt)

    @property
    def uncached(self) -> np.ndarray:
        """Prompt tokens each request prefills: its prompt less its given cached prefix."""
        return self.prompt - self.cached


Composition = tuple[tuple[tuple[int, int], ...], tuple[int, ...]]  # (chunks, decodes)


@register_model(HORIZON_PROBLEM)
class TdgHorizon(ExactModel):
    """tdg-horizon: the compositions of at most ``K`` iterations maximizing the window's TDG.

    Slots ``k = 1..K``, requests ``r``. Variables: ``u_k`` (slot used, used slots first),
    ``c_rk`` (chunk tokens, integer), ``v_rk`` (chunk present), ``f_rk`` (prompt complete by slot
    k, non-decreasing), ``x_rk`` (decode token), start and end times ``S_k``, ``E_k``, earned
    first tokens ``g_rk`` and decode tokens ``y_rk``. With ``P_rk = sum_{j<=k} c_rj`` and
    ``D_rk = sum_{j<=k} x_rj``:

    - prompts: ``p_r f_rk <= P_rk <= p_r - 1 + f_rk``; decode after the prompt:
      ``x_rk <= f_r(k-1)``; ``D_rK <= o_r - 1``;
    - times: ``S_k >= E_(k-1)``, ``S_k >= a_r (v_rk + x_rk)``, ``E_k = S_k + tau_k`` with
      ``tau_k >= t_c u_k + sum_r (a_tok c_rk + a_seq v_rk + a_dec x_rk + a_kv w_rk)`` and
      ``w_rk >= (p_r + 1 + D_r(k-1)) - M (1 - x_rk)`` (the context a decode token reads);
    - first token: ``g_rk <= f_rk - f_r(k-1)``, ``E_k <= d_r1 + M (1 - g_rk)``; decode token
      ``1 + D_rk``: ``y_rk <= x_rk``, ``E_k <= d_r1 + TPOT_r D_rk + M (1 - y_rk)``;
    - caps per slot; maximize ``sum w1_r g_rk + wd_r y_rk``.

    ``K`` defaults to the window's output tokens plus its requests (``max_iterations``
    setting). Memory is assumed not to bind (checked: the KV capacity holds the whole window).
    The prefill-attention term must be zero (it is quadratic in a chunk).

    With a given cache (``cached_tokens``, ``k_r``) ``p_r`` in the prompt rows is the uncached
    prompt ``p_r - k_r`` (what the chunks cover), while the context a decode token reads stays
    ``p_r + 1 + D_r(k-1)`` (the cached prefix is part of it); the capacity check counts the
    computed tokens only.
    """

    sense = "max"

    def __init__(self, instance: Instance, max_iterations: int | None = None) -> None:
        super().__init__(instance)
        self.data = HorizonData.of(instance, max_iterations)
        self.t_c, self.coef = require_affine(instance.timing, HORIZON_PROBLEM)

    # -- exact evaluation (the engine's arithmetic) --------------------------------------------
    def evaluate(self, schedule: Schedule) -> float:
        """TDG of the schedule, each iteration started as early as the engine starts it."""
        comps: list[Composition] = []
        for it in (it for per in schedule.iterations for it in per):
            chunks = tuple((r, t) for r, ph, t in it.entries if ph == "prefill")
            decodes = tuple(r for r, ph, _ in it.entries if ph == "decode")
            comps.append((chunks, decodes))
        return self._run(comps)[0]

    def _features(
        self, comp: Composition, prefilled: np.ndarray, generated: np.ndarray
    ) -> np.ndarray:
        chunks, decodes = comp
        cached = self.data.cached
        f = np.zeros(N_FEATURES)
        for r, c in chunks:
            f[F_PREFILL_TOKENS] += c
            f[F_NUM_PREFILL] += 1
            f[F_PREFILL_ATTN] += prefill_chunk_attention(c, int(cached[r] + prefilled[r]))
        for r in decodes:
            f[F_DECODE_TOKENS] += 1
            f[F_NUM_DECODE] += 1
            f[F_DECODE_KV] += int(cached[r] + prefilled[r] + generated[r])
        return f

    def step(
        self, comp: Composition, end: float, prefilled: np.ndarray, generated: np.ndarray
    ) -> tuple[float, float]:
        """Run one composition (updates the state arrays: ``prefilled`` counts the uncached
        prompt tokens computed); ``(new end, TDG earned)``."""
        d = self.data
        chunks, decodes = comp
        start = max(
            [end]
            + [float(d.arrival_s[r]) for r, _ in chunks]
            + [float(d.arrival_s[r]) for r in decodes]
        )
        new_end = start + _iteration_s(
            self.instance.timing, self._features(comp, prefilled, generated)
        )
        gain = 0.0
        for r in decodes:
            deadline = d.first_deadline_s[r] + generated[r] * d.tpot_s[r]
            generated[r] += 1
            if new_end <= deadline + ON_TIME_TOL_S:
                gain += float(d.decode_gain[r])
        uncached = d.uncached
        for r, c in chunks:
            prefilled[r] += c
            if prefilled[r] == uncached[r]:
                generated[r] += 1
                if new_end <= d.first_deadline_s[r] + ON_TIME_TOL_S:
                    gain += float(d.first_gain[r])
        return new_end, gain

    def _run(self, comps: Sequence[Composition]) -> tuple[float, float]:
        d = self.data
        prefilled = np.zeros(d.n, dtype=np.int64)
        generated = np.zeros(d.n, dtype=np.int64)
        end, total = 0.0, 0.0
        for comp in comps:
            end, gain = self.step(comp, end, prefilled, generated)
            total += gain
        return total, end

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        return certified_result(self, backend.solve_model(self, time_limit), self.evaluate)

    @staticmethod
    def schedule_of(comps: Sequence[Composition]) -> Schedule:
        """The replayable :class:`Schedule` of compositions (chunks, decodes) run in order."""
        its = []
        for chunks, decodes in comps:
            entries = tuple((int(r), "prefill", int(c)) for r, c in chunks) + tuple(
                (int(r), "decode", 1) for r in decodes
            )
            if entries:
                its.append(PlannedIteration(entries))
        return Schedule((tuple(its),))

    def horizon_s(self) -> float:
        """An upper bound on every iteration's end in an earliest-start schedule of ``K``.

        Iterations run back to back from the last arrival at the latest, so the last ends by
        ``max a + K (t_c + a_seq n) + a_tok sum (p - k) + sum_r (o_r - 1)(a_dec + a_kv (p_r + o_r))``
        (``k``: the given cached prefixes).
        """
        d = self.data
        a_dec = float(self.coef[F_DECODE_TOKENS] + self.coef[F_NUM_DECODE])
        work = (
            d.max_iterations * (self.t_c + float(self.coef[F_NUM_PREFILL]) * d.n)
            + float(self.coef[F_PREFILL_TOKENS]) * float(d.uncached.sum())
            + float(
                ((d.output - 1) * (a_dec + self.coef[F_DECODE_KV] * (d.prompt + d.output))).sum()
            )
        )
        return float(d.arrival_s.max()) + work + 1e-3

    # -- MILP -------------------------------------------------------------------------------------
    def milp(self) -> MilpFormulation:
        import pulp

        d = self.data
        K, R = d.max_iterations, range(d.n)
        H = self.horizon_s()
        prob = pulp.LpProblem("tdg_horizon", pulp.LpMaximize)
        V = prob.add_variable
        u = [V(f"u_{k}", cat="Binary") for k in range(K)]
        c = {
            (r, k): V(f"c_{r}_{k}", 0, int(d.uncached[r]), cat="Integer")
            for r in R
            for k in range(K)
        }
        v = {(r, k): V(f"v_{r}_{k}", cat="Binary") for r in R for k in range(K)}
        f = {(r, k): V(f"f_{r}_{k}", cat="Binary") for r in R for k in range(K)}
        x = {(r, k): V(f"x_{r}_{k}", cat="Binary") for r in R for k in range(K)}
        w = {
            (r, k): V(f"w_{r}_{k}", 0, int(d.prompt[r] + d.output[r])) for r in R for k in range(K)
        }
        g = {(r, k): V(f"g_{r}_{k}", cat="Binary") for r in R for k in range(K)}
        y = {(r, k): V(f"y_{r}_{k}", cat="Binary") for r in R for k in range(K)}
        S = [V(f"S_{k}", 0, H) for k in range(K)]
        E = [V(f"E_{k}", 0, H) for k in range(K)]

        def P(r: int, k: int) -> Any:
            return pulp.lpSum(c[r, j] for j in range(k + 1))

        def D(r: int, k: int) -> Any:
            return pulp.lpSum(x[r, j] for j in range(k + 1)) if k >= 0 else 0

        prob += pulp.lpSum(
            float(d.first_gain[r]) * g[r, k] + float(d.decode_gain[r]) * y[r, k]
            for r in R
            for k in range(K)
        )
        a_dec = float(self.coef[F_DECODE_TOKENS] + self.coef[F_NUM_DECODE])
        a_kv = float(self.coef[F_DECODE_KV])
        for k in range(K):
            if k + 1 < K:
                prob += u[k] >= u[k + 1], f"used_first_{k}"
            prob += pulp.lpSum(v[r, k] + x[r, k] for r in R) >= u[k], f"nonempty_{k}"
            prob += pulp.lpSum(v[r, k] + x[r, k] for r in R) <= d.max_batch_size * u[k], f"seqs_{k}"
            if d.max_batch_tokens:
                prob += (
                    pulp.lpSum(c[r, k] + x[r, k] for r in R) <= d.max_batch_tokens,
                    f"tokens_{k}",
                )
            prob += S[k] >= (E[k - 1] if k else 0), f"after_{k}"
            tau = self.t_c * u[k] + pulp.lpSum(
                float(self.coef[F_PREFILL_TOKENS]) * c[r, k]
                + float(self.coef[F_NUM_PREFILL]) * v[r, k]
                + a_dec * x[r, k]
                + a_kv * w[r, k]
                for r in R
            )
            prob += E[k] >= S[k] + tau, f"duration_{k}"
            for r in R:
                p, a = int(d.uncached[r]), float(d.arrival_s[r])
                prob += S[k] >= a * (v[r, k] + x[r, k]), f"arrived_{r}_{k}"
                prob += c[r, k] <= p * v[r, k], f"chunk_{r}_{k}"
                prob += v[r, k] <= c[r, k], f"chunk_nonempty_{r}_{k}"
                prob += P(r, k) >= p * f[r, k], f"complete_{r}_{k}"
                prob += P(r, k) <= p - 1 + f[r, k], f"incomplete_{r}_{k}"
                before = f[r, k - 1] if k else 0
                if k:
                    prob += f[r, k] >= f[r, k - 1], f"stays_complete_{r}_{k}"
                prob += x[r, k] <= before, f"decode_after_prompt_{r}_{k}"
                big = int(d.prompt[r] + d.output[r])
                # the context a decode token reads: the whole prompt, cached prefix included
                context = int(d.prompt[r]) + 1 + D(r, k - 1)
                prob += w[r, k] >= context - big * (1 - x[r, k]), f"context_{r}_{k}"
                prob += g[r, k] <= f[r, k] - before, f"first_at_{r}_{k}"
                prob += y[r, k] <= x[r, k], f"earn_decode_{r}_{k}"
                d1 = float(d.first_deadline_s[r])
                if math.isfinite(d1):
                    slack = d1 + MILP_DEADLINE_SLACK_S
                    prob += E[k] <= slack + H * (1 - g[r, k]), f"first_on_time_{r}_{k}"
                    prob += (
                        E[k] <= slack + float(d.tpot_s[r]) * D(r, k) + H * (1 - y[r, k]),
                        f"decode_on_time_{r}_{k}",
                    )
        for r in R:
            prob += D(r, K - 1) <= int(d.output[r]) - 1, f"decodes_{r}"
        self.variables = {"u": u, "c": c, "x": x, "S": S, "E": E, "g": g, "y": y}

        def to_schedule() -> Schedule:
            comps: list[Composition] = []
            for k in range(K):
                chunks = tuple(
                    (r, round(c[r, k].value() or 0)) for r in R if (c[r, k].value() or 0) > 0.5
                )
                decodes = tuple(r for r in R if (x[r, k].value() or 0) > 0.5)
                if chunks or decodes:
                    comps.append((chunks, decodes))
            return self.schedule_of(comps)

        return MilpFormulation(prob, to_schedule=to_schedule)

    # -- CP-SAT -------------------------------------------------------------------------------------
    def cpsat(self) -> CpFormulation:
        from ortools.sat.python import cp_model

        d = self.data
        K, R = d.max_iterations, range(d.n)
        H = math.ceil(self.horizon_s() * NS_PER_S)
        m = cp_model.CpModel()
        u = [m.new_bool_var(f"u_{k}") for k in range(K)]
        c = {
            (r, k): m.new_int_var(0, int(d.uncached[r]), f"c_{r}_{k}") for r in R for k in range(K)
        }
        v = {(r, k): m.new_bool_var(f"v_{r}_{k}") for r in R for k in range(K)}
        f = {(r, k): m.new_bool_var(f"f_{r}_{k}") for r in R for k in range(K)}
        x = {(r, k): m.new_bool_var(f"x_{r}_{k}") for r in R for k in range(K)}
        g = {(r, k): m.new_bool_var(f"g_{r}_{k}") for r in R for k in range(K)}
        y = {(r, k): m.new_bool_var(f"y_{r}_{k}") for r in R for k in range(K)}
        S = [m.new_int_var(0, H, f"S_{k}") for k in range(K)]
        E = [m.new_int_var(0, H, f"E_{k}") for k in range(K)]
        ns = NS_PER_S
        # durations rounded down, deadlines up (ns): a relaxation certified by evaluation
        t_c = math.floor(self.t_c * ns)
        a_tok = math.floor(float(self.coef[F_PREFILL_TOKENS]) * ns)
        a_seq = math.floor(float(self.coef[F_NUM_PREFILL]) * ns)
        a_dec = math.floor(float(self.coef[F_DECODE_TOKENS] + self.coef[F_NUM_DECODE]) * ns)
        a_kv = math.floor(float(self.coef[F_DECODE_KV]) * ns)
        D = {(r, k): sum(x[r, j] for j in range(k + 1)) for r in R for k in range(K)}
        for k in range(K):
            if k + 1 < K:
                m.add(u[k] >= u[k + 1])
            m.add(sum(v[r, k] + x[r, k] for r in R) >= u[k])
            m.add(sum(v[r, k] + x[r, k] for r in R) <= d.max_batch_size * u[k])
            if d.max_batch_tokens:
                m.add(sum(c[r, k] + x[r, k] for r in R) <= d.max_batch_tokens)
            if k:
                m.add(S[k] >= E[k - 1])
            kv_terms = []
            for r in R:
                p = int(d.uncached[r])
                ctx = m.new_int_var(0, a_kv * int(d.prompt[r] + d.output[r]), f"w_{r}_{k}")
                before_d = D[r, k - 1] if k else 0
                # a decode token reads the whole context, the cached prefix included
                m.add(ctx == a_kv * (int(d.prompt[r]) + 1 + before_d)).only_enforce_if(x[r, k])
                m.add(ctx == 0).only_enforce_if(x[r, k].negated())
                kv_terms.append(ctx)
                m.add(S[k] >= math.floor(float(d.arrival_s[r]) * ns)).only_enforce_if(v[r, k])
                m.add(S[k] >= math.floor(float(d.arrival_s[r]) * ns)).only_enforce_if(x[r, k])
                m.add(c[r, k] <= p * v[r, k])
                m.add(c[r, k] >= v[r, k])
                prefix = sum(c[r, j] for j in range(k + 1))
                m.add(prefix >= p * f[r, k])
                m.add(prefix <= p - 1 + f[r, k])
                if k:
                    m.add(f[r, k] >= f[r, k - 1])
                    m.add_implication(x[r, k], f[r, k - 1])
                    m.add(g[r, k] <= f[r, k] - f[r, k - 1])
                else:
                    m.add(x[r, k] == 0)
                    m.add(g[r, k] <= f[r, k])
                m.add_implication(y[r, k], x[r, k])
                d1 = float(d.first_deadline_s[r])
                if math.isfinite(d1):
                    d1_ns = math.ceil((d1 + ON_TIME_TOL_S) * ns)
                    tpot_ns = math.ceil(float(d.tpot_s[r]) * ns)
                    m.add(E[k] <= d1_ns).only_enforce_if(g[r, k])
                    m.add(E[k] <= d1_ns + tpot_ns * D[r, k]).only_enforce_if(y[r, k])
            m.add(
                E[k]
                == S[k]
                + t_c * u[k]
                + sum(a_tok * c[r, k] + a_seq * v[r, k] + a_dec * x[r, k] for r in R)
                + sum(kv_terms)
            )
        for r in R:
            m.add(D[r, K - 1] <= int(d.output[r]) - 1)
        m.maximize(
            sum(
                math.ceil(float(d.first_gain[r]) * GAIN_SCALE) * g[r, k]
                + math.ceil(float(d.decode_gain[r]) * GAIN_SCALE) * y[r, k]
                for r in R
                for k in range(K)
            )
        )

        def to_schedule(solver: Any) -> Schedule:
            comps: list[Composition] = []
            for k in range(K):
                chunks = tuple((r, int(solver.value(c[r, k]))) for r in R if solver.value(c[r, k]))
                decodes = tuple(r for r in R if solver.value(x[r, k]))
                if chunks or decodes:
                    comps.append((chunks, decodes))
            return self.schedule_of(comps)

        return CpFormulation(m, to_schedule=to_schedule, objective_of=lambda val: val / GAIN_SCALE)

    # -- brute force -------------------------------------------------------------------------------
    def _compositions(self, prefilled: np.ndarray, generated: np.ndarray) -> Iterator[Composition]:
        d = self.data
        options: list[list[tuple[str, int]]] = []
        for r in range(d.n):
            if prefilled[r] < d.uncached[r]:
                left = int(d.uncached[r] - prefilled[r])
                options.append([("", 0)] + [("p", c) for c in range(1, left + 1)])
            elif generated[r] < d.output[r]:
                options.append([("", 0), ("d", 1)])
            else:
                options.append([("", 0)])
        for choice in itertools.product(*options):
            chunks = tuple((r, t) for r, (kind, t) in enumerate(choice) if kind == "p")
            decodes = tuple(r for r, (kind, _) in enumerate(choice) if kind == "d")
            seqs = len(chunks) + len(decodes)
            tokens = sum(t for _, t in chunks) + len(decodes)
            if seqs == 0 or seqs > d.max_batch_size:
                continue
            if d.max_batch_tokens and tokens > d.max_batch_tokens:
                continue
            yield chunks, decodes

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Depth-first search over every sequence of at most ``K`` compositions (every chunk
        size), bounded by the weight of the tokens not yet emitted."""
        d = self.data
        stop = time.perf_counter() + time_limit
        best: list[Any] = [0.0, []]
        total_weight = float(d.first_gain.sum() + (d.decode_gain * (d.output - 1)).sum())
        visited = [0]

        def search(
            depth: int,
            end: float,
            value: float,
            prefilled: np.ndarray,
            generated: np.ndarray,
            lost: float,
            path: list[Composition],
        ) -> None:
            visited[0] += 1
            if visited[0] % 1024 == 0 and time.perf_counter() > stop:
                raise TimeoutError(f"brute force over {HORIZON_PROBLEM} passed {time_limit} s")
            if value > best[0] + 1e-12:
                best[0], best[1] = value, list(path)
            if depth == d.max_iterations or total_weight - lost <= best[0] + 1e-12:
                return
            for comp in self._compositions(prefilled, generated):
                p2, g2 = prefilled.copy(), generated.copy()
                before = float(
                    sum(d.first_gain[r] for r, c in comp[0] if prefilled[r] + c == d.uncached[r])
                    + sum(d.decode_gain[r] for r in comp[1])
                )
                new_end, gain = self.step(comp, end, p2, g2)
                path.append(comp)
                search(depth + 1, new_end, value + gain, p2, g2, lost + before - gain, path)
                path.pop()

        zeros = np.zeros(d.n, dtype=np.int64)
        search(0, 0.0, 0.0, zeros.copy(), zeros.copy(), 0.0, [])
        return float(best[0]), self.schedule_of(best[1])

"""A clairvoyant improvement search for tdg-horizon windows, every candidate scored by the engine.

:func:`steered_search` (method ``lns`` of ``tdg-horizon``) is a large-neighbourhood search over
*steerings* of an online policy, not an exact re-solve: a steering gives each request a
priority factor and a TTFT factor that only the policy sees (its ordering by density and by
deadline changes); the engine then runs the policy on the true window, and the candidate's
value is the TDG of that run under the true deadlines and weights. Start: the best of the
online policies of ProServe's evaluation, unsteered. Each step frees a sub-window of a few
consecutive requests (drawn around a request that lost gain), draws new factors for them,
simulates, and keeps the steering when the TDG rises. The result is the incumbent's iteration
log as a Schedule (the search driver replays it once and checks its TDG; the harness replays
it; the checker verifies it). With ``master_limit`` its last seconds go to steerings drawn
from the integer restricted master of the column-generation bound (:func:`master_step`).

Because every candidate is a simulated run, the search can only return schedules the engine
accepts, and its value is exactly the replay's. It is a heuristic with clairvoyance (it knows
the window's arrivals), so it is a lower bound on the optimum, never a proof.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.solvers.search import (
    TDG_HORIZON_STARTS,
    Exhausted,
    FirstOf,
    MaxIterations,
    MaxRuntime,
    NoImprovement,
    Search,
    SearchResult,
    best_of,
    improves,
    interruptible,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome
    from slolab.sim.schedule import Schedule

logger = logging.getLogger("slolab")

#: Policies tried as the starting point, in order (:data:`slolab.solvers.search.
#: TDG_HORIZON_STARTS`, declared with its rule beside dispatch-lns's).
START_POLICIES = TDG_HORIZON_STARTS.names
#: Name of :class:`DeadlineAdmission` with clairvoyant chunk sizes (``lookahead=True``).
LOOKAHEAD = "deadline-lookahead"
#: Names of :class:`DeadlineAdmission` packing several kept prompts per iteration
#: (``pack=True``), online and with clairvoyant chunk sizes.
PACKING = "deadline-packing"
PACKING_LOOKAHEAD = "deadline-packing-lookahead"
#: Names of the packing variants that also wait for an urgent arrival (``wait=True``).
WAITING = "deadline-packing-wait"
WAITING_LOOKAHEAD = "deadline-packing-lookahead-wait"
#: :class:`DeadlineAdmission`'s named variants: (lookahead, pack, wait).
DEADLINE_VARIANTS = {
    "deadline-admission": (False, False, False),
    LOOKAHEAD: (True, False, False),
    PACKING: (False, True, False),
    PACKING_LOOKAHEAD: (True, True, False),
    WAITING: (False, True, True),
    WAITING_LOOKAHEAD: (True, True, True),
}
#: Largest prefill chunk (tokens) :class:`DeadlineAdmission` gives a request that will miss its
#: first token anyway (so that it never holds the server long).
LATE_CHUNK_TOKENS = 512
#: Smallest chunk the clairvoyant variant of :class:`DeadlineAdmission` cuts a prompt to.
LOOKAHEAD_MIN_CHUNK = 64
#: Iterations an exact slice move re-plans (drawn uniformly in this range, both ends included).
SLICE_ITERATIONS = (6, 14)
#: Seconds granted to one slice's MILP (a slice not proved optimal within them is not used).
SLICE_CALL_LIMIT_S = 5.0
#: Draws in a row of slices already tried on the incumbent after which the slice moves stop.
SLICE_MAX_REPEATS = 200
#: TDG weight of late tokens below which a run has nothing left to win (the searches stop).
LOST_GAIN_EPS = 1e-9
#: Margin by which a slice MILP's optimum must pass the run's gain on the slice to be replayed
#: (the solver's own tolerance; the replay then decides by the incumbent rule).
SLICE_GAIN_EPS = 1e-9
#: Factors a freed request may draw for its priority and for its TTFT (policy's view only).
PRIORITY_FACTORS = (0.125, 0.5, 1.0, 2.0, 8.0)
TTFT_FACTORS = (0.5, 1.0, 2.0, 8.0)
#: TTFT factor (policy's view) of a request whose first token the integer master gives up.
GIVE_UP_TTFT_FACTOR = 1000.0
#: Priority factor (policy's view) of a request whose first token the integer master keeps.
KEPT_PRIORITY_FACTOR = 8.0
#: Start policies (the best by their unsteered TDG) steered by the integer master's plan.
MASTER_POLICIES = 4
#: Share of the master step's time given to the integer master's MILP (the rest generates
#: columns): the recombination of the runs' columns needs the MILP's time more.
MASTER_MIP_SHARE = 0.8


class _TdgNames:
    """The names the tdg-horizon reports read the driver's fields by: ``start_tdg`` (the
    start's objective) and ``tdg`` (the objective)."""

    __slots__ = ()
    start_objective: float
    objective: float

    @property
    def start_tdg(self) -> float:
        return self.start_objective

    @property
    def tdg(self) -> float:
        return self.objective


@dataclass(frozen=True, slots=True)
class SearchReport(_TdgNames, SearchResult["Schedule"]):
    """What :func:`steered_search` did, as the driver's report (:class:`slolab.solvers.search.
    SearchResult`: the incumbent's Schedule, its TDG, steering steps and improvements, stop
    reason, start policy and value, starts tried), with the TDG the steering reached and the
    exact slice moves (:func:`slice_search`): slices solved, proved optimal, kept."""

    slices: int = 0
    slices_optimal: int = 0
    slice_improvements: int = 0
    steered_tdg: float = math.nan
    master_tdg: float = math.nan
    master_bound: float = math.nan
    master_candidates: int = 0
    master_kept: str = ""

    @property
    def steps(self) -> int:
        return self.iterations


@dataclass(frozen=True, slots=True)
class SliceReport(_TdgNames, SearchResult["Outcome"]):
    """What :func:`slice_search` did, as the driver's report (the incumbent run, its TDG,
    slices drawn as iterations and kept as improvements, the TDG before as the start's), with
    the slices solved and proved optimal."""

    slices: int = 0
    optimal: int = 0


class DeadlineAdmission:
    """First tokens by deadline, with Moore-Hodgson admission (an online policy).

    At every iteration: every decoding request decodes; the prompts in the queue that can still
    make their first token's deadline are ordered by it, and, walking that order with each
    prompt run whole in its own iteration, a prompt whose completion passes its deadline drops
    the kept prompt of least first-token gain per second of work (weighted Moore-Hodgson). The
    first kept prompt runs in this iteration, whole or in chunks of at most ``chunk_tokens``
    (a shorter iteration lets a request that arrives meanwhile start sooner). With none kept, the earliest-arrived late
    prompt gets a chunk of at most :data:`LATE_CHUNK_TOKENS` tokens (its decode tokens may still
    earn). Times are estimated with the instance's affine timing model.

    With ``pack=True`` the iteration also takes the next kept prompts in deadline order, whole,
    while every prompt it completes still ends by its deadline (and the prefill tokens stay
    within ``chunk_tokens`` when it is set), then a chunk of the next kept prompt that fills the
    time left before the earliest such deadline: short prompts that arrive together share one
    iteration's overhead ``t_c`` instead of paying it each.

    With ``wait=True`` (clairvoyant, as ``lookahead``), the prefill is held back when a request
    arriving while the iteration would run could make its first token if started at its
    arrival (its latest start, alone, at or after it) but not after the iteration: the server
    runs only its decodes, or idles until the earliest such arrival when it has none, and
    decides again, so that short urgent prompts arriving in a burst share one packed
    iteration instead of waiting behind a long one.

    References
    ----------
    Moore, "An n job, one machine sequencing algorithm for minimizing the number of late jobs",
    Management Science 15 (1968); ProServe Sec. 4.1 (the affine estimator).
    """

    name = "deadline-admission"

    def __init__(
        self, chunk_tokens: int = 0, lookahead: bool = False, pack: bool = False, wait: bool = False
    ) -> None:
        if chunk_tokens < 0:
            raise ValueError(f"chunk_tokens must be >= 0 (0: whole prompts), got {chunk_tokens}")
        self.chunk_tokens = chunk_tokens
        self.lookahead = lookahead
        self.pack = pack
        self.wait = wait

    def start(self, instance: Instance, seed: int) -> None:
        from slolab.instances.records import cached_prompt_tokens
        from slolab.models.proserve import require_affine
        from slolab.sim import metrics
        from slolab.timing.base import (
            F_DECODE_KV,
            F_DECODE_TOKENS,
            F_NUM_DECODE,
            F_NUM_PREFILL,
            F_PREFILL_TOKENS,
        )

        self.t_c, coef = require_affine(instance.timing, self.name)
        self.a_tok = float(coef[F_PREFILL_TOKENS])
        self.a_seq = float(coef[F_NUM_PREFILL])
        self.a_dec = float(coef[F_DECODE_TOKENS] + coef[F_NUM_DECODE])
        self.a_kv = float(coef[F_DECODE_KV])
        self.first_gain = metrics.tdg_request_weights(instance)[0]
        wl = instance.workload
        self.arrival_s = np.asarray(wl.arrival_s, dtype=float)
        # the latest start of a prompt run alone that still makes its first deadline (its
        # uncached tokens: a snapshot's given cached prefix is not prefilled)
        ttft = np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf)
        alone = self.t_c + self.a_seq + self.a_tok * (wl.prompt_tokens - cached_prompt_tokens(wl))
        self.latest_start_s = self.arrival_s + ttft - alone
        self.by_arrival = np.argsort(self.arrival_s, kind="stable")
        self.sorted_arrival_s = self.arrival_s[self.by_arrival]

    def _chunk_cap(self, now: float, step_s: float) -> int:
        """Clairvoyant: the largest chunk whose iteration ends by the latest start of every
        request arriving while it runs (at least :data:`LOOKAHEAD_MIN_CHUNK` tokens)."""
        later = self.arrival_s > now
        if not later.any():
            return 0
        room = float(self.latest_start_s[later].min()) - now - step_s
        return max(LOOKAHEAD_MIN_CHUNK, int(room / self.a_tok)) if self.a_tok > 0 else 0

    def next_batch(self, server: Any) -> Any:
        from slolab.sim.policy import Batch

        now = server.now
        decode = list(server.decoding[: server.max_batch_size])
        decode_s = sum(
            self.a_dec + self.a_kv * (server.prompt(r) + server.generated(r)) for r in decode
        )
        step_s = self.t_c + decode_s + self.a_seq
        pending = list(server.prefilling) + list(server.waiting)
        feasible, late = [], []
        for r in pending:
            deadline = server.next_token_deadline(r)
            if now + step_s + self.a_tok * server.remaining_prefill(r) <= deadline:
                feasible.append((deadline, r))
            else:
                late.append(r)
        feasible.sort()
        kept: list[tuple[float, int]] = []
        end = now
        for deadline, r in feasible:
            kept.append((deadline, r))
            end += step_s + self.a_tok * server.remaining_prefill(r)
            if end > deadline:
                worst = min(
                    kept,
                    key=lambda k: (
                        self.first_gain[k[1]]
                        / (step_s + self.a_tok * server.remaining_prefill(k[1]))
                    ),
                )
                kept.remove(worst)
                end -= step_s + self.a_tok * server.remaining_prefill(worst[1])
        slots = server.max_batch_size - len(decode)
        prefill: list[tuple[int, int]] = []
        if slots > 0 and kept and self.pack:
            prefill = self._packed(server, kept, slots, now, step_s)
        elif slots > 0 and kept:
            r = kept[0][1]
            c = server.remaining_prefill(r)
            if self.chunk_tokens:
                c = min(c, self.chunk_tokens)
            if self.lookahead:
                cap = self._chunk_cap(now, step_s)
                c = min(c, cap) if cap else c
            prefill = [(r, c)]
        elif slots > 0 and late:
            r = min(late, key=server.arrival)
            c = min(server.remaining_prefill(r), LATE_CHUNK_TOKENS)
            if self.lookahead:
                cap = self._chunk_cap(now, step_s)
                c = min(c, cap) if cap else c
            prefill = [(r, c)]
        if prefill:
            waiting_set = set(server.waiting)
            free = server.kv_free_tokens
            fits = []
            for r, c in prefill:
                need = (server.remaining_prefill(r) + 1) if r in waiting_set else c + 1
                if need > free:
                    break
                free -= need
                fits.append((r, c))
            prefill = fits
        if not prefill and not decode:
            return Batch()
        if self.wait and prefill:
            wake = self._urgent_arrival(now, step_s, prefill)
            if wake < math.inf:
                return Batch(decode=decode) if decode else Batch(wake_at_s=wake)
        return Batch(prefill=prefill, decode=decode)

    def _urgent_arrival(self, now: float, step_s: float, prefill: list[tuple[int, int]]) -> float:
        """Clairvoyant (``wait=True``): the earliest request arriving while this iteration would
        run that could still make its first token if started at its arrival but not after the
        iteration (``math.inf``: none). The prefill then waits for it (the decodes run, or the
        server idles until it arrives), so that the packing can take it in."""
        tokens = sum(c for _, c in prefill)
        end = now + step_s + self.a_seq * (len(prefill) - 1) + self.a_tok * tokens
        first = int(np.searchsorted(self.sorted_arrival_s, now, side="right"))
        for r in self.by_arrival[first:]:
            arrival = float(self.arrival_s[r])
            if arrival >= end:
                break
            if arrival <= self.latest_start_s[r] < end:
                return arrival
        return math.inf

    def _packed(
        self, server: Any, kept: list[tuple[float, int]], slots: int, now: float, step_s: float
    ) -> list[tuple[int, int]]:
        """The prefill entries of a packed iteration (``pack=True``): kept prompts in deadline
        order, whole while every completed one ends by its deadline, then a filling chunk."""
        budget = float(self.chunk_tokens) if self.chunk_tokens else math.inf
        if self.lookahead:
            cap = self._chunk_cap(now, step_s)
            budget = min(budget, cap) if cap else budget
        prefill: list[tuple[int, int]] = []
        tokens = 0
        end = now + step_s  # step_s holds one chunk's a_seq
        limit = math.inf  # earliest deadline among the prompts this iteration completes
        for deadline, r in kept:
            if len(prefill) >= slots or budget - tokens < 1:
                break
            whole = server.remaining_prefill(r)
            extra = self.a_seq if prefill else 0.0
            c = int(min(whole, budget - tokens))
            new_end = end + extra + self.a_tok * c
            new_limit = min(limit, deadline) if c == whole else limit
            if prefill and new_end > new_limit:
                # a chunk that leaves every completed prompt on time, not completing this one
                room = (limit - end - extra) / self.a_tok if self.a_tok > 0 else 0.0
                part = int(min(room, whole - 1, budget - tokens))
                if part >= 1:
                    prefill.append((r, part))
                break
            prefill.append((r, c))
            tokens += c
            end, limit = new_end, new_limit
            if c < whole:
                break
        return prefill


def _make_policy(name: str, instance: Instance) -> Any:
    base, _, chunk = name.partition("/")
    if base in DEADLINE_VARIANTS:
        lookahead, pack, wait = DEADLINE_VARIANTS[base]
        return DeadlineAdmission(int(chunk or 0), lookahead=lookahead, pack=pack, wait=wait)
    from slolab.heuristics.policies import make_policy

    return make_policy(name, instance)


def _steered(instance: Instance, priority: np.ndarray, ttft: np.ndarray) -> Instance:
    wl = instance.workload
    columns = {
        "priority": np.asarray(wl["priority"], dtype=float) * priority,
        "ttft_slo_s": np.asarray(wl["ttft_slo_s"], dtype=float) * ttft,
    }
    return dataclasses.replace(instance, workload=wl.with_columns(**columns))


def _run(instance: Instance, policy: str, steer: Instance, seed: int) -> tuple[float, Outcome]:
    from slolab.sim import metrics, run

    out = run(steer, _make_policy(policy, steer), seed=seed, record_iterations=True)
    return metrics.tdg(instance, out), out


def _replayed_tdg(instance: Instance, outcome: Outcome) -> float:
    """The TDG of ``outcome``'s iteration log replayed by the engine on ``instance``."""
    from slolab.sim import metrics, replay
    from slolab.sim.schedule import Schedule

    return metrics.tdg(instance, replay(instance, Schedule.from_outcome(outcome)))


def _lost_gain(instance: Instance, outcome: Outcome) -> np.ndarray:
    """Per request, the TDG weight of its tokens that missed their deadline."""
    from slolab.sim import metrics

    first, decode = metrics.tdg_request_weights(instance)
    ideal = first + decode * (instance.workload.output_tokens - 1)
    earned = np.zeros(len(ideal))
    per_token = metrics.token_weights(instance)
    on_time = metrics.on_time_tokens(instance, outcome)
    owner = np.repeat(np.arange(len(ideal)), instance.workload.output_tokens)
    np.add.at(earned, owner[on_time], per_token[on_time])
    return ideal - earned


def _lost_per_iteration(instance: Instance, outcome: Outcome) -> np.ndarray:
    """Per iteration of a one-server run (in start order), the TDG weight of the tokens it
    emitted after their deadline."""
    from slolab.sim import metrics

    ends = np.sort(np.asarray(outcome.it_end))
    times = np.asarray(outcome.token_times)
    late = ~metrics.on_time_tokens(instance, outcome) & np.isfinite(times)
    lost = np.zeros(len(ends))
    where = np.searchsorted(ends, times[late])
    np.add.at(lost, np.minimum(where, len(ends) - 1), metrics.token_weights(instance)[late])
    return lost


def slice_search(
    instance: Instance,
    outcome: Outcome,
    *,
    seed: int,
    time_limit: float,
    slice_iterations: tuple[int, int] = SLICE_ITERATIONS,
    call_limit_s: float = SLICE_CALL_LIMIT_S,
    max_slices: int | None = None,
    quiet: bool = False,
) -> tuple[Outcome, SliceReport]:
    """Exact slice moves on a one-server run: re-plan a slice of its iterations optimally with
    the rest fixed (:class:`slolab.models.tdg_slice.TdgSlice`), keep it when the TDG rises.

    Each step draws an iteration with probability proportional to the gain its late tokens
    lose, a length ``K`` in ``slice_iterations`` and a slice of ``K`` consecutive iterations
    holding the drawn one; slices already tried on the incumbent are not solved again. A
    slice whose MILP is not proved OPTIMAL within ``call_limit_s`` is not used. The incumbent
    is always a run of the engine (the replay of the spliced schedule), so its value is the
    replay's and it never falls. The loop is :class:`slolab.solvers.search.Search`: Ctrl-C,
    in a slice's MILP too, ends it with the incumbent so far, which the driver replays once
    more to check its TDG.

    Parameters
    ----------
    instance : Instance
        A ``tdg-horizon`` window.
    outcome : Outcome
        The run to improve (iteration log, no preemptions).
    seed : int
        Seed of the slice draws (same seed and slices, same result).
    time_limit : float
        Seconds; checked between slices (a slice takes at most about ``call_limit_s``).
    slice_iterations : (int, int)
        Least and most iterations per slice.
    call_limit_s : float
        Seconds per slice MILP.
    max_slices : int, optional
        Stop after this many slices drawn (as well as at the time limit).
    quiet : bool
        No progress bar (otherwise one on a terminal's stderr).
    """
    from slolab.models.tdg_slice import TdgSlice
    from slolab.sim import metrics, replay
    from slolab.solvers import Status, solve

    least, most = slice_iterations
    if not 1 <= least <= most:
        raise ValueError(f"slice_iterations must be 1 <= least <= most, got {slice_iterations}")
    rng = np.random.default_rng(seed)
    start_value = metrics.tdg(instance, outcome)
    lost = _lost_per_iteration(instance, outcome)
    tried: set[tuple[int, int]] = set()
    solved = optimal = repeats = 0

    def step(search: Search[Outcome]) -> None:
        nonlocal lost, solved, optimal, repeats
        if lost.sum() <= LOST_GAIN_EPS or repeats >= SLICE_MAX_REPEATS:
            raise Exhausted
        current = search.incumbent
        assert current is not None
        n_its = len(lost)
        centre = int(rng.choice(n_its, p=lost / lost.sum()))
        size = min(int(rng.integers(least, most + 1)), n_its)
        first = int(np.clip(centre - rng.integers(0, size), 0, n_its - size))
        if (first, first + size) in tried:
            repeats += 1
            return
        repeats = 0
        tried.add((first, first + size))
        model = TdgSlice(instance, current, first, first + size)
        if model.slice_weight - model.run_gain <= SLICE_GAIN_EPS:
            return
        solved += 1
        result = solve(model, "highs", time_limit=call_limit_s)
        gain = result.objective
        if result.status != Status.OPTIMAL or result.schedule is None or gain is None:
            return
        optimal += 1
        if gain <= model.run_gain + SLICE_GAIN_EPS:  # the replayed slice's gain (evaluated exactly)
            return
        candidate = replay(instance, result.schedule)
        new_value = metrics.tdg(instance, candidate)
        if improves(new_value, search.objective):
            search.keep(candidate, new_value)
            lost = _lost_per_iteration(instance, candidate)
            tried.clear()

    slicing: Search[Outcome] = Search(
        FirstOf(
            MaxRuntime(time_limit), MaxIterations(max_slices) if max_slices is not None else None
        ),
        desc="slices",
        objective_name="TDG",
        quiet=quiet,
        replay=lambda run: _replayed_tdg(instance, run),
    )
    found = slicing.run(outcome, start_value, step)
    report = found.extended(
        SliceReport,
        objective=float(found.objective),
        start_objective=float(start_value),
        starts_tried=1,
        slices=solved,
        optimal=optimal,
    )
    return found.incumbent, report


@dataclass(frozen=True, slots=True)
class MasterStep:
    """What :func:`master_step` did: the integer master's value and dual bound (over the
    generated columns and the runs' own), the candidates simulated, and the kept one's name
    (empty when none raised the TDG)."""

    value: float
    bound: float
    candidates: int
    kept: str


def master_steerings(
    instance: Instance, kept: np.ndarray, given_up: np.ndarray, completion_s: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Steerings (priority and TTFT factors, the policy's view only) from the integer master's
    plan: ``give-up`` (the first tokens it gives up get :data:`GIVE_UP_TTFT_FACTOR`),
    ``planned`` (also: each kept first token's TTFT cut to the end of its planned completion
    bucket, factor at least the least of :data:`TTFT_FACTORS`) and ``kept-first`` (also: kept
    requests' priority times :data:`KEPT_PRIORITY_FACTOR`). ``kept``, ``given_up``: masks over
    the requests (neither: no plan for it, factor 1); ``completion_s``: planned first-token
    bucket ends (s)."""
    wl = instance.workload
    n = instance.n_requests
    ttft = np.ones(n)
    ttft[given_up] = GIVE_UP_TTFT_FACTOR
    planned = ttft.copy()
    slo = np.asarray(wl["ttft_slo_s"], dtype=float)
    room = (completion_s - np.asarray(wl.arrival_s, dtype=float)) / slo
    planned[kept] = np.clip(room[kept], min(TTFT_FACTORS), 1.0)
    priority = np.ones(n)
    priority[kept] = KEPT_PRIORITY_FACTOR
    return {
        "give-up": (np.ones(n), ttft),
        "planned": (np.ones(n), planned),
        "kept-first": (priority, ttft),
    }


def master_step(
    instance: Instance,
    runs: list[tuple[tuple[str, Outcome], float]],
    incumbent: tuple[str, Outcome, np.ndarray, np.ndarray, float],
    *,
    seed: int,
    time_limit: float,
) -> tuple[tuple[Outcome, float] | None, MasterStep]:
    """Steer the best start policies by the integer restricted master's plan.

    Price and branch (:meth:`slolab.models.tdg_columns.TdgHorizonColumns.integer_master`,
    HiGHS, ``time_limit`` seconds, :data:`MASTER_MIP_SHARE` of them for the MILP) over the generated columns and the columns of every start
    run and of the incumbent (so the MILP recombines them request by request); its choice of
    kept and given-up first tokens and their completion buckets gives three steerings
    (:func:`master_steerings`), each simulated with the :data:`MASTER_POLICIES` best start
    policies unsteered and with the incumbent's policy on top of its own factors. Every
    candidate is a run of the engine, its value the run's TDG. Returns the best candidate
    (run, TDG) when it beats the incumbent's TDG (:func:`slolab.solvers.search.improves`),
    else None, and what was done.

    ``incumbent``: (policy, run, priority factors, TTFT factors, TDG).
    """
    from slolab.models.tdg_columns import TdgHorizonColumns
    from slolab.solvers.registry import get_backend

    policy, out, priority, ttft, value = incumbent
    model = TdgHorizonColumns(instance)
    backend = get_backend("highs")(threads=1, seed=seed, log=False)
    plan = model.integer_master(
        backend, time_limit, runs=[o for (_, o), _ in runs], start=out, mip_share=MASTER_MIP_SHARE
    )
    if not plan.columns:
        return None, MasterStep(plan.value, plan.mip_bound, 0, "")
    n = instance.n_requests
    kept, given_up = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    completion = np.full(n, math.inf)
    for r, column in plan.columns.items():
        kept[r] = model.first_token_kept(column)
        given_up[r] = not kept[r]
        completion[r] = model.completion_s(column)
    steerings = master_steerings(instance, kept, given_up, completion)
    ranked = [p for (p, _), _ in sorted(runs, key=lambda run: -run[1])][:MASTER_POLICIES]
    candidates = [
        (f"{p} {name}", p, factors) for p in ranked for name, factors in steerings.items()
    ] + [
        (f"{policy} steered {name}", policy, (priority * f_p, ttft * f_t))
        for name, (f_p, f_t) in steerings.items()
    ]
    best: tuple[Outcome, float] | None = None
    kept_name = ""
    for name, p, (f_p, f_t) in candidates:
        got, run = _run(instance, p, _steered(instance, f_p, f_t), seed)
        if improves(got, value if best is None else best[1]):
            best, kept_name = (run, got), name
    return best, MasterStep(plan.value, plan.mip_bound, len(candidates), kept_name)


def steered_search(
    instance: Instance,
    *,
    seed: int,
    time_limit: float = 60.0,
    window: int = 4,
    max_steps: int | None = None,
    quiet: bool = False,
    slice_after: int | None = None,
    master_limit: float | None = None,
) -> tuple[Schedule, SearchReport]:
    """Best steering of an online policy found within ``time_limit`` seconds.

    Parameters
    ----------
    instance : Instance
        A ``tdg-horizon`` window.
    seed : int
        Seed of the neighbourhood draws (same seed and steps, same result).
    time_limit : float
        Seconds; checked between simulations (the first start policy always runs), so the
        search ends within one simulation of it. Ctrl-C stops it too, keeping the incumbent.
    window : int
        Requests freed per step.
    max_steps : int, optional
        Stop after this many steps (as well as at the time limit).
    quiet : bool
        No progress bar (otherwise one on a terminal's stderr: elapsed seconds, incumbent TDG).
    slice_after : int, optional
        Once this many steering steps in a row fail to raise the TDG, the rest of the time
        goes to exact slice moves (:func:`slice_search`) on the steering's incumbent. None
        (the default): steering only.
    master_limit : float, optional
        Seconds for a price-and-branch step after the steering (:func:`master_step`): the
        steering stops ``master_limit`` seconds before ``time_limit``, the integer master's
        plan steers the best start policies, and the best such run replaces the incumbent
        when its TDG is higher (the slice moves, when on, then start from it). None (the
        default): no such step.

    Returns
    -------
    (Schedule, SearchReport)
        The incumbent's run as a Schedule (replays to the same TDG) and what the search did.
    """
    from slolab.sim.schedule import Schedule

    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be > 0 s, got {time_limit}")
    if slice_after is not None and slice_after < 1:
        raise ValueError(f"slice_after must be >= 1 (or None), got {slice_after}")
    if master_limit is not None and not 0 < master_limit < time_limit:
        raise ValueError(
            f"master_limit must be > 0 s and below time_limit ({time_limit}), got {master_limit}"
        )
    steer_limit = time_limit - (master_limit or 0.0)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    n = instance.n_requests
    runs: list[tuple[tuple[str, Outcome], float]] = []
    with interruptible("lns") as stopped:
        for policy in TDG_HORIZON_STARTS.tried(
            START_POLICIES, lambda: time.perf_counter() - start >= time_limit
        ):
            value, out = _run(instance, policy, instance, seed)
            runs.append(((policy, out), value))
    if not runs:
        raise KeyboardInterrupt
    (best_policy, best_out), best_value = best_of(runs)
    start_value = best_value
    lost = _lost_gain(instance, best_out)

    def step(search: Search[tuple[Outcome, np.ndarray, np.ndarray]]) -> None:
        nonlocal lost
        if lost.sum() <= LOST_GAIN_EPS:
            raise Exhausted
        assert search.incumbent is not None
        _, priority, ttft = search.incumbent
        centre = int(rng.choice(n, p=lost / lost.sum()))
        lo = int(np.clip(centre - rng.integers(0, window), 0, max(n - window, 0)))
        freed = np.arange(lo, min(lo + window, n))
        cand_p, cand_t = priority.copy(), ttft.copy()
        cand_p[freed] = rng.choice(PRIORITY_FACTORS, size=len(freed))
        cand_t[freed] = rng.choice(TTFT_FACTORS, size=len(freed))
        value, out = _run(instance, best_policy, _steered(instance, cand_p, cand_t), seed)
        if improves(value, search.objective):
            search.keep((out, cand_p, cand_t), value, f"{best_policy} steered")
            lost = _lost_gain(instance, out)

    ones = np.ones(n)
    steering: Search[tuple[Outcome, np.ndarray, np.ndarray]] = Search(
        FirstOf(
            MaxRuntime(steer_limit),
            MaxIterations(max_steps) if max_steps is not None else None,
            NoImprovement(slice_after) if slice_after is not None else None,
        ),
        desc="lns",
        objective_name="TDG",
        quiet=quiet,
        started=start,
        replay=lambda steered: _replayed_tdg(instance, steered[0]),
    )
    steering.note = best_policy
    if stopped:
        found = steering.interrupted_before((best_out, ones, ones), best_value)
    else:
        found = steering.run((best_out, ones.copy(), ones.copy()), best_value, step)
    best_out, best_value = found.incumbent[0], found.objective
    mastered: MasterStep | None = None
    master_stopped = False
    if master_limit is not None and not found.interrupted:
        better = None
        with interruptible("lns") as stopped:
            better, mastered = master_step(
                instance,
                runs,
                (best_policy, best_out, *found.incumbent[1:], best_value),
                seed=seed,
                time_limit=master_limit,
            )
        master_stopped = bool(stopped)
        if better is not None:
            best_out, best_value = better
    sliced: SliceReport | None = None
    if (
        slice_after is not None
        and not found.interrupted
        and not master_stopped
        and time.perf_counter() - start < time_limit
    ):
        best_out, sliced = slice_search(
            instance,
            best_out,
            seed=seed,
            time_limit=time_limit - (time.perf_counter() - start),
            quiet=quiet,
        )
        best_value = sliced.tdg
    report = found.extended(
        SearchReport,
        incumbent=Schedule.from_outcome(best_out),
        objective=float(best_value),
        start=best_policy,
        start_objective=float(start_value),
        starts_tried=len(runs),
        wall_s=time.perf_counter() - start,
        interrupted=found.interrupted
        or master_stopped
        or (sliced is not None and sliced.interrupted),
        slices=sliced.slices if sliced else 0,
        slices_optimal=sliced.optimal if sliced else 0,
        slice_improvements=sliced.improvements if sliced else 0,
        steered_tdg=float(found.objective),
        master_tdg=mastered.value if mastered else math.nan,
        master_bound=mastered.bound if mastered else math.nan,
        master_candidates=mastered.candidates if mastered else 0,
        master_kept=mastered.kept if mastered else "",
        stop_reason="interrupted"
        if master_stopped or (sliced is not None and sliced.interrupted)
        else found.stop_reason,
    )
    logger.info(
        "lns: %s from %.6g to %.6g in %d steps (%d improvements), %d slices (%d kept)",
        best_policy,
        start_value,
        best_value,
        report.steps,
        report.improvements,
        report.slices,
        report.slice_improvements,
    )
    return report.incumbent, report


def lns_schedule(
    instance: Instance, *, seed: int, time_limit: float = 60.0, quiet: bool = False
) -> Schedule:
    """The ``lns`` method of tdg-horizon: :func:`steered_search`'s schedule."""
    return steered_search(instance, seed=seed, time_limit=time_limit, quiet=quiet)[0]

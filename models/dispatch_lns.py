"""Large-neighbourhood search on dispatch-scale windows (``dispatch-lns``, method ``lns``).

The primal side of the trace-scale interval. It starts from the best online policy's run
(HyperFlexis's dispatcher with and without its scaler, round robin, and two greedy starts),
each written as a decision over worker lives (the initial workers and each switch-on) and
replayed with the same iterations, each started as early as the engine starts it, every
worker leaving when its last iteration ends; then it improves it by moves until the time
limit:

- relocate one request (or the one whose last token ends its worker) to another worker, a
  used one or a new life switched on at the latest slot ready by its arrival;
- move every request arriving in a short time span to one worker;
- close a worker, its requests spread over the others;
- rebuild one worker's iterations;
- switch a new worker on up to two slots later or earlier.

A changed worker's iterations are rebuilt by :func:`greedy_worker`. Given the routing and a
worker's ready time the workers are independent, so a move re-times only the workers it
changes. Moves are kept when they raise ``J`` and keep at most ``max_servers`` workers on at
once; the incumbent is replayed by the engine at the end and its objective is the replay's.
The model also carries the relaxation bound of :mod:`slolab.models.dispatch_bounds` (HiGHS, at
most a quarter of the time limit), so its Result is an interval ``[incumbent, bound]``.

References
----------
HyperFlexis, Sec. 3 (the joint decision) and Sec. 6 (scaling slots, start-up delays).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.dispatch_scale import (
    Composition,
    DispatchScale,
    ScaleDecision,
    ScaleWindow,
    _timeline,
    decision_schedule,
)
from slolab.sim.metrics import ON_TIME_TOLERANCE_S
from slolab.solvers.backend import Backend
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.registry import register_model

__all__ = ["DispatchLns", "LnsResult", "greedy_worker", "lns", "online_decision"]

logger = logging.getLogger("slolab")

#: Online heuristics the search may start from (the best replayed one is the start).
START_POLICIES = ("hyperflexis", "round-robin", "hyperflexis-scaling")
#: Share of the time limit the bound may take inside ``dispatch-lns``.
BOUND_SHARE = 0.25
#: Seconds between two progress updates on stderr.
PROGRESS_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class LnsResult:
    """What the search found: its decision, the replayed objective, where it started."""

    decision: ScaleDecision
    objective: float
    start_policy: str
    start_objective: float
    moves_tried: int
    moves_kept: int
    interrupted: bool
    runtime_s: float


@dataclass
class _Worker:
    members: tuple[int, ...]
    slot: int | None  # None: an initial worker
    comps: tuple[Composition, ...]
    met: int
    end_s: float


def greedy_worker(
    data: ScaleWindow, members: Sequence[int], ready_s: float
) -> tuple[tuple[Composition, ...], int, float]:
    """Iterations of one worker serving ``members`` from ``ready_s``, with the requests they
    meet and the end of the last one.

    Every iteration decodes every running request (within the batch cap) and prefills, in
    first-token-deadline order, the arrived prompts that can still meet that deadline while
    the iteration ends before the next token of every on-time running request is due (a
    worker with nothing running takes the first such prompt whatever its length). Prompts
    already late are prefilled in iterations that take no on-time prompt."""
    v = data.view
    tol = ON_TIME_TOLERANCE_S
    order = sorted(members, key=lambda r: (float(data.arrival_s[r]), r))
    arrival = {r: float(data.arrival_s[r]) for r in order}
    # the metrics' deadline, arrival + TTFT + (k - 1) TPOT, with its tolerance
    first_due = {r: arrival[r] + float(data.ttft_s[r]) for r in order}
    tpot = {r: float(data.tpot_s[r]) for r in order}
    prompt = {r: int(data.prompt[r]) for r in order}
    output = {r: int(data.output[r]) for r in order}
    alone = {r: v.any_s + v.prefill_s + v.prefill_part_s(prompt[r]) for r in order}
    generated = dict.fromkeys(order, 0)
    nxt = 0
    pending: list[int] = []
    running: list[int] = []
    late: set[int] = set()
    comps: list[Composition] = []
    t = ready_s
    cap = data.max_batch_size
    while nxt < len(order) or pending or running:
        while nxt < len(order) and arrival[order[nxt]] <= t + 1e-12:
            pending.append(order[nxt])
            nxt += 1
        if not pending and not running:
            t = max(t, arrival[order[nxt]])
            continue
        decode = running[:cap]
        ctx = [(r, prompt[r] + generated[r]) for r in decode]
        limit = min(
            (first_due[r] + generated[r] * tpot[r] + tol for r in decode if r not in late),
            default=math.inf,
        )
        viable = sorted(
            (r for r in pending if t + alone[r] <= first_due[r] + tol),
            key=lambda r: (first_due[r], r),
        )
        chosen = viable or pending
        prefill: list[int] = []
        tokens = len(decode)
        for r in chosen:
            if len(prefill) + len(decode) >= cap:
                break
            if data.max_batch_tokens and tokens + prompt[r] > data.max_batch_tokens:
                continue
            end = t + data.iteration_s([*prefill, r], ctx)
            if decode and end > limit:
                continue
            if viable and any(end > first_due[q] + tol for q in (*prefill, r)):
                continue
            prefill.append(r)
            tokens += prompt[r]
        if not prefill and not decode:
            prefill = [chosen[0]]
        t = t + data.iteration_s(prefill, ctx)
        for r in decode:
            generated[r] += 1
            if t > first_due[r] + (generated[r] - 1) * tpot[r] + tol:
                late.add(r)
        for r in prefill:
            generated[r] = 1
            pending.remove(r)
            if t > first_due[r] + tol:
                late.add(r)
        running = [r for r in running if generated[r] < output[r]]
        running += [r for r in prefill if output[r] > 1]
        comps.append((tuple(sorted(prefill)), tuple(sorted(decode))))
    return tuple(comps), len(order) - len(late), t


def _score(data: ScaleWindow, comps: Sequence[Composition], ready_s: float) -> tuple[int, float]:
    """``(requests met, end of the last iteration)`` of a worker's iterations from ``ready_s``."""
    if not comps:
        return 0, ready_s
    ends = _timeline(data, comps, ready_s)
    emitted: dict[int, int] = {}
    late: set[int] = set()
    for (prefill, decode), end in zip(comps, ends, strict=True):
        for r in (*prefill, *decode):
            token = emitted.get(r, 0) + 1
            emitted[r] = token
            if end > data.deadline_s(r, token) + ON_TIME_TOLERANCE_S:
                late.add(r)
    met = sum(1 for r, k in emitted.items() if k == int(data.output[r]) and r not in late)
    return met, ends[-1]


class _State:
    """Workers of a decision with their scores; ``J`` summed per worker."""

    def __init__(self, data: ScaleWindow, workers: list[_Worker]) -> None:
        self.d = data
        self.workers = workers

    def on_s(self, w: _Worker) -> float:
        return 0.0 if w.slot is None else self.d.slot_time_s(w.slot)

    def ready_s(self, w: _Worker) -> float:
        return 0.0 if w.slot is None else self.d.slot_time_s(w.slot) + self.d.startup_s

    def value(self, w: _Worker) -> float:
        if not w.members:
            return 0.0
        return w.met / self.d.n - self.d.cost_weight * (w.end_s - self.on_s(w))

    def total(self) -> float:
        return math.fsum(self.value(w) for w in self.workers)

    def rebuilt(self, w: _Worker, members: Sequence[int], slot: int | None) -> _Worker:
        out = _Worker(tuple(sorted(members)), slot, (), 0, 0.0)
        ready = self.ready_s(out)
        out.comps, out.met, out.end_s = greedy_worker(self.d, out.members, ready)
        return out

    def retimed(self, w: _Worker, slot: int) -> _Worker:
        out = _Worker(w.members, slot, w.comps, 0, 0.0)
        out.met, out.end_s = _score(self.d, out.comps, self.ready_s(out))
        return out

    def decision(self) -> ScaleDecision:
        """The decision over worker lives: the initial workers, then every used new one by
        switch-on slot (index order of :func:`lives_window`)."""
        d = self.d
        n0 = d.initial_servers
        initial = [w for w in self.workers if w.slot is None]
        new = sorted(
            (w for w in self.workers if w.slot is not None and w.members),
            key=lambda w: w.slot if w.slot is not None else 0,
        )
        ordered = initial + new
        routing = [0] * d.n
        slots: list[int | None] = [None] * len(ordered)
        its: list[tuple[Composition, ...]] = [()] * len(ordered)
        for idx, w in enumerate(ordered):
            for r in w.members:
                routing[r] = idx
            its[idx] = w.comps
            if idx >= n0:
                slots[idx] = w.slot
        return ScaleDecision(tuple(routing), tuple(slots), tuple(its))

    def concurrency(self, workers: Sequence[_Worker]) -> int:
        """Most of ``workers`` on at once (each from its switch-on to its last iteration's
        end; an unused one never)."""
        events = []
        for w in workers:
            if w.members:
                events += [(self.on_s(w), 1), (w.end_s, -1)]
        events.sort(key=lambda e: (e[0], e[1]))
        most = level = 0
        for _, step in events:
            level += step
            most = max(most, level)
        return most


def lives_window(data: ScaleWindow, decision: ScaleDecision) -> ScaleWindow:
    """``data`` with room for every worker life of ``decision`` (the initial workers and each
    switch-on), so :func:`decision_schedule` replays it."""
    return dataclasses.replace(data, max_servers=max(len(decision.iterations), data.max_servers))


def online_decision(
    data: ScaleWindow, instance: Instance, policy: str, *, seed: int
) -> ScaleDecision | None:
    """The run of online heuristic ``policy`` as a decision over worker lives (its routing,
    each switch-on's slot and every life's iterations), or None when the run cannot be written
    so (a prompt prefilled in chunks, a preemption, a worker switched on off the slot grid)."""
    from slolab.heuristics.hyperflexis import online_setup
    from slolab.heuristics.policies import Scheduler

    made = Scheduler.of(online_setup(policy, instance))
    if made.on(instance) is not instance:
        return None
    out = made.run(instance, seed=seed)
    if len(out.entry_offsets) <= 1 or int(np.asarray(out.preemptions).sum()):
        return None
    servers = len(out.busy_s)
    n0 = data.initial_servers
    on_s = out.server_on_s if out.server_on_s is not None else np.zeros(servers)
    slots: list[int | None] = [None] * max(servers, data.max_servers)
    for s in range(n0, servers):
        slot = float(on_s[s]) / data.slot_s
        if not math.isfinite(slot) or abs(slot - round(slot)) > 1e-6:
            return None
        slots[s] = int(round(slot))
    its: list[list[Composition]] = [[] for _ in range(len(slots))]
    order = np.lexsort((np.asarray(out.it_start), np.asarray(out.it_server)))
    for i in order.tolist():
        a, b = int(out.entry_offsets[i]), int(out.entry_offsets[i + 1])
        prefill, decode = [], []
        for e in range(a, b):
            r, phase = int(out.entry_request[e]), int(out.entry_phase[e])
            if phase == 0 and int(out.entry_tokens[e]) == int(data.prompt[r]):
                prefill.append(r)
            elif phase == 1:
                decode.append(r)
            else:
                return None
        its[int(out.it_server[i])].append((tuple(sorted(prefill)), tuple(sorted(decode))))
    routing = tuple(int(s) for s in out.server)
    if any(not 0 <= s < servers for s in routing):
        return None
    return ScaleDecision(routing, tuple(slots), tuple(tuple(c) for c in its))


def _state_of(data: ScaleWindow, decision: ScaleDecision) -> _State:
    workers = []
    for w in range(len(decision.iterations)):
        members = tuple(r for r in range(data.n) if decision.routing[r] == w)
        slot = None if w < data.initial_servers else decision.on_slot[w]
        if w >= data.initial_servers and slot is None:
            if members:
                raise ValueError(f"worker {w} serves requests but is never switched on")
            slot = 0
        worker = _Worker(members, slot, decision.iterations[w], 0, 0.0)
        ready = 0.0 if slot is None else data.slot_time_s(slot) + data.startup_s
        worker.met, worker.end_s = _score(data, worker.comps, ready)
        workers.append(worker)
    return _State(data, workers)


def _replayed(instance: Instance, data: ScaleWindow, decision: ScaleDecision) -> float:
    return DispatchScale(instance).evaluate(
        decision_schedule(lives_window(data, decision), decision)
    )


def lns(
    instance: Instance,
    *,
    seed: int,
    time_limit: float = 60.0,
    starts: Sequence[str] = START_POLICIES,
    progress: bool | None = None,
) -> LnsResult:
    """Large-neighbourhood search from the best online run (see the module docstring).

    Parameters
    ----------
    instance : Instance
        A ``dispatch-scale`` window.
    seed : int
        Seed of the moves.
    time_limit : float
        Seconds for the whole search (the start runs included); honoured between moves.
    starts : sequence of str
        Online heuristics to start from (their replayed decisions; the greedy worker scheduler
        on a round-robin routing is always a candidate).
    progress : bool, optional
        Progress line on stderr (default: when stderr is a terminal).

    Returns
    -------
    LnsResult
        The incumbent (its objective replayed by the engine); on Ctrl-C the incumbent so far,
        ``interrupted`` True.
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    stop = t0 + time_limit
    data = ScaleWindow.of(instance)
    rng = np.random.default_rng(seed)
    n0, W = data.initial_servers, data.max_servers
    candidates: list[tuple[str, _State]] = []
    rr = tuple(r % n0 for r in range(data.n))
    empty: list[tuple[Composition, ...]] = [()] * W
    greedy = _state_of(data, ScaleDecision(rr, (None,) * W, tuple(empty)))
    greedy.workers = [greedy.rebuilt(w, w.members, w.slot) for w in greedy.workers]
    one = _state_of(data, ScaleDecision((0,) * data.n, (None,) * W, tuple(empty)))
    one.workers = [one.rebuilt(w, w.members, w.slot) for w in one.workers]
    candidates.append(("greedy-one-worker", one))
    candidates.append(("greedy-round-robin", greedy))
    interrupted = False
    try:
        for name in starts:
            if time.perf_counter() > stop:
                break
            decision = online_decision(data, instance, name, seed=seed)
            if decision is not None:
                candidates.append((name, _state_of(data, decision)))
    except KeyboardInterrupt:
        interrupted = True
    start_name, state = max(candidates, key=lambda c: c[1].total())
    start_value = _replayed(instance, data, state.decision())
    best = state.total()
    tried = kept = 0
    bar = tqdm(
        total=round(time_limit, 1),
        unit="s",
        desc=f"lns {instance.name}",
        disable=(not sys.stderr.isatty()) if progress is None else not progress,
        leave=False,
    )
    shown = time.perf_counter()
    try:
        while not interrupted and time.perf_counter() < stop:
            tried += 1
            change = _move(state, rng)
            if change is None:
                continue
            idx, new_workers = change
            before = math.fsum(state.value(state.workers[i]) for i in idx if i < len(state.workers))
            after = math.fsum(state.value(w) for w in new_workers)
            if after > before + 1e-12:
                changed = dict(zip(idx, new_workers, strict=True))
                trial = [changed.get(i, w) for i, w in enumerate(state.workers)]
                trial += [w for i, w in changed.items() if i >= len(state.workers)]
                if state.concurrency(trial) > W:
                    continue
                # drop new lives left empty
                state.workers = [w for w in trial if w.slot is None or w.members]
                best = state.total()
                kept += 1
            now = time.perf_counter()
            if now - shown >= PROGRESS_EVERY_S:
                bar.update(round(now - shown, 1))
                bar.set_postfix(J=f"{best:.4f}", kept=kept)
                shown = now
    except KeyboardInterrupt:
        interrupted = True
        logger.warning("lns interrupted: keeping the incumbent J = %.6f", best)
    finally:
        bar.close()
    decision = state.decision()
    value = _replayed(instance, data, decision)
    if abs(value - best) > 1e-6:
        logger.warning("lns: search value %.9g, replayed %.9g (the replay counts)", best, value)
    return LnsResult(
        decision=decision,
        objective=value,
        start_policy=start_name,
        start_objective=start_value,
        moves_tried=tried,
        moves_kept=kept,
        interrupted=interrupted,
        runtime_s=time.perf_counter() - t0,
    )


def _move(state: _State, rng: np.random.Generator) -> tuple[list[int], list[_Worker]] | None:
    """One random move: indices of the workers it changes and their new versions."""
    d = state.d
    workers = state.workers
    used = [i for i, w in enumerate(workers) if w.members]
    kind = int(rng.integers(0, 6))
    if kind == 4:  # rebuild one worker's iterations
        if not used:
            return None
        i = int(rng.choice(used))
        return [i], [state.rebuilt(workers[i], workers[i].members, workers[i].slot)]
    if kind in (0, 5):  # relocate one request (5: the one whose last token ends its worker)
        if kind == 5 and used:
            src = int(rng.choice(used))
            r = _last_finisher(d, workers[src])
        else:
            r = int(rng.integers(0, d.n))
            src = next(i for i, w in enumerate(workers) if r in w.members)
        dst = int(rng.integers(0, len(workers) + 1))
        if dst == src:
            return None
        target = _target(state, dst, float(d.arrival_s[r]))
        a = state.rebuilt(
            workers[src], [x for x in workers[src].members if x != r], workers[src].slot
        )
        b = state.rebuilt(target, [*target.members, r], target.slot)
        return [src, dst], [a, b]
    if kind == 1:  # a span of arrivals to one worker
        r = int(rng.integers(0, d.n))
        span = float(rng.exponential(2.0 * d.slot_s))
        a0 = float(d.arrival_s[r])
        moved = [x for x in range(d.n) if a0 <= float(d.arrival_s[x]) <= a0 + span]
        dst = int(rng.integers(0, len(workers) + 1))
        target = _target(state, dst, a0)
        idx = sorted({dst} | {i for i, w in enumerate(workers) if set(w.members) & set(moved)})
        out = []
        for i in idx:
            w = target if i == dst else workers[i]
            keep = [x for x in w.members if x not in moved]
            out.append(state.rebuilt(w, keep + moved if i == dst else keep, w.slot))
        return idx, out
    if kind == 2:  # close a worker
        if len(used) < 2:
            return None
        src = int(rng.choice(used))
        others = [i for i in used if i != src]
        share: dict[int, list[int]] = {i: list(workers[i].members) for i in others}
        for k, r in enumerate(workers[src].members):
            share[others[k % len(others)]].append(r)
        idx = [src, *others]
        out = [state.rebuilt(workers[src], [], workers[src].slot)]
        out += [state.rebuilt(workers[i], share[i], workers[i].slot) for i in others]
        return idx, out
    # shift a new worker's switch-on
    new = [i for i in used if workers[i].slot is not None]
    if not new:
        return None
    i = int(rng.choice(new))
    slot = workers[i].slot
    assert slot is not None
    shifted = slot + int(rng.choice([-2, -1, 1, 2]))
    if not 0 <= shifted < d.slots:
        return None
    return [i], [state.retimed(workers[i], shifted)]


def _target(state: _State, dst: int, arrival_s: float) -> _Worker:
    """Worker ``dst``, or a new life (``dst`` past the list) switched on at the latest slot
    whose worker is ready by ``arrival_s``; an unused new worker takes that slot too."""
    if dst < len(state.workers):
        w = state.workers[dst]
        if w.slot is None or w.members:
            return w
    return _Worker((), _slot_before(state.d, arrival_s), (), 0, 0.0)


def _last_finisher(d: ScaleWindow, w: _Worker) -> int:
    """The request of worker ``w`` whose last token is emitted last (its iterations' order)."""
    for prefill, decode in reversed(w.comps):
        for r in (*decode, *prefill):
            return r
    return w.members[-1]


def _slot_before(d: ScaleWindow, t: float) -> int:
    """The latest slot whose worker is ready by ``t`` (slot 0 when none is)."""
    return max(int(math.floor((t - d.startup_s) / d.slot_s + 1e-9)), 0)


@register_model("dispatch-lns")
class DispatchLns(ExactModel):
    """:func:`lns` with the relaxation bound of :mod:`slolab.models.dispatch_bounds` (method
    ``lns``): a certified interval ``[incumbent, bound]``; OPTIMAL only when they meet."""

    sense = "max"

    def __init__(self, instance: Instance, *, buckets: int | None = None) -> None:
        super().__init__(instance)
        self.data = ScaleWindow.of(instance)
        self.buckets = buckets

    def supports(self) -> frozenset[str]:
        """HiGHS (the bound, through SciPy's ``milp``); the search itself is in Python."""
        return frozenset({"milp"})

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        from slolab.models.dispatch_bounds import DEFAULT_BUCKETS, relaxation_bound

        if backend.name != "highs":
            raise ValueError(f"model 'dispatch-lns' runs on highs only, got {backend.name!r}")
        start = time.perf_counter()
        bound = relaxation_bound(
            self.instance,
            buckets=self.buckets or DEFAULT_BUCKETS,
            time_limit=BOUND_SHARE * time_limit,
            threads=backend.threads,
        )
        left = max(time_limit - (time.perf_counter() - start), 0.0)
        found = lns(self.instance, seed=backend.seed, time_limit=left)
        if found.objective > bound.bound + 1e-6 * max(1.0, abs(bound.bound)):
            raise RuntimeError(
                f"dispatch-lns on {self.instance.name}: the replayed incumbent "
                f"{found.objective!r} beats the relaxation bound {bound.bound!r}"
            )
        upper = max(bound.bound, found.objective)
        reached = found.objective >= upper - 1e-9 * max(1.0, abs(upper))
        return Result(
            status=Status.OPTIMAL if reached else Status.FEASIBLE,
            objective=found.objective,
            bound=upper,
            runtime_s=time.perf_counter() - start,
            backend="highs",
            model="dispatch-lns",
            sense="max",
            schedule=decision_schedule(lives_window(self.data, found.decision), found.decision),
            details={
                "start_policy": found.start_policy,
                "start_objective": found.start_objective,
                "moves_tried": found.moves_tried,
                "moves_kept": found.moves_kept,
                "interrupted": found.interrupted,
                "bound_status": bound.status,
                "ideal_bound": bound.ideal,
            },
        )

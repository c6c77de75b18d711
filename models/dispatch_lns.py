"""Large-neighbourhood search on dispatch-scale windows (``dispatch-lns``, method ``lns``).

The primal side of the trace-scale interval. It starts from the best of: an insertion
start (requests in arrival order, each to the worker or new worker life where ``J`` rises
most), pooled starts (every worker life pulling from one central queue in time order,
giving up prompts that would make others miss: :func:`_pooled_start`), the online policies'
runs (HyperFlexis's dispatcher with and without its scaler,
round robin: the runs are handed in by the problem's declaration, :data:`slolab.problems.
dispatch_scale.LNS_STARTS`, as this layer sits below the heuristics), each written as a decision over worker lives (the initial workers and each
switch-on) and replayed with the same iterations, each started as early as the engine
starts it, every worker leaving when its last iteration ends, and two greedy starts; then it
improves it by moves until the time limit:

- relocate one request (a missed one half the time, or the one whose last token ends its
  worker) to another worker, a used one or a new life switched on at the latest slot ready
  by its arrival;
- swap a missed request with the request of another worker that arrives closest to it;
- move every request arriving in a short time span to one worker;
- close a worker, its requests spread over the others;
- rebuild one worker's iterations;
- switch a new worker on up to two slots later or earlier;
- the exact sub-window move: a few requests of one or two worker lives in a span of
  iterations re-placed optimally, everything else kept (:func:`_exact_move`,
  :func:`slolab.models.dispatch_subwindow.solve_subwindow`; one after every
  :data:`EXACT_EVERY` other moves).

A changed worker's iterations are rebuilt by :func:`greedy_worker`. Given the routing and a
worker's ready time the workers are independent, so a move re-times only the workers it
changes, and each of those from its last saved state before the first request the move
adds or takes away (the passes before it are the same). Moves are kept when they raise
``J`` and keep at most ``max_servers`` workers on at once; the search driver replays the
incumbent by the engine at the end (its ``J`` must agree with the search's within the
incumbent rule's tolerance) and its objective is the replay's.
The model also carries the relaxation bound of :mod:`slolab.models.dispatch_bounds` (HiGHS, at
most a quarter of the time limit), so its Result is an interval ``[incumbent, bound]``.

References
----------
HyperFlexis, Sec. 3 (the joint decision) and Sec. 6 (scaling slots, start-up delays).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.dispatch_scale import (
    Composition,
    DispatchScale,
    ScaleDecision,
    ScaleWindow,
    decision_schedule,
    iteration_starts,
    worker_score,
)
from slolab.models.dispatch_subwindow import SubLife, solve_subwindow
from slolab.sim.metrics import ON_TIME_TOLERANCE_S
from slolab.solvers.backend import Backend
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.registry import register_model
from slolab.solvers.search import (
    DISPATCH_LNS_STARTS,
    Exhausted,
    FirstOf,
    MaxIterations,
    MaxRuntime,
    Search,
    SearchResult,
    best_of,
    improves,
    interruptible,
)

if TYPE_CHECKING:
    from slolab.sim.outcome import Outcome

__all__ = ["DispatchLns", "LnsResult", "StartRun", "greedy_worker", "lns", "online_decision"]


#: Online heuristics the search may start from (the best replayed one is the start); the
#: problem's declaration hands in their runs (:data:`StartRun`). Declared with its rule beside
#: tdg-horizon's (:data:`slolab.solvers.search.DISPATCH_LNS_STARTS`).
START_POLICIES = DISPATCH_LNS_STARTS.names
#: A start's run: ``run(instance, seed)`` simulates an online heuristic on the window and gives
#: its Outcome, or None when the heuristic would run a changed instance.
StartRun = Callable[[Instance, int], "Outcome | None"]
#: Share of the time limit the bound may take inside ``dispatch-lns``.
BOUND_SHARE = 0.25
#: Share of the time limit the insertion start may take (it is dropped when unfinished).
INSERTION_SHARE = 0.25
#: Variants of the pooled start tried: (decodes only when a token needs them, seconds of
#: arrivals the give-up rule looks ahead).
POOLED_VARIANTS = ((False, 0.0), (False, 0.5), (False, 1.0), (True, 0.0), (True, 0.5), (True, 1.0))
#: Share of the time left after the starts that the search on the pooled start's given-up
#: prompts may take (the moves take the rest).
POOLED_SEARCH_SHARE = 0.3
#: Other moves between two exact sub-window moves (:func:`_exact_move`). On the 500-request
#: Azure code window at high load, given half of the time each, the search made 930 other
#: moves and 358 exact ones in 200 s, so one in 3 keeps about that share. A count, not a
#: share of the time, so that a seeded search makes the same moves on any machine.
EXACT_EVERY = 3
#: Transitions one exact sub-window solve may make (it is dropped when unfinished): work,
#: not time, for the same reason; about 0.5 s at the 100,000 a second measured there.
EXACT_TRANSITIONS = 50_000
#: Most requests the exact sub-window move frees.
EXACT_FREED = 3
#: Most states the exact sub-window move's dynamic program may have, estimated as (kept
#: iterations + 1) x the product over freed requests of (output + 1).
EXACT_STATES = 2_000


@dataclass(frozen=True, slots=True)
class LnsResult(SearchResult[ScaleDecision]):
    """What the search found, as the driver's report (:class:`slolab.solvers.search.
    SearchResult`: its decision, the replayed objective, the moves kept (exact ones included),
    why it stopped, where it started and the starts tried), with the moves tried (exact ones
    apart) and the exact moves tried and kept."""

    moves_tried: int = 0
    exact_tried: int = 0
    exact_kept: int = 0

    @property
    def decision(self) -> ScaleDecision:
        return self.incumbent

    @property
    def moves_kept(self) -> int:
        return self.improvements


#: Passes of the greedy worker between two saved states (a rebuild resumes from the last one
#: before the first arrival it changes).
SNAPSHOT_EVERY = 8


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The greedy worker's state at the top of a pass: its clock, the latest arrival the
    passes before it read (the clock, or a next arrival they looked ahead to), how many
    members had been taken in, the waiting prompts (that may still meet their first token,
    and those that no longer can), the running requests, tokens emitted, the late requests
    and how many iterations were built."""

    t: float
    seen_s: float
    taken: int
    waiting: tuple[int, ...]
    hopeless: tuple[int, ...]
    running: tuple[int, ...]
    generated: tuple[tuple[int, int], ...]
    late: frozenset[int]
    built: int


@dataclass
class _Worker:
    members: tuple[int, ...]
    slot: int | None  # None: an initial worker
    comps: tuple[Composition, ...]
    met: int
    end_s: float
    late: frozenset[int] = frozenset()
    snaps: tuple[_Snapshot, ...] = ()


class _Tables:
    """Per-request numbers the greedy worker reads (lists: faster than array reads)."""

    def __init__(self, data: ScaleWindow) -> None:
        v = data.view
        self.arrival = [float(a) for a in data.arrival_s]
        self.first_due = [
            float(a) + float(d) for a, d in zip(data.arrival_s, data.ttft_s, strict=True)
        ]
        self.tpot = [float(x) for x in data.tpot_s]
        # whole prompts (the context a decode reads) and their uncached tokens (the prefill's)
        self.prompt = [int(x) for x in data.prompt]
        self.computed = [data.prefill_tokens(r) for r in range(data.n)]
        self.output = [int(x) for x in data.output]
        self.part = [data.prefill_part_s(r) for r in range(data.n)]
        # a prompt's iteration alone
        self.alone = [v.any_s + v.prefill_s + part for part in self.part]
        self.any_s, self.prefill_s, self.decode_s = v.any_s, v.prefill_s, v.decode_s
        self.decode_token_s, self.kv_s = v.decode_token_s, v.kv_s
        self.cap = data.max_batch_size
        self.max_batch_tokens = data.max_batch_tokens


def greedy_worker(
    data: ScaleWindow, members: Sequence[int], ready_s: float
) -> tuple[tuple[Composition, ...], int, float]:
    """Iterations of one worker serving ``members`` from ``ready_s``, with the requests they
    meet and the end of the last one.

    Every iteration decodes every running request (within the batch cap) and prefills, in
    first-token-deadline order, the arrived prompts that can still meet that deadline while
    the iteration ends before the next token of every on-time running request is due (a
    worker with nothing running takes the first such prompt whatever its length). Prompts
    already late are prefilled in iterations that take no on-time prompt and end by the next
    member's arrival (the worker idles until then when none fits; once no member is left to
    arrive, at any time)."""
    found = _greedy(_Tables(data), members, ready_s)
    return found.comps, found.met, found.end_s


def _greedy(
    tab: _Tables,
    members: Sequence[int],
    ready_s: float,
    slot: int | None = None,
    resume: tuple[_Worker, float] | None = None,
) -> _Worker:
    """:func:`greedy_worker` as a :class:`_Worker` with its saved states. ``resume``: a
    worker with the same ready time whose members differ from ``members`` only in requests
    arriving at or after the given time; its passes before then are the same (a pass reads
    only requests that arrived by its start and, at most, the next arrival after it), so the
    build resumes from its last saved state whose passes read no arrival at or after that
    time, and gives the same iterations as a build from the start."""
    tol = ON_TIME_TOLERANCE_S
    arrival, first_due, alone = tab.arrival, tab.first_due, tab.alone
    order = sorted(members, key=lambda r: (arrival[r], r))
    comps: list[Composition] = []
    snaps: list[_Snapshot] = []
    generated: dict[int, int] = {}
    waiting: list[int] = []  # arrived prompts that may still meet their first token
    hopeless: list[int] = []  # arrived prompts that no longer can (and never will again)
    running: list[int] = []
    late: set[int] = set()
    t = seen = ready_s
    nxt = 0
    if resume is not None:
        old, changed_s = resume
        base = None
        for snap in old.snaps:
            if changed_s > snap.seen_s + 1e-12:
                base = snap
            else:
                break
        if base is not None:
            t, seen, nxt = base.t, base.seen_s, base.taken
            waiting, hopeless = list(base.waiting), list(base.hopeless)
            running = list(base.running)
            generated, late = dict(base.generated), set(base.late)
            comps = list(old.comps[: base.built])
            snaps = [x for x in old.snaps if x.built <= base.built and x.t <= base.t]
    passes = 0
    while nxt < len(order) or waiting or hopeless or running:
        if passes % SNAPSHOT_EVERY == 0 and (not snaps or snaps[-1].built < len(comps)):
            snaps.append(
                _Snapshot(
                    t,
                    max(seen, t),
                    nxt,
                    tuple(waiting),
                    tuple(hopeless),
                    tuple(running),
                    tuple(generated.items()),
                    frozenset(late),
                    len(comps),
                )
            )
        passes += 1
        while nxt < len(order) and arrival[order[nxt]] <= t + 1e-12:
            waiting.append(order[nxt])
            nxt += 1
        if not waiting and not hopeless and not running:
            t = max(t, arrival[order[nxt]])
            seen = max(seen, t)
            continue
        # the clock only grows, so a prompt that cannot meet its first token now never will
        still = [r for r in waiting if t + alone[r] <= first_due[r] + tol]
        if len(still) < len(waiting):
            hopeless += [r for r in waiting if t + alone[r] > first_due[r] + tol]
            waiting = still
        viable = sorted(waiting, key=lambda r: (first_due[r], r))
        # late prompts fill idle time: an iteration that ends by the next member's arrival
        # (once no member is left to arrive, at any time)
        next_arrival = arrival[order[nxt]] if nxt < len(order) else math.inf
        if not viable and next_arrival < math.inf:
            seen = max(seen, next_arrival)
        step = _iteration(tab, t, running, generated, late, viable, hopeless, next_arrival)
        if step is None:
            t = next_arrival
            continue
        prefill, decode, took = step
        t = t + took
        taken = set(prefill)
        if viable:
            waiting = [r for r in waiting if r not in taken]
        else:
            hopeless = [r for r in hopeless if r not in taken]
        running = _advance(tab, t, prefill, decode, generated, late, running)
        comps.append((tuple(sorted(prefill)), tuple(sorted(decode))))
    return _Worker(
        tuple(sorted(members)),
        slot,
        tuple(comps),
        len(order) - len(late),
        t,
        frozenset(late),
        tuple(snaps),
    )


def _iteration(
    tab: _Tables,
    t: float,
    running: Sequence[int],
    generated: dict[int, int],
    late: set[int],
    viable: Sequence[int],
    hopeless: Sequence[int],
    next_arrival: float,
    lazy: bool = False,
) -> tuple[list[int], list[int], float] | None:
    """The greedy worker's next iteration from ``t``: ``(prefills, decodes, its time)``, or
    None when nothing fits and the worker should idle until ``next_arrival``.

    It decodes every running request (within the batch cap) and prefills, in the order of
    ``viable`` (arrived prompts that can still meet their first token, by that deadline), the
    prompts that still meet it while the iteration ends before the next token of every
    on-time running request is due; with no viable prompt it takes late ones (``hopeless``)
    in an iteration that ends by ``next_arrival`` (at any time once it is infinite).

    ``lazy``: with viable prompts waiting, first try an iteration of prefills alone that
    ends early enough for a decode of every running request to follow before the next
    on-time token is due (decodes run only when a token needs them, which leaves the
    prefills the time the decode terms would take)."""
    tol = ON_TIME_TOLERANCE_S
    first_due, tpot, prompt, part = tab.first_due, tab.tpot, tab.prompt, tab.part
    any_s, prefill_s = tab.any_s, tab.prefill_s
    decode = list(running[: tab.cap])
    if decode:
        kv = sum(prompt[r] + generated[r] for r in decode)
        decode_part = tab.decode_s + len(decode) * tab.decode_token_s + tab.kv_s * kv
    else:
        decode_part = 0.0
    limit = min(
        (first_due[r] + generated[r] * tpot[r] + tol for r in decode if r not in late),
        default=math.inf,
    )
    if lazy and viable and decode:
        ahead, parts = _fill(tab, t, 0, 0.0, limit - (any_s + decode_part), viable, next_arrival)
        if ahead:
            return ahead, [], any_s + (prefill_s + parts)
    chosen = viable or hopeless
    prefill, parts = _fill(
        tab, t, len(decode), decode_part, limit, chosen, next_arrival, bool(viable)
    )
    if not prefill and not decode:
        if next_arrival < math.inf:
            return None
        prefill = [chosen[0]]
        parts = part[chosen[0]]
    took = any_s
    if prefill:
        took += prefill_s + parts
    if decode:
        took += decode_part
    return prefill, decode, took


def _fill(
    tab: _Tables,
    t: float,
    decodes: int,
    decode_part: float,
    limit: float,
    chosen: Sequence[int],
    next_arrival: float,
    viable: bool = True,
) -> tuple[list[int], float]:
    """The prompts an iteration from ``t`` with ``decodes`` decodes (their terms
    ``decode_part``) prefills, in the order of ``chosen``, and their prefill terms: those
    that fit the batch caps with the iteration ending by ``limit`` and, for ``viable``
    prompts, each by its first token's deadline (late ones: by ``next_arrival``)."""
    tol = ON_TIME_TOLERANCE_S
    first_due, computed, part = tab.first_due, tab.computed, tab.part
    cap = tab.cap
    max_tokens = tab.max_batch_tokens
    any_s, prefill_s = tab.any_s, tab.prefill_s
    prefill: list[int] = []
    tokens = decodes
    parts = 0.0
    for r in chosen:
        if len(prefill) + decodes >= cap:
            break
        if max_tokens and tokens + computed[r] > max_tokens:
            continue
        with_r = parts + part[r]
        took = any_s + (prefill_s + with_r)
        if decodes:
            took += decode_part
        end = t + took
        if end > limit:
            continue
        if viable and any(end > first_due[q] + tol for q in (*prefill, r)):
            continue
        if not viable and end > next_arrival:
            continue
        prefill.append(r)
        parts = with_r
        tokens += computed[r]
    return prefill, parts


def _advance(
    tab: _Tables,
    end_s: float,
    prefill: Sequence[int],
    decode: Sequence[int],
    generated: dict[int, int],
    late: set[int],
    running: Sequence[int],
) -> list[int]:
    """Emit the tokens of an iteration ending at ``end_s`` (``generated`` and ``late``
    updated in place); the requests still running after it."""
    tol = ON_TIME_TOLERANCE_S
    first_due, tpot, output = tab.first_due, tab.tpot, tab.output
    for r in decode:
        generated[r] += 1
        if end_s > first_due[r] + (generated[r] - 1) * tpot[r] + tol:
            late.add(r)
    for r in prefill:
        generated[r] = 1
        if end_s > first_due[r] + tol:
            late.add(r)
    kept = [r for r in running if generated[r] < output[r]]
    return kept + [r for r in prefill if output[r] > 1]


class _State:
    """Workers of a decision with their scores; ``J`` summed per worker."""

    def __init__(self, data: ScaleWindow, workers: list[_Worker], tables: _Tables) -> None:
        self.d = data
        self.workers = workers
        self.tables = tables

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

    def rebuilt(
        self, w: _Worker, members: Sequence[int], slot: int | None, changed: Sequence[int] = ()
    ) -> _Worker:
        """Worker ``w``'s life at ``slot`` serving ``members``, its iterations built by the
        greedy worker; when only the requests ``changed`` join or leave and the ready time
        stays, the build resumes from ``w``'s last saved state before the first of them
        arrives (the same iterations, fewer passes)."""
        ready = self.ready_s(_Worker((), slot, (), 0, 0.0))
        resume = None
        if changed and w.snaps and slot == w.slot:
            resume = (w, min(self.tables.arrival[r] for r in changed))
        return _greedy(self.tables, members, ready, slot, resume)

    def retimed(self, w: _Worker, slot: int) -> _Worker:
        out = _Worker(w.members, slot, w.comps, 0, 0.0)
        out.met, out.end_s, out.late = worker_score(self.d, out.comps, self.ready_s(out))
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
    data: ScaleWindow, instance: Instance, run: StartRun, *, seed: int
) -> ScaleDecision | None:
    """The run of an online heuristic (``run``, see :data:`StartRun`) as a decision over worker
    lives (its routing, each switch-on's slot and every life's iterations), or None when the
    run cannot be written so (a changed instance, a prompt prefilled in chunks, a preemption, a
    worker switched on off the slot grid)."""
    out = run(instance, seed)
    if out is None:
        return None
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
            if phase == 0 and int(out.entry_tokens[e]) == data.prefill_tokens(r):
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


def _state_of(data: ScaleWindow, decision: ScaleDecision, tables: _Tables) -> _State:
    workers = []
    for w in range(len(decision.iterations)):
        members = tuple(r for r in range(data.n) if decision.routing[r] == w)
        slot = None if w < data.initial_servers else decision.on_slot[w]
        if w >= data.initial_servers and slot is None:
            if members:
                raise ValueError(f"worker {w} serves requests but is never switched on")
            slot = 0
        workers.append(_scored(data, _Worker(members, slot, decision.iterations[w], 0, 0.0)))
    return _State(data, workers, tables)


def _scored(data: ScaleWindow, worker: _Worker) -> _Worker:
    """``worker`` with its requests met, end and missed requests scored from its ready time."""
    ready = 0.0 if worker.slot is None else data.slot_time_s(worker.slot) + data.startup_s
    worker.met, worker.end_s, worker.late = worker_score(data, worker.comps, ready)
    return worker


def _replayed(instance: Instance, data: ScaleWindow, decision: ScaleDecision) -> float:
    return DispatchScale(instance).evaluate(
        decision_schedule(lives_window(data, decision), decision)
    )


def lns(
    instance: Instance,
    *,
    seed: int,
    time_limit: float = 60.0,
    starts: Mapping[str, StartRun] = MappingProxyType({}),
    quiet: bool = False,
    max_moves: int | None = None,
    pooled_runs: int | None = None,
) -> LnsResult:
    """Large-neighbourhood search from the best start (see the module docstring).

    The starts and both searches (the pooled start's and the moves) run on the search driver
    (:class:`slolab.solvers.search.Search`): one time box, the incumbent rule
    :func:`slolab.solvers.search.improves`, one progress bar, Ctrl-C keeping the incumbent.

    Parameters
    ----------
    instance : Instance
        A ``dispatch-scale`` window.
    seed : int
        Seed of the moves.
    time_limit : float
        Seconds for the whole search (the start runs included); honoured between moves.
    starts : mapping of str to StartRun
        Online heuristics to start from, by name, as their runs (their replayed decisions;
        :data:`slolab.problems.dispatch_scale.LNS_STARTS` runs :data:`START_POLICIES`); the
        insertion start, the pooled starts and the greedy worker on a round-robin routing and
        on one worker are always candidates.
    quiet : bool
        No progress bar (otherwise one on a terminal's stderr).
    max_moves : int, optional
        Stop after this many moves, exact ones included (as well as at the time limit).
    pooled_runs : int, optional
        Most runs of the search on the pooled start's given-up prompts (as well as its share
        of the time).

    Returns
    -------
    LnsResult
        The incumbent (its objective replayed by the engine); on Ctrl-C the incumbent so far,
        ``interrupted`` True.
    """
    t0 = time.perf_counter()
    stop = t0 + time_limit
    data = ScaleWindow.of(instance)
    rng = np.random.default_rng(seed)
    tables = _Tables(data)
    n0, W = data.initial_servers, data.max_servers
    candidates: list[tuple[str, _State]] = []
    rr = tuple(r % n0 for r in range(data.n))
    empty: list[tuple[Composition, ...]] = [()] * W
    greedy = _state_of(data, ScaleDecision(rr, (None,) * W, tuple(empty)), tables)
    greedy.workers = [greedy.rebuilt(w, w.members, w.slot) for w in greedy.workers]
    one = _state_of(data, ScaleDecision((0,) * data.n, (None,) * W, tuple(empty)), tables)
    one.workers = [one.rebuilt(w, w.members, w.slot) for w in one.workers]
    candidates.append(("greedy-one-worker", one))
    candidates.append(("greedy-round-robin", greedy))
    pooled: list[tuple[tuple[bool, float], float]] = []
    with interruptible(f"lns {instance.name}") as stopped:
        inserted = _insertion_start(data, tables, t0 + INSERTION_SHARE * time_limit)
        if inserted is not None:
            candidates.append(("greedy-insertion", inserted))
        for lazy, lookahead in POOLED_VARIANTS:
            found = _pooled_start(data, tables, stop, lazy=lazy, lookahead_s=lookahead)
            if found is not None:
                name = f"pooled{'-lazy' if lazy else ''}-lookahead-{lookahead:g}s"
                candidates.append((name, found))
                pooled.append(((lazy, lookahead), found.total()))
        for name, run in DISPATCH_LNS_STARTS.tried(
            starts.items(), lambda: time.perf_counter() > stop
        ):
            decision = online_decision(data, instance, run, seed=seed)
            if decision is not None:
                candidates.append((name, _state_of(data, decision, tables)))
    interrupted = stopped.interrupted
    if pooled and not interrupted:
        # the best pooled variant, with the prompts it gives up searched
        share = POOLED_SEARCH_SHARE * max(stop - time.perf_counter(), 0.0)
        variant, _ = best_of(pooled)
        searched = _pooled_search(data, tables, variant, share, rng, max_runs=pooled_runs)
        interrupted = searched.interrupted
        if searched.incumbent is not None:
            candidates.append(("pooled-search", searched.incumbent))
    (start_name, state), best = best_of((c, c[1].total()) for c in candidates)
    start_value = _replayed(instance, data, state.decision())
    counts = {"tried": 0, "exact_tried": 0, "exact_kept": 0}
    exact_rng = np.random.default_rng([seed, 1])

    def step(search: Search[_State]) -> None:
        is_exact = counts["tried"] >= EXACT_EVERY * (counts["exact_tried"] + 1)
        if is_exact:
            change = _exact_move(state, exact_rng, search.remaining_s())
            counts["exact_tried"] += 1
        else:
            counts["tried"] += 1
            change = _move(state, rng)
        if change is None:
            return
        idx, new_workers = change
        before = math.fsum(state.value(state.workers[i]) for i in idx if i < len(state.workers))
        after = math.fsum(state.value(w) for w in new_workers)
        if not improves(after, before):
            return
        changed = dict(zip(idx, new_workers, strict=True))
        trial = [changed.get(i, w) for i, w in enumerate(state.workers)]
        trial += [w for i, w in changed.items() if i >= len(state.workers)]
        if state.concurrency(trial) > W:
            return
        # drop new lives left empty
        state.workers = [w for w in trial if w.slot is None or w.members]
        counts["exact_kept"] += is_exact
        search.keep(state, state.total())

    moves: Search[_State] = Search(
        FirstOf(
            MaxRuntime(time_limit), MaxIterations(max_moves) if max_moves is not None else None
        ),
        desc=f"lns {instance.name}",
        objective_name="J",
        quiet=quiet,
        started=t0,
        replay=lambda found: _replayed(instance, data, found.decision()),
    )
    if interrupted:
        moves_run = moves.interrupted_before(state, best)
    else:
        moves_run = moves.run(state, best, step)
    return moves_run.extended(
        LnsResult,
        incumbent=state.decision(),
        interrupted=interrupted or moves_run.interrupted,
        wall_s=time.perf_counter() - t0,
        start=start_name,
        start_objective=start_value,
        starts_tried=len(candidates),
        moves_tried=counts["tried"],
        exact_tried=counts["exact_tried"],
        exact_kept=counts["exact_kept"],
    )


def _insertion_start(data: ScaleWindow, tables: _Tables, stop: float) -> _State | None:
    """A start built in arrival order: each request joins the worker (an initial one, a life
    already switched on, or a new life at the latest slot ready by its arrival) where ``J``
    rises most while at most ``max_servers`` lives are on at once. Appending the latest
    arrival resumes each worker's build near its end, so a try costs the passes from there.
    When ``stop`` (a perf_counter time) passes first, the requests left go round robin to the
    initial workers; None when no worker can take a request."""
    W = data.max_servers
    state = _State(
        data, [_Worker((), None, (), 0, 0.0) for _ in range(data.initial_servers)], tables
    )
    order = sorted(range(data.n), key=lambda x: (tables.arrival[x], x))
    for k, r in enumerate(order):
        if time.perf_counter() > stop:
            # out of time: the rest round robin on the initial workers
            rest: dict[int, list[int]] = {}
            for j, x in enumerate(order[k:]):
                rest.setdefault(j % data.initial_servers, []).append(x)
            for i, extra in rest.items():
                w = state.workers[i]
                state.workers[i] = state.rebuilt(w, [*w.members, *extra], w.slot)
            return state if state.concurrency(state.workers) <= W else None
        options: list[tuple[float, int, _Worker]] = []
        slot = _slot_before(data, tables.arrival[r])
        for i, w in enumerate(state.workers):
            if w.slot is not None and w.end_s < data.slot_time_s(slot):
                # a life that ended before the new life's switch-on: the new life serves r
                # from the same time at no more cost, with nothing else on it
                continue
            grown = state.rebuilt(w, [*w.members, r], w.slot, (r,))
            options.append((state.value(grown) - state.value(w), i, grown))
        if W > data.initial_servers:
            life = state.rebuilt(_Worker((), None, (), 0, 0.0), [r], slot)
            options.append((state.value(life), len(state.workers), life))
        options.sort(key=lambda o: (-o[0], o[1]))
        for _, i, grown in options:
            trial = list(state.workers)
            if i < len(trial):
                trial[i] = grown
            else:
                trial.append(grown)
            if state.concurrency(trial) <= W:
                state.workers = trial
                break
        else:
            return None
    return state


@dataclass
class _Life:
    """A worker life of the pooled start: its switch-on slot (None: initial), clock, members,
    iterations built, running requests, tokens emitted, late requests, whether it is still
    on and the end of its last iteration."""

    slot: int | None
    t: float
    members: list[int] = dataclasses.field(default_factory=list)
    comps: list[Composition] = dataclasses.field(default_factory=list)
    running: list[int] = dataclasses.field(default_factory=list)
    generated: dict[int, int] = dataclasses.field(default_factory=dict)
    late: set[int] = dataclasses.field(default_factory=set)
    open: bool = True
    last_end_s: float = 0.0


def _pooled_start(
    data: ScaleWindow,
    tables: _Tables,
    stop: float,
    linger_s: float = 2.0,
    lazy: bool = False,
    lookahead_s: float = 0.0,
    given_up: frozenset[int] = frozenset(),
) -> _State | None:
    """A start where every worker life pulls from one central queue, in time order.

    The life whose clock is earliest builds its next iteration with the greedy worker's rule
    (:func:`_iteration`) from the prompts waiting for any worker, so a prompt goes to the
    first worker that can take it in time. Before each iteration the viable prompts, with
    the prompts arriving within ``lookahead_s``, are list-scheduled (alone, by first-token
    deadline) on the lives' clocks; when one would miss its first token and fewer than
    ``max_servers`` lives are on, a new life is switched on at the latest slot ready by now,
    and the arrived prompts that still miss are given up by :func:`_triage` (served late, in
    idle time). ``lazy``: decodes only when a token needs them (:func:`_iteration`). A life
    with nothing to do leaves when the next arrival is more than ``linger_s`` away (else it
    waits for it). The prompts ``given_up`` wait with the late ones from their arrival.
    None when ``stop`` (a perf_counter time) passes first or no life can be switched on."""
    tol = ON_TIME_TOLERANCE_S
    W = data.max_servers
    arrival, first_due, alone = tables.arrival, tables.first_due, tables.alone
    order = sorted(range(data.n), key=lambda r: (arrival[r], r))
    lives = [_Life(None, 0.0) for _ in range(data.initial_servers)]
    ended: list[tuple[float, float]] = []  # (switch-on, last iteration's end) of left lives
    waiting: list[int] = []
    hopeless: list[int] = []
    nxt = 0
    now = 0.0

    def switch_on(t: float) -> bool:
        slot = _slot_before(data, t)
        on = data.slot_time_s(slot)
        if slot >= data.slots:
            return False
        present = sum(1 for x in lives if x.open) + sum(1 for _, end in ended if end > on)
        if present >= W:
            return False
        lives.append(_Life(slot, max(t, on + data.startup_s)))
        return True

    while nxt < len(order) or waiting or hopeless or any(x.running for x in lives):
        if time.perf_counter() > stop:
            return None
        active = [x for x in lives if x.open]
        if not active:
            if not switch_on(max(now, arrival[order[nxt]] if nxt < len(order) else now)):
                return None
            continue
        life = min(active, key=lambda x: x.t)
        t = now = life.t
        while nxt < len(order) and arrival[order[nxt]] <= t + 1e-12:
            (hopeless if order[nxt] in given_up else waiting).append(order[nxt])
            nxt += 1
        # every other life's clock is at least t: a prompt late now is late everywhere
        hopeless += [r for r in waiting if t + alone[r] > first_due[r] + tol]
        waiting = [r for r in waiting if t + alone[r] <= first_due[r] + tol]
        next_arrival = arrival[order[nxt]] if nxt < len(order) else math.inf
        if not waiting and not hopeless and not life.running:
            if next_arrival - t > linger_s or next_arrival == math.inf:
                life.open = False
                on = 0.0 if life.slot is None else data.slot_time_s(life.slot)
                ended.append((on, life.last_end_s if life.comps else on))
            else:
                life.t = next_arrival
            continue
        viable = sorted(waiting, key=lambda r: (first_due[r], r))
        clocks = [x.t for x in lives if x.open]
        soon = []
        for k in range(nxt, len(order)):
            if arrival[order[k]] > t + lookahead_s:
                break
            if order[k] not in given_up:
                soon.append(order[k])
        ahead = sorted([*viable, *soon], key=lambda r: (first_due[r], r))
        missing = _triage(tables, ahead, clocks)
        if missing and switch_on(t):
            clocks.append(t)
            missing = _triage(tables, ahead, clocks)
        dropped = [r for r in missing if arrival[r] <= t + 1e-12]
        if dropped:
            hopeless += dropped
            waiting = [r for r in waiting if r not in dropped]
            viable = [r for r in viable if r not in dropped]
        step = _iteration(
            tables,
            t,
            life.running,
            life.generated,
            life.late,
            viable,
            hopeless,
            next_arrival,
            lazy,
        )
        if step is None:
            life.t = next_arrival
            continue
        prefill, decode, took = step
        life.t = life.last_end_s = t + took
        taken = set(prefill)
        if viable:
            waiting = [r for r in waiting if r not in taken]
        else:
            hopeless = [r for r in hopeless if r not in taken]
        life.members += prefill
        life.running = _advance(
            tables, life.t, prefill, decode, life.generated, life.late, life.running
        )
        life.comps.append((tuple(sorted(prefill)), tuple(sorted(decode))))
    workers = [
        _scored(data, _Worker(tuple(sorted(x.members)), x.slot, tuple(x.comps), 0, 0.0))
        for x in lives
        if x.slot is None or x.members
    ]
    state = _State(data, workers, tables)
    return state if state.concurrency(state.workers) <= W else None


def _pooled_search(
    data: ScaleWindow,
    tables: _Tables,
    variant: tuple[bool, float],
    time_limit: float,
    rng: np.random.Generator,
    max_runs: int | None = None,
) -> SearchResult[_State | None]:
    """Hill climbing on the prompts the pooled start gives up from their arrival: give up a
    request met near a missed one (within 1 s, a first-token target under 5 s), or take one
    back; kept when ``J`` rises. Runs for ``time_limit`` seconds or ``max_runs`` runs; its
    incumbent is None when the pooled start itself does not finish in time."""
    lazy, lookahead = variant
    started = time.perf_counter()
    with interruptible("lns pooled start") as stopped:
        best = _pooled_start(data, tables, started + time_limit, lazy=lazy, lookahead_s=lookahead)
    if best is None or stopped:
        return SearchResult(best, -math.inf, 0, 0, "time limit", stopped.interrupted, 0.0)
    arrival, first_due = tables.arrival, tables.first_due
    given_up: frozenset[int] = frozenset()

    def step(search: Search[_State | None]) -> None:
        nonlocal given_up
        incumbent = search.incumbent
        assert incumbent is not None
        missed = sorted(set().union(*(w.late for w in incumbent.workers)) - given_up)
        if given_up and (not missed or rng.random() < 0.3):
            trial = given_up - {int(rng.choice(sorted(given_up)))}
        elif missed:
            m = int(rng.choice(missed))
            near = [
                x
                for x in range(data.n)
                if abs(arrival[x] - arrival[m]) < 1.0
                and first_due[x] - arrival[x] < 5.0
                and x not in given_up
                and x not in missed
            ]
            if not near:
                return
            trial = given_up | {int(rng.choice(near))}
        else:
            raise Exhausted
        found = _pooled_start(
            data,
            tables,
            time.perf_counter() + search.remaining_s(),
            lazy=lazy,
            lookahead_s=lookahead,
            given_up=trial,
        )
        if found is not None and improves(found.total(), search.objective):
            search.keep(found, found.total())
            given_up = trial

    stop = FirstOf(
        MaxRuntime(time_limit), MaxIterations(max_runs) if max_runs is not None else None
    )
    search: Search[_State | None] = Search(stop, desc="lns pooled", quiet=True, started=started)
    return search.run(best, best.total(), step)


def _triage(tables: _Tables, viable: Sequence[int], clocks: Sequence[float]) -> list[int]:
    """Prompts to give up so that the rest meet their first token when served alone, by
    first-token deadline, each on the life free first (``clocks``): while one would miss,
    the longest prompt scheduled up to it is given up (Moore and Hodgson's rule on one
    machine, here on the lives' clocks). Empty when every viable prompt meets.

    References
    ----------
    J. M. Moore, "An n job, one machine sequencing algorithm for minimizing the number of
    tardy jobs", Management Science 15(1), 1968 (Hodgson's algorithm).
    """
    dropped: list[int] = []
    kept = list(viable)
    while True:
        free = sorted(clocks)
        for k, r in enumerate(kept):
            start = max(free[0], tables.arrival[r])
            end = start + tables.alone[r]
            if end > tables.first_due[r] + ON_TIME_TOLERANCE_S:
                longest = max(kept[: k + 1], key=lambda q: (tables.alone[q], q))
                dropped.append(longest)
                kept.remove(longest)
                break
            free[0] = end
            free.sort()
        else:
            return dropped


def _move(state: _State, rng: np.random.Generator) -> tuple[list[int], list[_Worker]] | None:
    """One random move: indices of the workers it changes and their new versions."""
    d = state.d
    workers = state.workers
    used = [i for i, w in enumerate(workers) if w.members]
    kind = int(rng.integers(0, 8))
    if kind == 7:  # a missed request to the worker where J rises most
        missed = [x for w in workers for x in w.late]
        if not missed:
            return None
        return _best_relocation(state, int(missed[int(rng.integers(0, len(missed)))]))
    if kind == 4:  # rebuild one worker's iterations
        if not used:
            return None
        i = int(rng.choice(used))
        return [i], [state.rebuilt(workers[i], workers[i].members, workers[i].slot)]
    if kind in (0, 5, 6):
        # relocate one request (0: a missed one half the time, 5: the one whose last token
        # ends its worker); 6: swap a missed request with the one of another worker arriving
        # closest to it
        if kind == 5 and used:
            src = int(rng.choice(used))
            r = _last_finisher(d, workers[src])
        else:
            missed = [x for w in workers for x in w.late]
            if missed and (kind == 6 or rng.random() < 0.5):
                r = int(missed[int(rng.integers(0, len(missed)))])
            else:
                r = int(rng.integers(0, d.n))
            src = next(i for i, w in enumerate(workers) if r in w.members)
        if kind == 6:
            others = [i for i in used if i != src]
            if not others:
                return None
            dst = int(rng.choice(others))
            arrival = state.tables.arrival
            q = min(workers[dst].members, key=lambda x: (abs(arrival[x] - arrival[r]), x))
            a = state.rebuilt(
                workers[src],
                [x for x in workers[src].members if x != r] + [q],
                workers[src].slot,
                (r, q),
            )
            b = state.rebuilt(
                workers[dst],
                [x for x in workers[dst].members if x != q] + [r],
                workers[dst].slot,
                (r, q),
            )
            return [src, dst], [a, b]
        dst = int(rng.integers(0, len(workers) + 1))
        if dst == src:
            return None
        target = _target(state, dst, float(d.arrival_s[r]))
        a = state.rebuilt(
            workers[src], [x for x in workers[src].members if x != r], workers[src].slot, (r,)
        )
        b = state.rebuilt(target, [*target.members, r], target.slot, (r,))
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
            members = keep + [x for x in moved if x not in keep] if i == dst else keep
            out.append(state.rebuilt(w, members, w.slot, moved))
        return idx, out
    if kind == 2:  # close a worker
        if len(used) < 2:
            return None
        src = int(rng.choice(used))
        others = [i for i in used if i != src]
        share: dict[int, list[int]] = {i: [] for i in others}
        for k, r in enumerate(workers[src].members):
            share[others[k % len(others)]].append(r)
        idx = [src, *others]
        out = [state.rebuilt(workers[src], [], workers[src].slot)]
        out += [
            state.rebuilt(workers[i], [*workers[i].members, *share[i]], workers[i].slot, share[i])
            if share[i]
            else workers[i]
            for i in others
        ]
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


def _exact_move(
    state: _State, rng: np.random.Generator, time_limit: float
) -> tuple[list[int], list[_Worker]] | None:
    """The exact sub-window move: a request (a missed one half the time, the one whose last
    token ends a random used worker a quarter of the time, else any) and up to
    :data:`EXACT_FREED` - 1 others of its worker, or of its worker and another one on at
    the time, arriving nearest to it, are freed in a span of iterations around its own,
    and re-placed optimally with everything else kept
    (:func:`slolab.models.dispatch_subwindow.solve_subwindow`, OPTIMAL within
    :data:`EXACT_TRANSITIONS` transitions and ``time_limit`` or nothing), at most
    ``max_servers`` lives on at once."""
    d, workers, tab = state.d, state.workers, state.tables
    missed = [x for w in workers for x in w.late]
    pick = rng.random()
    used = [i for i, w in enumerate(workers) if w.members]
    if missed and pick < 0.5:
        r = int(missed[int(rng.integers(0, len(missed)))])
    elif pick < 0.75 and used:
        r = _last_finisher(d, workers[int(rng.choice(used))])
    else:
        r = int(rng.integers(0, d.n))
    src = next(i for i, w in enumerate(workers) if r in w.members)
    starts = iteration_starts(d, workers[src].comps, state.ready_s(workers[src]))
    ks = [k for k, (p, dec) in enumerate(workers[src].comps) if r in p or r in dec]
    first = max(ks[0] - int(rng.integers(0, 4)), 0)
    past = ks[-1] + 1 + int(rng.integers(0, 4))
    start_s = starts[first]
    end_s = starts[past] if past < len(starts) else math.inf
    idx = [src]
    if rng.random() < 0.5:
        others = [
            i
            for i, w in enumerate(workers)
            if i != src and w.members and state.on_s(w) < end_s and w.end_s > start_s
        ]
        if others:
            idx.append(int(rng.choice(others)))
    inside = []
    length = 0
    for i in idx:
        w = workers[i]
        on = iteration_starts(d, w.comps, state.ready_s(w))
        span = [k for k, s in enumerate(on) if start_s <= s < end_s]
        length = max(length, len(span))
        entries: dict[int, list[int]] = {}
        for k, (p, dec) in enumerate(w.comps):
            for q in (*p, *dec):
                entries.setdefault(q, []).append(k)
        inside += [
            q for q, ks_q in entries.items() if span and span[0] <= ks_q[0] and ks_q[-1] <= span[-1]
        ]
    arrival = tab.arrival
    freed = [r]
    size = (length + 1) * 2 * (tab.output[r] + 1)
    extra = int(rng.integers(0, EXACT_FREED))
    for q in sorted(inside, key=lambda x: (abs(arrival[x] - arrival[r]), x)):
        if len(freed) > extra:
            break
        if q != r and size * (tab.output[q] + 1) <= EXACT_STATES:
            freed.append(q)
            size *= tab.output[q] + 1
    if size > EXACT_STATES:
        return None
    lives = [
        SubLife(state.on_s(workers[i]), state.ready_s(workers[i]), workers[i].comps) for i in idx
    ]

    def feasible(ends: Sequence[float]) -> bool:
        trial = list(workers)
        for i, end in zip(idx, ends, strict=True):
            trial[i] = _Worker((0,), workers[i].slot, (), 0, end)
        return state.concurrency(trial) <= d.max_servers

    found = solve_subwindow(
        d,
        lives,
        freed,
        start_s,
        end_s,
        time_limit=time_limit,
        feasible=feasible,
        max_transitions=EXACT_TRANSITIONS,
    )
    if found.status is not Status.OPTIMAL:
        return None
    out = []
    for i, comps in zip(idx, found.comps, strict=True):
        members = tuple(sorted({q for p, dec in comps for q in (*p, *dec)}))
        out.append(_scored(d, _Worker(members, workers[i].slot, comps, 0, 0.0)))
    return idx, out


def _best_relocation(state: _State, r: int) -> tuple[list[int], list[_Worker]] | None:
    """Request ``r`` moved to the worker where ``J`` rises most: every used worker on at its
    arrival or later, and a new life switched on at the latest slot ready by its arrival."""
    workers = state.workers
    arrival = state.tables.arrival[r]
    src = next(i for i, w in enumerate(workers) if r in w.members)
    left = state.rebuilt(
        workers[src], [x for x in workers[src].members if x != r], workers[src].slot, (r,)
    )
    base = state.value(workers[src]) - state.value(left)
    slot = _slot_before(state.d, arrival)
    best: tuple[float, int, _Worker] | None = None
    for i, w in enumerate(workers):
        if i == src or not w.members or (w.slot is not None and w.end_s < arrival):
            continue
        grown = state.rebuilt(w, [*w.members, r], w.slot, (r,))
        gain = state.value(grown) - state.value(w)
        if best is None or gain > best[0]:
            best = (gain, i, grown)
    life = state.rebuilt(_Worker((), None, (), 0, 0.0), [r], slot)
    if best is None or state.value(life) > best[0]:
        best = (state.value(life), len(workers), life)
    if best[0] <= base:
        return None
    return [src, best[1]], [left, best[2]]


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
    ``lns``): a certified interval ``[incumbent, bound]``; OPTIMAL only when they meet.
    ``starts`` are the online runs the search may start from (see :func:`lns`)."""

    sense = "max"
    draws_progress = True

    def __init__(
        self,
        instance: Instance,
        *,
        buckets: int | None = None,
        starts: Mapping[str, StartRun] = MappingProxyType({}),
    ) -> None:
        super().__init__(instance)
        self.data = ScaleWindow.of(instance)
        self.buckets = buckets
        self.starts = starts

    backends = ("highs",)

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
            interval_rounds=0,
            time_limit=BOUND_SHARE * time_limit,
            threads=backend.threads,
        )
        left = max(time_limit - (time.perf_counter() - start), 0.0)
        found = lns(
            self.instance, seed=backend.seed, time_limit=left, starts=self.starts, quiet=self.quiet
        )
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
                "exact_tried": found.exact_tried,
                "exact_kept": found.exact_kept,
                "interrupted": found.interrupted,
                "stop_reason": found.stop_reason,
                "bound_status": bound.status,
                "ideal_bound": bound.ideal,
            },
        )

"""An exact sub-window of a dispatch-scale decision: a few requests re-placed optimally.

The neighbourhood of :func:`solve_subwindow`: one or two worker lives of a decision, a time
span, and a few *freed* requests of those lives whose every iteration entry starts within the
span. Everything else stays: the other requests' routing, the iterations before the span (so
their times), the other requests' entries in the span (each kept in its iteration, the
iterations kept in order), the iterations after the span (their compositions, retimed from
the span's end) and every life's switch-on. What may change: which of the lives serves each
freed request, and where its prefill and decode tokens go: added to a kept iteration of the
span or in iterations of freed requests alone, inserted anywhere in the span.

Given the lives' freed requests the lives are independent, and each is solved exactly by a
dynamic program over states (kept iterations run, tokens each freed request has emitted,
requests of the span already late) that keeps the earliest end per state; its finals are
scored with the whole life (prefix, span, suffix). That is exact for the same reason as the
exhaustive search of :mod:`slolab.models.dispatch_scale`: an iteration's time depends on its
composition and the contexts, not on when it starts, and it starts at the latest of the
previous end and its prompts' arrivals, so an earlier end makes every later token no later and
the life leave no later. Two lives: every split of the freed requests between them.

References
----------
HyperFlexis, Sec. 3 (the joint decision of dispatch and scaling).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slolab.models.dispatch_scale import (
    Composition,
    ScaleWindow,
    iteration_ends,
    iteration_starts,
    worker_score,
)
from slolab.sim.metrics import ON_TIME_TOLERANCE_S
from slolab.solvers.base import Status

__all__ = ["SubLife", "SubWindowResult", "life_value", "solve_subwindow"]

#: Transitions between two looks at the clock.
CLOCK_EVERY = 256

#: A state of the dynamic program: (kept iterations run, tokens each freed request has
#: emitted, bit set of the requests late); its back pointer (previous state, the freed
#: requests of the iteration, whether it is a kept one); a kept iteration's numbers.
_Key = tuple[int, tuple[int, ...], int]
_Back = tuple[_Key, tuple[int, ...], bool] | None
_Row = tuple[float, float, int, int, int, tuple[tuple[float, int], ...]]


@dataclass(frozen=True, slots=True)
class SubLife:
    """A worker life of the sub-window: its switch-on time (0 for an initial worker), its
    ready time and its iterations in order (s)."""

    on_s: float
    ready_s: float
    comps: tuple[Composition, ...]

    def __post_init__(self) -> None:
        if not self.ready_s >= self.on_s >= 0:
            raise ValueError(
                f"ready_s must be >= on_s >= 0, got ready_s={self.ready_s}, on_s={self.on_s}"
            )


@dataclass(frozen=True, slots=True)
class SubWindowResult:
    """The sub-window's optimum: OPTIMAL with each life's new iterations and their summed
    value (``J``'s share of the lives), or TIME_LIMIT (UNKNOWN past its transition cap) with nothing."""

    status: Status
    value: float
    comps: tuple[tuple[Composition, ...], ...]


def life_value(data: ScaleWindow, life: SubLife) -> tuple[float, float]:
    """``(J's share of the life, end of its last iteration)``: the requests it meets over the
    window's size, less the price of its worker-seconds (switch-on to last end); a life with
    no iterations is worth 0 and ends at its switch-on."""
    if not life.comps:
        return 0.0, life.on_s
    met, end, _ = worker_score(data, life.comps, life.ready_s)
    return met / data.n - data.cost_weight * (end - life.on_s), end


def _span(data: ScaleWindow, life: SubLife, start_s: float, end_s: float) -> tuple[int, int, float]:
    """``(first, past-last index, clock)`` of the life's iterations starting in
    ``[start_s, end_s)``; the clock is the end of the iteration before (its ready time when
    none)."""
    ends = iteration_ends(data, life.comps, life.ready_s)
    starts = iteration_starts(data, life.comps, life.ready_s, ends)
    n = len(starts)
    first = next((k for k in range(n) if starts[k] >= start_s), n)
    past = next((k for k in range(first, n) if starts[k] >= end_s), n)
    return first, past, ends[first - 1] if first else life.ready_s


def _finals(
    data: ScaleWindow,
    life: SubLife,
    span: tuple[int, int, float],
    freed: Sequence[int],
    assigned: tuple[int, ...],
    stop: float,
    budget: list[int],
) -> list[tuple[float, float, tuple[Composition, ...]]] | None:
    """Every best life with the freed requests ``assigned`` to it (the others taken out):
    ``(value, end, iterations)`` per final state of the dynamic program, best first; None
    when ``stop`` passes or the transitions left in ``budget[0]`` (shared by the solve's calls,
    negative: no cap) run out."""
    first, past, clock = span
    gone = set(freed)
    base = []
    for prefill, decode in life.comps[first:past]:
        kept = (
            tuple(r for r in prefill if r not in gone),
            tuple(r for r in decode if r not in gone),
        )
        if kept[0] or kept[1]:
            base.append(kept)
    prefix, suffix = life.comps[:first], life.comps[past:]
    view, tol = data.view, ON_TIME_TOLERANCE_S
    m = len(assigned)
    # requests whose lateness the states track: the assigned ones (bits 0 .. m - 1), then
    # the kept requests of the span still on time after the prefix
    generated: dict[int, int] = {}
    late_before: set[int] = set()
    for (prefill, decode), end in zip(
        prefix, iteration_ends(data, prefix, life.ready_s), strict=True
    ):
        for r in (*prefill, *decode):
            generated[r] = generated.get(r, 0) + 1
            if end > data.deadline_s(r, generated[r]) + tol:
                late_before.add(r)
    bit = {r: i for i, r in enumerate(assigned)}
    # per kept iteration: its prompts' arrivals and prefill terms, decodes, KV tokens read,
    # and its tracked tokens (deadline, bit) by deadline
    kept_rows: list[_Row] = []
    for prefill, decode in base:
        marks = []
        for r in prefill:
            generated[r] = 1
            if r not in late_before:
                marks.append((data.deadline_s(r, 1) + tol, bit.setdefault(r, len(bit))))
        kv = 0
        for r in decode:
            kv += int(data.prompt[r]) + generated[r]
            generated[r] += 1
            if r not in late_before:
                marks.append((data.deadline_s(r, generated[r]) + tol, bit.setdefault(r, len(bit))))
        marks.sort()
        kept_rows.append(
            (
                max((float(data.arrival_s[r]) for r in prefill), default=0.0),
                math.fsum(data.prefill_part_s(r) for r in prefill),
                len(prefill),
                len(decode),
                kv,
                tuple(marks),
            )
        )
    out = [int(data.output[r]) for r in assigned]
    arrival = [float(data.arrival_s[r]) for r in assigned]
    # whole prompts (the context a decode reads) and their uncached tokens (the prefill's)
    prompt = [int(data.prompt[r]) for r in assigned]
    computed = [data.prefill_tokens(r) for r in assigned]
    part = [data.prefill_part_s(r) for r in assigned]
    due = [
        [data.deadline_s(r, k) + tol for k in range(1, o + 1)]
        for r, o in zip(assigned, out, strict=True)
    ]
    cap, max_tokens = data.max_batch_size, data.max_batch_tokens
    kept_tokens = [
        sum(data.prefill_tokens(r) for r in prefill) + len(decode) for prefill, decode in base
    ]
    no_row: _Row = (0.0, 0.0, 0, 0, 0, ())
    start_state: _Key = (0, (0,) * m, 0)
    best: dict[_Key, tuple[float, _Back]] = {start_state: (clock, None)}
    levels: dict[int, list[_Key]] = {0: [start_state]}
    # per (kept iterations run, progress): the (late set, end) pairs reached, to drop a
    # state some other one dominates (no later, a subset of its late requests)
    fronts: dict[tuple[int, tuple[int, ...]], list[tuple[int, float]]] = {}
    goal = len(base) + sum(out)
    ticks = 0
    finals = []
    for level in range(goal + 1):
        for state in levels.pop(level, []):
            t = best[state][0]
            k, progress, late = state
            if level == goal:
                finals.append(state)
                continue
            actionable = [i for i in range(m) if progress[i] < out[i]]
            for size in range(len(actionable) + 1):
                for subset in itertools.combinations(actionable, size):
                    for with_kept in (True, False):
                        if with_kept and k == len(base):
                            continue
                        if not with_kept and not subset:
                            continue
                        ticks += 1
                        if ticks % CLOCK_EVERY == 0 and time.perf_counter() > stop:
                            return None
                        if budget[0] >= 0:
                            if budget[0] == 0:
                                return None
                            budget[0] -= 1
                        row = kept_rows[k] if with_kept else no_row
                        arrive, parts, prefills, decodes, kv, tracked = row
                        if prefills + decodes + size > cap:
                            continue
                        tokens = kept_tokens[k] if with_kept else 0
                        start = max(t, arrive)
                        for i in subset:
                            if progress[i] == 0:
                                prefills += 1
                                parts += part[i]
                                tokens += computed[i]
                                start = max(start, arrival[i])
                            else:
                                decodes += 1
                                kv += prompt[i] + progress[i]
                                tokens += 1
                        if max_tokens and tokens > max_tokens:
                            continue
                        took = view.any_s
                        if prefills:
                            took += view.prefill_s + parts
                        if decodes:
                            took += view.decode_s + decodes * view.decode_token_s + view.kv_s * kv
                        end = start + took
                        new_late = late
                        for dl, b in tracked:
                            if end <= dl:
                                break
                            new_late |= 1 << b
                        new_progress = list(progress)
                        for i in subset:
                            new_progress[i] += 1
                            if end > due[i][new_progress[i] - 1]:
                                new_late |= 1 << i
                        at = (k + 1 if with_kept else k, tuple(new_progress))
                        front = fronts.setdefault(at, [])
                        if any(e <= end and not lt & ~new_late for lt, e in front):
                            continue  # as late or later, with no fewer requests late
                        front.append((new_late, end))
                        nxt = (*at, new_late)
                        known = best.get(nxt)
                        if known is None or end < known[0]:
                            if known is None:
                                levels.setdefault(level + size + with_kept, []).append(nxt)
                            best[nxt] = (end, (state, subset, with_kept))
    found = []
    for state in finals:
        comps: list[Composition] = []
        cur = state
        while True:
            back = best[cur][1]
            if back is None:
                break
            prev, subset, with_kept = back
            kept = base[prev[0]] if with_kept else ((), ())
            prefill = tuple(sorted((*kept[0], *(assigned[i] for i in subset if prev[1][i] == 0))))
            decode = tuple(sorted((*kept[1], *(assigned[i] for i in subset if prev[1][i] > 0))))
            comps.append((prefill, decode))
            cur = prev
        whole = (*prefix, *reversed(comps), *suffix)
        value, end = life_value(data, SubLife(life.on_s, life.ready_s, whole))
        found.append((value, end, whole))
    found.sort(key=lambda f: -f[0])
    return found


def solve_subwindow(
    data: ScaleWindow,
    lives: Sequence[SubLife],
    freed: Sequence[int],
    start_s: float,
    end_s: float,
    *,
    time_limit: float,
    feasible: Callable[[Sequence[float]], bool] | None = None,
    max_transitions: int | None = None,
) -> SubWindowResult:
    """The best re-placement of ``freed`` on ``lives`` (one or two) within ``[start_s,
    end_s)``, everything else kept (see the module docstring).

    Parameters
    ----------
    data : ScaleWindow
        The window.
    lives : sequence of SubLife
        One or two worker lives; every entry of a freed request lies in an iteration of one
        of them that starts in the span.
    freed : sequence of int
        The requests re-placed.
    start_s, end_s : float
        The span (s).
    time_limit : float
        Seconds for the whole solve; past it the result is TIME_LIMIT.
    feasible : callable, optional
        A side condition on the lives' last ends (the caller's concurrency limit); the
        optimum is the best split and iterations that satisfy it.
    max_transitions : int, optional
        A cap on the dynamic program's transitions over the whole solve (work, not time, so
        that a seeded caller gets the same answers on any machine); past it the result is
        UNKNOWN with nothing. None: no cap.

    Returns
    -------
    SubWindowResult
        OPTIMAL with the lives' iterations and their summed value (at least the given
        lives', when they satisfy ``feasible``), TIME_LIMIT, or UNKNOWN past
        ``max_transitions``.
    """
    if not 1 <= len(lives) <= 2:
        raise ValueError(f"lives must hold one or two worker lives, got {len(lives)}")
    stop = time.perf_counter() + time_limit
    budget = [-1 if max_transitions is None else max(int(max_transitions), 0)]
    spans = [_span(data, life, start_s, end_s) for life in lives]
    where = set(freed)
    for life, (first, past, _) in zip(lives, spans, strict=True):
        for k, (prefill, decode) in enumerate(life.comps):
            if not first <= k < past and where & {*prefill, *decode}:
                raise ValueError(
                    f"a freed request has an entry in iteration {k}, outside the span "
                    f"[{start_s}, {end_s})"
                )
    splits: list[tuple[tuple[int, ...], ...]] = []
    for labels in itertools.product(range(len(lives)), repeat=len(freed)):
        split = tuple(
            tuple(r for r, lab in zip(freed, labels, strict=True) if lab == i)
            for i in range(len(lives))
        )
        splits.append(split)
    memo: dict[tuple[int, tuple[int, ...]], list[tuple[float, float, tuple[Composition, ...]]]] = {}
    best: tuple[float, tuple[tuple[Composition, ...], ...]] | None = None
    for split in splits:
        per_life = []
        for i, assigned in enumerate(split):
            key = (i, assigned)
            if key not in memo:
                got = _finals(data, lives[i], spans[i], freed, assigned, stop, budget)
                if got is None:
                    status = Status.UNKNOWN if budget[0] == 0 else Status.TIME_LIMIT
                    return SubWindowResult(status, float("nan"), ())
                memo[key] = got
            per_life.append(memo[key])
        for combo in itertools.product(*per_life):
            value = sum(c[0] for c in combo)
            if best is not None and value <= best[0]:
                continue
            if feasible is not None and not feasible([c[1] for c in combo]):
                continue
            best = (value, tuple(c[2] for c in combo))
    if best is None:
        return SubWindowResult(Status.INFEASIBLE, float("nan"), ())
    return SubWindowResult(Status.OPTIMAL, best[0], best[1])

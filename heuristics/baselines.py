"""Baseline schedulers and routers the papers compare against.

Policies (one server's next batch):

- :class:`PrefillFirstFCFS` — vLLM-style: whenever a waiting request fits in memory, run a
  prefill-only iteration admitting waiting requests first come first served; otherwise decode
  every running request.
- :class:`SarathiFCFS` — Sarathi-Serve: a fixed token budget per iteration; every decoding
  request first (one token each), then prefill chunks FCFS to fill the budget.
- :class:`EDFTokens` — earliest deadline first on token deadlines
  ``d(r, k) = arrival + TTFT + (k - 1) TPOT`` (:func:`slolab.sim.metrics.token_deadline_s`)
  within the same token budget.
- :class:`StaticFCFS` — static batching: the first ``max_batch_size`` waiting requests.

All three continuous-batching policies manage KV memory the same way: a waiting request is
admitted only if its prompt (plus one token) fits beside one more token for every decoding
request, and when the decode step itself does not fit, the most recently admitted requests are
preempted (recomputed later), as vLLM does.

Routers: :class:`RoundRobin`, :class:`RandomRouter` (seeded), :class:`LeastLoaded`.

References
----------
Kwon et al., "Efficient Memory Management for LLM Serving with PagedAttention", SOSP 2023
(vLLM scheduling and recompute preemption). Agrawal et al., "Taming Throughput-Latency
Tradeoff in LLM Inference with Sarathi-Serve", OSDI 2024 (Sec. 4: token budget, decode-first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from slolab.heuristics.policies import register_policy, register_router
from slolab.sim.policy import Batch
from slolab.timing.base import accumulate_from, decode_run_features

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.timing.base import TimingModel


def make_room_for_decode(server: Server, decode: list[int], admitted_order: list[int]) -> list[int]:
    """Preempt the latest-admitted running requests until one decode step fits in memory."""
    preempt: list[int] = []
    base = server.kv_free_tokens
    free = base
    need = len(decode)
    while need > free and admitted_order:
        victim = admitted_order.pop()
        if victim in preempt:
            continue
        preempt.append(victim)
        # a cached prompt block another running request uses stays resident
        free = base + server.kv_freed_by_preempting(preempt)
        if victim in decode:
            decode.remove(victim)
            need -= 1
    return preempt


def decode_server_room(server: Server, decode: list[int]) -> tuple[list[int], int]:
    """On a disaggregated decode server whose decoding requests outgrow its free memory:
    preempt the latest of ``decode`` (taken out of it) until one decode step fits. Returns
    the preempted requests (recomputed on this server later, :func:`decode_server_recompute`)
    and the KV tokens left free after the step."""
    free = server.kv_free_tokens
    preempt: list[int] = []
    while len(decode) > free:
        victim = decode.pop()
        preempt.append(victim)
        free += server.kv_held(victim)
    return preempt, free - len(decode)


def decode_server_recompute(
    server: Server, free: int, budget: int, slots: int
) -> tuple[list[tuple[int, int]], int]:
    """The recompute chunks of the requests preempted on decode server ``server``: those
    prefilling, then the waiting ones whose whole recompute fits in ``free`` KV tokens (FCFS),
    within ``budget`` tokens and ``slots`` requests. Returns the chunks and the KV tokens left
    free. While a preempted request waits unstarted, the server admits no transferred one
    (:func:`recompute_waits`), so that it is not starved."""
    prefill: list[tuple[int, int]] = []
    recomputing = [*server.prefilling, *(r for r in server.waiting if server.remaining_prefill(r))]
    for r in recomputing:
        rem = server.remaining_prefill(r)
        c = min(rem, budget)
        if c < 1 or len(prefill) >= slots:
            break
        if r not in server.prefilling and rem + 1 > free:
            break  # a request starts its recompute only when all of it fits
        extra = 1 if c == rem else 0
        if c + extra > free:
            break
        prefill.append((r, c))
        free -= c + extra
        budget -= c
    return prefill, free


def recompute_waits(server: Server, prefill: list[tuple[int, int]]) -> bool:
    """True when a request preempted on decode server ``server`` waits and ``prefill`` does not
    start its recompute."""
    started = {r for r, _ in prefill}
    return any(server.remaining_prefill(r) and r not in started for r in server.waiting)


def decode_server_batch(server: Server) -> Batch:
    """Disaggregated decode server: decode the running requests, recompute those preempted here
    (:func:`decode_server_room` preempts when memory runs out), then admit transferred ones
    FCFS."""
    decode = list(server.decoding[: server.max_batch_size])
    preempt, free = decode_server_room(server, decode)
    budget = (server.max_batch_tokens or 1 << 62) - len(decode)
    prefill, free = decode_server_recompute(
        server, free, budget, server.max_batch_size - len(decode)
    )
    budget -= sum(c for _, c in prefill)
    admitted = False
    for r in () if recompute_waits(server, prefill) else server.waiting:
        if server.remaining_prefill(r):
            continue  # its recompute starts in this batch
        if len(decode) + len(prefill) >= server.max_batch_size:
            break
        need = server.kv_held(r) + 1
        if need > free or budget < 1:
            break
        decode.append(r)
        free -= need
        budget -= 1
        admitted = True
    if prefill or preempt:
        return Batch(prefill=prefill, decode=decode, preempt=preempt)
    if not decode:
        return Batch()
    full = not admitted and len(decode) == len(server.decoding)
    return Batch(decode=server.decoding_ids() if full else decode, repeat=full)


#: Iterations of a repeated decode batch whose steps :func:`decode_steps_within_until_s` times
#: in one call (a batch whose steps stay within longer is decided again after them).
REPEAT_LOOKAHEAD = 256


def decode_steps_within_until_s(
    timing: TimingModel,
    now: float,
    batch: int,
    kv_tokens: int,
    limit_s: float | Callable[[np.ndarray], np.ndarray],
) -> float | None:
    """Up to when a decode batch repeated from ``now`` keeps every step within ``limit_s``.

    The batch of ``batch`` requests reading ``kv_tokens`` KV tokens runs step after step, each
    reading ``batch`` more tokens than the one before. ``limit_s`` is one limit for every step,
    or a function of the steps' start times (the first is ``now``) giving each step's own limit.
    Returns None when the first step exceeds its limit; otherwise a time inside the last step,
    among the next :data:`REPEAT_LOOKAHEAD`, before the first that exceeds it (half that step's
    duration before its end): given as ``Batch.wake_at_s``, the engine's window ends with that
    step and the policy decides at its end. The steps are timed as the engine times them (the
    rows of one ``times`` call equal one-row calls) and their ends accumulated from ``now`` left
    to right as the engine does (so the start times are the engine's floats too); the half step
    keeps the time inside the right step whatever the rounding.
    """
    k = REPEAT_LOOKAHEAD
    steps = timing.times(decode_run_features(batch, kv_tokens, k))
    ends = accumulate_from(now, steps)
    within = steps <= (limit_s(ends[:-1]) if callable(limit_s) else limit_s)
    if not within[0]:
        return None
    last = k - 1 if within.all() else int(np.argmin(within)) - 1
    # the cumulative sum runs left to right: its prefix is the sum over the first steps alone
    return float(ends[last + 1] - 0.5 * steps[last])


@dataclass
class AdmissionOrder:
    """Admission order of running requests per server (for latest-first preemption)."""

    order: dict[int, list[int]]

    def of(self, server: Server) -> list[int]:
        running = set(server.prefilling) | set(server.decoding)
        lst = self.order.setdefault(server.id, [])
        lst[:] = [r for r in lst if r in running]
        for r in server.prefilling + server.decoding:
            if r not in lst:
                lst.append(r)
        return lst


class PrefillFirstFCFS:
    """vLLM-style prefill-first FCFS scheduling (no chunking unless a token cap applies).

    Parameters
    ----------
    max_prefill_tokens : int
        Most prompt tokens admitted in one prefill iteration (0: the cluster's
        ``max_batch_tokens``, or unlimited). A prompt longer than the cap is split into chunks.
    """

    name = "vllm"

    def __init__(self, max_prefill_tokens: int = 0) -> None:
        if max_prefill_tokens < 0:
            raise ValueError(f"max_prefill_tokens must be >= 0, got {max_prefill_tokens}")
        self.max_prefill_tokens = max_prefill_tokens
        self._order = AdmissionOrder({})

    def start(self, instance: Instance, seed: int) -> None:
        self._order = AdmissionOrder({})

    def next_batch(self, server: Server) -> Batch:
        if server.role == "decode":
            return decode_server_batch(server)
        cap = self.max_prefill_tokens or server.max_batch_tokens or 1 << 62
        order = self._order.of(server)
        free = server.kv_free_tokens - len(server.decoding)
        prefill: list[tuple[int, int]] = []
        budget = cap
        slots = server.max_batch_size
        for r in server.prefilling:
            if budget <= 0 or slots <= 0:
                break
            c = min(server.remaining_prefill(r), budget)
            extra = 1 if c == server.remaining_prefill(r) else 0
            if c + extra > free:
                break
            prefill.append((r, c))
            free -= c + extra
            budget -= c
            slots -= 1
        for r in server.waiting:
            if budget <= 0 or slots <= 0:
                break
            rem = server.remaining_prefill(r)
            c = min(rem, budget)
            extra = 1 if c == rem else 0
            if rem + 1 > free:
                break
            prefill.append((r, c))
            order.append(r)
            free -= c + extra
            budget -= c
            slots -= 1
        if prefill:
            return Batch(prefill=prefill)
        decode = list(server.decoding[: server.max_batch_size])
        if not decode:
            return Batch()
        preempt = make_room_for_decode(server, decode, order)
        if preempt:
            return Batch(decode=decode, preempt=preempt)
        # nothing could be admitted: memory only shrinks while decoding, so the same choice
        # repeats until a request finishes or arrives
        full = len(decode) == len(server.decoding)
        return Batch(decode=server.decoding_ids() if full else decode, repeat=full)


class SarathiFCFS:
    """Sarathi-Serve: fixed token budget, decode first, then FCFS prefill chunks.

    Parameters
    ----------
    token_budget : int
        Tokens per iteration (decode tokens plus prefill chunk tokens); 0 uses the cluster's
        ``max_batch_tokens``.
    """

    name = "sarathi"

    def __init__(self, token_budget: int = 0) -> None:
        if token_budget < 0:
            raise ValueError(f"token_budget must be >= 0, got {token_budget}")
        self.token_budget = token_budget
        self._order = AdmissionOrder({})

    def start(self, instance: Instance, seed: int) -> None:
        self._order = AdmissionOrder({})
        if not (self.token_budget or instance.cluster.max_batch_tokens):
            raise ValueError("SarathiFCFS needs token_budget > 0 or cluster.max_batch_tokens > 0")

    def _budget(self, server: Server) -> int:
        return self.token_budget or server.max_batch_tokens

    def next_batch(self, server: Server) -> Batch:
        if server.role == "decode":
            return decode_server_batch(server)
        budget = self._budget(server)
        order = self._order.of(server)
        decode = list(server.decoding[: min(server.max_batch_size, budget)])
        preempt = make_room_for_decode(server, decode, order)
        budget -= len(decode)
        slots = server.max_batch_size - len(decode)
        free = server.kv_free_tokens - len(decode)
        if preempt:
            free += server.kv_freed_by_preempting(preempt)
        prefill: list[tuple[int, int]] = []
        candidates = [r for r in server.prefilling if r not in preempt]
        admit = [r for r in server.waiting]
        for r in candidates + admit:
            if budget <= 0 or slots <= 0:
                break
            rem = server.remaining_prefill(r) if r not in preempt else 0
            if rem == 0:
                continue
            c = min(rem, budget)
            extra = 1 if c == rem else 0
            new = r in admit
            if (rem + 1 if new else c + extra) > free:
                break
            prefill.append((r, c))
            if new:
                order.append(r)
            free -= c + extra
            budget -= c
            slots -= 1
        if not prefill and not decode:
            return Batch(preempt=preempt)
        repeat = not prefill and not preempt and len(decode) == len(server.decoding)
        return Batch(prefill=prefill, decode=decode, preempt=preempt, repeat=repeat)


class EDFTokens(SarathiFCFS):
    """Earliest deadline first over token deadlines, within a Sarathi-style token budget.

    Items are decode tokens (deadline of the request's next token) and prefill chunks (deadline
    of the first token); they are taken in deadline order until the budget or memory is used.
    """

    name = "edf"

    def _items(self, server: Server) -> list[tuple[int, int]]:
        """``(kind, request)`` in the order they are offered the budget (kind 0 decode, 1
        prefill): here by the deadline of the request's next token. Subclasses change the
        order and keep the budget and memory rules."""
        items: list[tuple[float, int, int]] = []  # (deadline, kind 0 decode / 1 prefill, request)
        for r in server.decoding:
            items.append((server.next_token_deadline(r), 0, r))
        for r in server.prefilling + server.waiting:
            items.append((server.next_token_deadline(r), 1, r))
        items.sort()
        return [(kind, r) for _, kind, r in items]

    def next_batch(self, server: Server) -> Batch:
        if server.role == "decode":
            return decode_server_batch(server)
        budget = self._budget(server)
        order = self._order.of(server)
        items = self._items(server)
        decode: list[int] = []
        prefill: list[tuple[int, int]] = []
        free = server.kv_free_tokens
        slots = server.max_batch_size
        waiting = set(server.waiting)
        for kind, r in items:
            if budget <= 0 or slots <= 0:
                break
            if kind == 0:
                if free < 1:
                    continue
                decode.append(r)
                free -= 1
                budget -= 1
                slots -= 1
                continue
            rem = server.remaining_prefill(r)
            c = min(rem, budget)
            extra = 1 if c == rem else 0
            need = rem + 1 if r in waiting else c + extra
            if need > free:
                continue
            prefill.append((r, c))
            if r in waiting:
                order.append(r)
            free -= c + extra
            budget -= c
            slots -= 1
        preempt: list[int] = []
        if not decode and not prefill and server.decoding:
            decode = list(server.decoding[: min(server.max_batch_size, budget)])
            preempt = make_room_for_decode(server, decode, order)
        if not prefill and not decode:
            return Batch(preempt=preempt)
        # decode-only with budget and slots to spare: the prefill items were skipped for memory,
        # which only shrinks while decoding, so the same choice repeats
        repeat = (
            not prefill
            and not preempt
            and len(decode) == len(server.decoding)
            and budget > 0
            and slots > 0
        )
        return Batch(prefill=prefill, decode=decode, preempt=preempt, repeat=repeat)


class StaticFCFS:
    """Static batching: the next batch is the first ``batch_size`` waiting requests."""

    name = "static-fcfs"
    modes = ("static",)

    def __init__(self, batch_size: int = 0) -> None:
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        self.batch_size = batch_size

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def next_batch(self, server: Server) -> Batch:
        size = self.batch_size or server.max_batch_size
        members: list[int] = []
        free = server.kv_free_tokens
        for r in server.waiting[:size]:
            need = server.prompt(r) + server.output(r)
            if need > free:
                break
            members.append(r)
            free -= need
        return Batch(static=members)


class RoundRobin:
    """Route request ``i`` to server ``i mod S`` (in arrival order)."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def start(self, instance: Instance, seed: int) -> None:
        self._next = 0

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        k = self._next % len(servers)
        self._next += 1
        return k


class RandomRouter:
    """Route each request to a uniformly random server (seeded by the run's seed)."""

    name = "random"

    def __init__(self) -> None:
        self._rng = np.random.default_rng(0)

    def start(self, instance: Instance, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return int(self._rng.integers(len(servers)))


class LeastLoaded:
    """Route to the server with the fewest queued and running requests (then least KV, index),
    preferring servers that are ready over servers still starting."""

    name = "least-loaded"

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return min(
            range(len(servers)),
            key=lambda j: (not servers[j].ready, servers[j].load, servers[j].kv_used_tokens, j),
        )


register_policy("vllm", PrefillFirstFCFS, "vLLM-style prefill-first FCFS (recompute preemption)")
register_policy(
    "sarathi",
    SarathiFCFS,
    "Sarathi-Serve: token budget per iteration, decode first, FCFS prefill chunks",
    token_budget=True,
)
register_policy(
    "edf",
    EDFTokens,
    "earliest token deadline first within a Sarathi token budget",
    token_budget=True,
)
register_policy("static-fcfs", StaticFCFS, "static batching, first come first served")
register_router("round-robin", RoundRobin, "request i to server i mod S")
register_router("random", RandomRouter, "a uniformly random server (seeded)")
register_router("least-loaded", LeastLoaded, "fewest queued and running requests, then least KV")

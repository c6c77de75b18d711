"""SCORPIO on one worker (:class:`ScorpioPolicy`), the baseline HyperFlexis compares with behind
round robin (``scorpio-rr`` of the dispatch-scale problem).

It times iterations with the worker's own latency model, HyperFlexis's Eqs. 1-2
(:func:`slolab.heuristics.hyperflexis.prefill_s`, :func:`~slolab.heuristics.hyperflexis.
decode_step_s`), as the dispatcher does.

References
----------
Tang et al., "SCORPIO: Serving the Right Requests at the Right Time for Heterogeneous SLOs in
LLM Inference", 2025 (TTFT Guard, TPOT Guard, credit-based batching); HyperFlexis, Sec. 7.4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from slolab.heuristics.baselines import (
    AdmissionOrder,
    decode_steps_within_until_s,
    make_room_for_decode,
)
from slolab.heuristics.hyperflexis import kv_monotone, prefill_s, safely_before
from slolab.heuristics.policies import register_policy
from slolab.sim.policy import Batch
from slolab.timing.base import F_DECODE_KV, F_DECODE_TOKENS, F_NUM_DECODE, N_FEATURES

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.timing.base import TimingModel

__all__ = ["ScorpioPolicy"]


class ScorpioPolicy:
    """SCORPIO on one worker: a TTFT guard and a TPOT guard (HyperFlexis's baseline).

    - TTFT guard: waiting requests in least-deadline-first order (deadline ``arrival + TTFT``);
      a request that cannot meet its TTFT even if prefilled alone now is unattainable: moved
      behind the others (``reject_unattainable=False``, the default here, so every method
      serves every request and costs compare like for like) or rejected (but for a request
      that had tokens and was preempted: it is served to the end).
    - TPOT guard: virtual-batch-size admission — a request joins only while the step time at
      the virtual batch ``sum_r min(1, T_min / TPOT_r)`` (each request counted by how often it
      needs a token) stays within the tightest TPOT ``T_min``; credit-based batching — when a
      step of every decoding request would exceed ``T_min``, requests decode in the order of
      their pace (a request earns one credit per TPOT from its first token: its next token is
      due at ``first + generated x TPOT``) while the step stays within ``T_min``, so looser
      requests skip steps.
    - Prefill first, whole prompts (vLLM's worker), as many as fit in the iteration's
      ``max_batch_tokens``; a prompt longer than the cap alone is prefilled in chunks of the
      cap, before anything else is admitted (ours: the cap is the engine's configuration).

    Repeated decode batches (speed; the same decisions): a decision that decodes every running
    request (their step within the tightest TPOT ``T_min``), admits, rejects and preempts
    nothing is marked ``repeat=True``, and the engine runs it without asking again until a
    request arrives, one finishes, memory runs out, or ``wake_at_s``. Until then every decision
    would be the same. Nothing is prefilling. Nothing is admitted: the loop over the queue
    stops at its head, and a head that does not fit stays so while the batch only decodes (the
    batch size is fixed, the free memory only shrinks, and its step check reads more KV
    tokens each step, on a model whose step time never falls with them; on other models the
    batch repeats only with an empty queue). The head changes only when a waiting request turns
    late (``now + alone > deadline``), which also is when one may be rejected: ``wake_at_s`` is
    no later than the first such time. The decode part stays the whole batch while its step
    stays within ``T_min``, timed step by step ahead as the engine times it
    (:func:`~slolab.heuristics.baselines.decode_steps_within_until_s`); the credit-based
    choice, which rotates among the requests, never repeats. ``tests/heuristics/
    test_scorpio_speed.py`` checks the tokens against one decision per iteration, bit for bit.

    References
    ----------
    Tang et al., "SCORPIO: Serving the Right Requests at the Right Time for Heterogeneous SLOs
    in LLM Inference", 2025 (TTFT Guard, TPOT Guard, credit-based batching); HyperFlexis,
    Sec. 7.4 (with round robin over instances).
    """

    name = "scorpio"
    #: a co-located design: one worker runs prefill and decode (HyperFlexis, Sec. 7.4, runs
    #: it in the collocated system)
    modes = ("colocated",)

    def __init__(self, reject_unattainable: bool = False) -> None:
        self.reject_unattainable = reject_unattainable
        self._first: dict[int, float] = {}
        self._order = AdmissionOrder({})
        self._servers: dict[int, _ScorpioServer] = {}
        self.ttft = np.zeros(0)
        self.tpot = np.zeros(0)

    def start(self, instance: Instance, seed: int) -> None:
        """Reset for a run (no random choice; ``seed`` is unused)."""
        from slolab.sim.metrics import deadline_slos

        ttft, tpot = deadline_slos(instance.workload)
        self.ttft = np.asarray(ttft, dtype=float)
        self.tpot = np.asarray(tpot, dtype=float)
        self._first = {}
        self._order = AdmissionOrder({})
        self._servers = {}

    def _virtual(self, ids: Sequence[int], t_min: float) -> float:
        return sum(min(t_min / self.tpot[r], 1.0) if self.tpot[r] > 0 else 1.0 for r in ids)

    def _state(self, server: Server) -> _ScorpioServer:
        """The server's cached quantities, brought up to date with its queues."""
        st = self._servers.get(server.id)
        if st is None or st.timing is not server.timing:
            st = self._servers[server.id] = _ScorpioServer(server.timing)
        decoding = server.decoding
        if decoding is not st.decoding:
            st.decoding = decoding
            now = server.now
            for r in decoding:
                self._first.setdefault(r, now)
            tpot = self.tpot
            st.running_t_min = min((tpot[r] for r in decoding if tpot[r] > 0), default=math.inf)
            st.vbs = {}
        waiting = server.waiting
        if waiting is not st.waiting:
            st.waiting = waiting
            ids = np.fromiter(waiting, dtype=np.int64, count=len(waiting))
            arrival = np.fromiter((server.arrival(r) for r in waiting), float, len(waiting))
            deadline = arrival + self.ttft[ids]
            by_deadline = np.lexsort((arrival, deadline))  # stable: ties keep queue order
            st.queue = ids[by_deadline].tolist()
            st.deadline = deadline[by_deadline]
            st.alone = np.array([st.alone_s(server.remaining_prefill(r)) for r in st.queue])
        return st

    def _admission_order(self, server: Server, st: _ScorpioServer) -> list[int]:
        """:meth:`AdmissionOrder.of`, skipped while the server's running requests and the
        list are as the last call left them (it would change nothing)."""
        key = (server.prefilling, server.decoding)
        if st.order_key is None or key[0] is not st.order_key[0] or key[1] is not st.order_key[1]:
            st.order_list = self._order.of(server)
            st.order_key = key
        return st.order_list

    def next_batch(self, server: Server) -> Batch:
        st = self._state(server)
        room = server.max_batch_tokens or 1 << 62
        if server.prefilling:
            # a prompt longer than the cap, started alone: its chunks go first, so that no
            # prompt admitted meanwhile takes the KV cache it was admitted with
            r = server.prefilling[0]
            return Batch(prefill=[(r, min(server.remaining_prefill(r), room))])
        now = server.now
        tpot = self.tpot
        queue: Sequence[int] = st.queue
        rejected: list[int] = []  # turned away in this decision, which goes on without them
        late_at = None
        if queue:
            # late: cannot meet its TTFT even if prefilled alone now (same sums as
            # ``now + prefill_s(...) > arrival + TTFT`` per request)
            late_at = now + st.alone > st.deadline
            if late_at.any():
                late = [queue[i] for i in np.flatnonzero(late_at).tolist()]
                # a request that has had tokens (then preempted) is served to the end
                turned_away = [r for r in late if not server.generated(r)]
                if self.reject_unattainable and turned_away:
                    rejected = turned_away
                    late = [r for r in late if server.generated(r)]
                queue = [queue[i] for i in np.flatnonzero(~late_at).tolist()] + late
        running = server.decoding
        n_running = len(running)
        free = server.kv_free_tokens - n_running
        kv_running = int(server.kv_held_of(server.decoding_ids()).sum()) if n_running else 0
        prefill: list[tuple[int, int]] = []
        t_members = st.running_t_min  # tightest TPOT of the running and admitted requests
        kv_admitted = 0
        for r in queue:
            if n_running + len(prefill) >= server.max_batch_size:
                break
            need = server.remaining_prefill(r)
            if need + 1 > free:
                break
            take = min(need, room)
            if take < need and prefill:
                break  # whole prompts only, but for a lone prompt longer than the cap
            t_min = min(t_members, tpot[r]) if tpot[r] > 0 else t_members
            if n_running:
                key = (tuple(q for q, _ in prefill), r)
                vbs = st.vbs.get(key)
                if vbs is None:
                    members = [*running, *key[0], r]
                    vbs = st.vbs[key] = math.ceil(self._virtual(members, t_min))
                kv = kv_running + kv_admitted + need + 1
                if not st.step_within(vbs, kv, t_min):
                    break
            prefill.append((r, take))
            t_members = t_min
            kv_admitted += server.prompt(r) + 1
            free -= need + 1
            room -= take
            if take < need:
                break
        if prefill:
            order = self._admission_order(server, st)
            order.extend(r for r, _ in prefill)
            st.order_key = None
            return Batch(prefill=prefill, reject=rejected)
        if not n_running:
            return Batch(reject=rejected)
        t_min = st.running_t_min
        whole = st.step_within(n_running, kv_running, t_min)
        if whole:
            decode = list(running[: server.max_batch_size])
        else:
            # the whole batch would exceed the tightest TPOT: requests by their pace (credits),
            # while the step stays within it; the most behind always runs
            def pace(r: int) -> float:
                if tpot[r] <= 0:
                    return -math.inf
                return self._first[r] + server.generated(r) * tpot[r]

            decode, kv = [], 0
            for r in sorted(running, key=pace):
                held = server.kv_held(r)
                if decode and (
                    not st.step_within(len(decode) + 1, kv + held, t_min)
                    or len(decode) >= server.max_batch_size
                ):
                    break
                decode.append(r)
                kv += held
        if len(decode) > server.kv_free_tokens:
            preempt = make_room_for_decode(server, decode, self._admission_order(server, st))
            st.order_key = None
        else:
            preempt = []  # one step fits: nothing to preempt
            if (
                whole
                and not rejected
                and n_running <= server.max_batch_size
                and (not queue or st.kv_monotone)
            ):
                wake = decode_steps_within_until_s(server.timing, now, n_running, kv_running, t_min)
                if wake is not None:
                    if late_at is not None and not late_at.all():
                        # a waiting request turning late reorders the queue (or is rejected)
                        wake = min(wake, self._turns_late_s(st, late_at))
                    return Batch(decode=server.decoding_ids(), repeat=True, wake_at_s=wake)
        return Batch(decode=decode, preempt=preempt, reject=rejected)

    @staticmethod
    def _turns_late_s(st: _ScorpioServer, late_at: np.ndarray) -> float:
        """A time no later than the first at which a waiting request not late now turns late
        (``now + alone > deadline``): the least ``deadline - alone`` less 1 ns (and a relative
        1e-12), which the rounding of the sum cannot cross."""
        on_time = ~late_at
        return safely_before(float((st.deadline[on_time] - st.alone[on_time]).min()))


class _ScorpioServer:
    """What :class:`ScorpioPolicy` keeps per server between decisions, each part recomputed
    only when what it depends on changed (the server's queue tuples are new objects whenever
    their contents change).

    - ``queue``, ``deadline``, ``alone``: the waiting requests in least-deadline-first order,
      their TTFT deadlines and the time of prefilling each alone (its remaining prompt), for
      the waiting tuple ``waiting``;
    - ``running_t_min``, ``vbs``: the tightest TPOT of the decoding requests and the virtual
      batch sizes met so far (by admitted prefix and candidate), for the tuple ``decoding``;
    - ``order_key``, ``order_list``: the admission order and the queues it was brought up
      to date with (None once the list was changed);
    - ``prefill_alone``: prefill times of lone prompts by length, on this server's timing
      model; ``decode_row``: the feature row of :meth:`step_s`; ``most_kv``: the most KV
      tokens a decode step reads within a time, by batch and time (:meth:`step_within`).
    """

    __slots__ = (
        "alone",
        "deadline",
        "decode_row",
        "decoding",
        "kv_monotone",
        "most_kv",
        "order_key",
        "order_list",
        "prefill_alone",
        "queue",
        "running_t_min",
        "timing",
        "vbs",
        "waiting",
    )

    def __init__(self, timing: TimingModel) -> None:
        self.timing = timing
        self.decode_row = np.zeros((1, N_FEATURES))
        self.kv_monotone = kv_monotone(timing)
        self.most_kv: dict[tuple[int, float], int] = {}
        self.prefill_alone: dict[int, float] = {}
        self.waiting: tuple[int, ...] | None = None
        self.queue: list[int] = []
        self.deadline = np.zeros(0)
        self.alone = np.zeros(0)
        self.decoding: tuple[int, ...] | None = None
        self.running_t_min: float = math.inf
        self.vbs: dict[tuple[tuple[int, ...], int], int] = {}
        self.order_key: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self.order_list: list[int] = []

    def alone_s(self, prompt: int) -> float:
        """:func:`prefill_s` of one prompt of ``prompt`` tokens (cached by length)."""
        t = self.prefill_alone.get(prompt)
        if t is None:
            t = self.prefill_alone[prompt] = prefill_s(self.timing, [prompt])
        return t

    def step_s(self, batch: int, kv_tokens: int) -> float:
        """:func:`decode_step_s` without the by-name feature lookup: the same feature row
        (so the same time, bit for bit), filled in place."""
        if batch <= 0:
            return 0.0
        row = self.decode_row
        row[0, F_DECODE_TOKENS] = row[0, F_NUM_DECODE] = float(batch)
        row[0, F_DECODE_KV] = float(kv_tokens)
        return float(self.timing.times(row)[0])

    def step_within(self, batch: int, kv_tokens: int, limit_s: float) -> bool:
        """``step_s(batch, kv_tokens) <= limit_s``.

        With a model whose step time never falls as the KV tokens read grow (linear and
        roofline models with non-negative KV coefficients: each rounded product and sum is
        non-decreasing in its operands), through the most KV tokens a step of ``batch`` may
        read within ``limit_s``, found once by bisection on :meth:`step_s` itself; any other
        model evaluates the step.
        """
        if not self.kv_monotone:
            return self.step_s(batch, kv_tokens) <= limit_s
        key = (batch, limit_s)
        most = self.most_kv.get(key)
        if most is None:
            most = self.most_kv[key] = self._most_kv(batch, limit_s)
        return kv_tokens <= most

    def _most_kv(self, batch: int, limit_s: float) -> int:
        """The largest KV tokens (up to 2**53) a step of ``batch`` reads within ``limit_s``,
        -1 when none."""
        if not self.step_s(batch, 0) <= limit_s:
            return -1
        lo, hi = 0, 1
        while self.step_s(batch, hi) <= limit_s:
            lo, hi = hi, 2 * hi
            if hi > 1 << 53:
                return 1 << 53
        while hi - lo > 1:  # step(lo) within, step(hi) not
            mid = (lo + hi) // 2
            if self.step_s(batch, mid) <= limit_s:
                lo = mid
            else:
                hi = mid
        return lo


register_policy("scorpio", ScorpioPolicy, "SCORPIO: TTFT guard (LDF) and TPOT guard (VBS, credits)")

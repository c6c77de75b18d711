"""SLOs-Serve online: soft admission control, planned batches, best effort and routing.

:class:`SLOsServePolicy` runs SLOs-Serve's scheduling loop (Algorithm 1) in the engine:

1. **Scheduler calls.** A server's undecided requests (routed or forwarded to it, not yet
   admitted, declined or forwarded on) are decided together when there are at least
   ``arrival_threshold`` of them, when the oldest has waited ``timeout_s``, or at once when
   the server has no admitted work. A call builds an
   :class:`~slolab.models.slos_admission.AdmissionProblem` from the server's admitted
   requests (forced) and the undecided ones and runs the multi-SLO DP
   (:func:`~slolab.heuristics.slos_serve_dp.slos_dp`); its wall time is appended to
   :attr:`SLOsServePolicy.call_times_s`.
2. **Planned batches.** Every iteration carries at most ``C = time2bs(t0)`` tokens, ``t0`` the
   tightest TPOT among the server's admitted requests (shortened to the nearest pending
   prefill deadline with ``dynamic_batch``). Admitted decode tokens that fall due
   (the next token's deadline ends before the iteration after this one) go first, earliest
   deadline first; then admitted prefills, earliest prefill deadline first, in chunks; then
   the leftover budget decodes admitted requests ahead of their cadence.
3. **Best effort.** Declined requests use what is left of the budget and the memory not
   reserved for the admitted requests' remaining growth; they are preempted (recomputed
   later) when admitted work needs their memory, and the latest started one is preempted
   when memory is full and only best-effort requests could grow (the others go on).
4. **Sequential routing.** With several replicas a declined request is forwarded to the next
   replica (the next server id, cyclically, among those accepting new requests) until it has
   made ``max_hops`` hops; then it
   becomes best effort where it is (or is rejected, ``decline_action="reject"``). The hops are
   in :attr:`SLOsServePolicy.hops`.

The first placement of a request is the router's (``RoundRobin`` or ``LeastLoaded`` of
:mod:`slolab.heuristics.baselines`); this module adds no router of its own.

References
----------
Chen et al., "SLOs-Serve: Optimized Serving of Multi-SLO LLMs", 2025: Algorithm 1 and
Sec. 3.1 (scheduler calls, soft admission control), Sec. 3.2.1 and Algorithm 2 (the DP and
the batch formation), Sec. 4.1 (best-effort tier with preemption), Sec. 4.2 (SLO-driven
sequential routing).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from slolab.heuristics.policies import register_policy
from slolab.heuristics.slos_serve_dp import slos_dp
from slolab.instances.records import cached_prompt_tokens
from slolab.models.slos_admission import AdmissionProblem
from slolab.sim.policy import Batch
from slolab.timing.base import F_PREFILL_TOKENS, N_FEATURES, TimingModel
from slolab.timing.inverse import time2bs

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server

__all__ = ["DECLINE_ACTIONS", "SLOsServeParams", "SLOsServePolicy"]

logger = logging.getLogger("slolab")

#: What happens to a request declined on its last replica.
DECLINE_ACTIONS = ("best-effort", "reject")

_SLO, _BEST_EFFORT = "slo", "best-effort"


@dataclass(frozen=True, slots=True)
class SLOsServeParams:
    """Settings of :class:`SLOsServePolicy`.

    Parameters
    ----------
    arrival_threshold : int
        Call the scheduler when at least this many undecided requests wait on a server
        (Algorithm 1's ``thresh_new``; the paper gives no value, 1 decides every arrival batch
        at the next iteration boundary).
    timeout_s : float
        Call the scheduler when the oldest undecided request has waited this long (s).
    max_hops : int or None
        Forwards a declined request may make before its fallback; None: one pass over the
        replicas (``servers - 1``). The paper leaves the limit to configuration.
    memory_unit : int
        KV tokens per DP memory unit (see :func:`slos_dp`).
    budget_unit : int
        Tokens per DP prefill-budget unit.
    decline_action : {"best-effort", "reject"}
        Fallback of a request declined on its last replica.
    dynamic_batch : bool
        Shorten the planned batch duration below the tightest TPOT to the nearest pending
        prefill deadline (see :meth:`SLOsServePolicy._batch_duration_s`); False keeps the
        paper's fixed ``t0`` = tightest TPOT.
    """

    arrival_threshold: int = 1
    timeout_s: float = 0.05
    max_hops: int | None = None
    memory_unit: int = 64
    budget_unit: int = 1
    decline_action: str = "best-effort"
    dynamic_batch: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.arrival_threshold, bool) or self.arrival_threshold < 1:
            raise ValueError(f"arrival_threshold must be an int >= 1, got {self.arrival_threshold}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s >= 0):
            raise ValueError(f"timeout_s must be a finite number >= 0, got {self.timeout_s}")
        if self.max_hops is not None and (isinstance(self.max_hops, bool) or self.max_hops < 0):
            raise ValueError(f"max_hops must be None or an int >= 0, got {self.max_hops}")
        for name in ("memory_unit", "budget_unit"):
            unit = getattr(self, name)
            if isinstance(unit, bool) or int(unit) != unit or unit < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {unit!r}")
        if self.decline_action not in DECLINE_ACTIONS:
            raise ValueError(
                f"decline_action must be one of {DECLINE_ACTIONS}, got {self.decline_action!r}"
            )


def _freed_more(server: Server, preempt: list[int], victim: int) -> int:
    """KV tokens preempting ``victim`` frees beyond preempting ``preempt`` (its cached prompt
    blocks other running requests use stay resident)."""
    return server.kv_freed_by_preempting([*preempt, victim]) - server.kv_freed_by_preempting(
        preempt
    )


class SLOsServePolicy:
    """SLOs-Serve's online scheduler (colocated servers).

    Parameters
    ----------
    params : SLOsServeParams, optional
        Thresholds, hop limit, DP discretization, fallback.

    Attributes
    ----------
    call_times_s : list of float
        Wall time of each scheduler call's DP (s), in call order.
    call_sizes : list of (int, int)
        ``(new, running)`` requests of each call.
    hops : dict of int to int
        Forwards made by each request that was forwarded at least once.
    tier : dict of int to str
        ``"slo"`` (admitted) or ``"best-effort"`` for every decided request.

    References
    ----------
    SLOs-Serve, Algorithm 1, Sec. 3.1-3.2 and 4.1-4.2 (see the module docstring).
    """

    name = "slos-serve"
    modes = ("colocated",)

    def __init__(self, params: SLOsServeParams | None = None, capture_calls: bool = False) -> None:
        self.params = params if params is not None else SLOsServeParams()
        #: keep every scheduler call's (request rows, AdmissionProblem) in ``captured_calls``
        self.capture_calls = capture_calls
        self._reset()

    def _reset(self) -> None:
        self.call_times_s: list[float] = []
        self.call_sizes: list[tuple[int, int]] = []
        self.captured_calls: list[tuple[list[int], AdmissionProblem]] = []
        self.hops: dict[int, int] = {}
        self.tier: dict[int, str] = {}
        self._seen_s: dict[int, float] = {}
        self._started: dict[int, list[int]] = {}
        self._ttft = np.zeros(0)
        self._tpot = np.zeros(0)
        self._has_slo = np.zeros(0, dtype=bool)
        self._cached = np.zeros(0, dtype=np.int64)
        self._one_token_s = 0.0
        #: per timing model (by id, kept alive with it): time2bs's answer per batch duration
        self._tokens_within: dict[int, tuple[TimingModel, dict[float, int]]] = {}

    def start(self, instance: Instance, seed: int) -> None:
        """Reset the state for a run (the policy makes no random choice; ``seed`` is unused)."""
        self._reset()
        one = np.zeros((1, N_FEATURES))
        one[0, F_PREFILL_TOKENS] = 1
        self._one_token_s = float(instance.timing.times(one)[0])
        wl = instance.workload
        self._ttft = np.asarray(wl["ttft_slo_s"], dtype=float)
        self._tpot = np.asarray(wl["tpot_slo_s"], dtype=float)
        # a snapshot's given cache: what each request never computes nor holds against memory
        self._cached = cached_prompt_tokens(wl)
        self._has_slo = (
            np.isfinite(self._ttft) & np.isfinite(self._tpot) & (self._tpot > 0) & (self._ttft > 0)
        )

    # -- helpers ---------------------------------------------------------------------------
    def _cached_prompt(self, r: int) -> int:
        """Prompt tokens of ``r`` in the given cache: held outside the capacity."""
        return int(self._cached[r])

    def _batch_tokens(self, server: Server, t0: float) -> int:
        # time2bs is a pure function of the timing model and t0, and a run asks it for few
        # distinct t0 (measured: 46 of 12,223 calls on 1,000 Mooncake requests, 8 servers)
        known = self._tokens_within.get(id(server.timing))
        if known is None or known[0] is not server.timing:
            known = self._tokens_within[id(server.timing)] = (server.timing, {})
        cap = known[1].get(t0)
        if cap is None:
            cap = known[1][t0] = time2bs(server.timing, t0)
        if server.max_batch_tokens:
            cap = min(cap, server.max_batch_tokens)
        return max(cap, 1)

    def _batch_duration_s(self, tightest_tpot_s: float, prefill_deadlines_s: np.ndarray) -> float:
        """Planned batch duration ``t0``: the tightest TPOT, shortened to the nearest prefill
        deadline (relative to now) that a one-token batch can still meet.

        With ``t0`` the tightest TPOT only, a prompt whose TTFT is shorter than that TPOT (a
        short prompt under a 3x-zero-load TTFT) could never be admitted; shortening the
        batches while such a prefill is pending is the dynamic batch sizing of Sec. 3.2.
        """
        if not self.params.dynamic_batch:
            return tightest_tpot_s
        reachable = prefill_deadlines_s[prefill_deadlines_s >= self._one_token_s]
        if reachable.size == 0:
            return tightest_tpot_s
        return min(tightest_tpot_s, float(reachable.min()))

    @staticmethod
    def _other_replicas(server: Server) -> list[Server]:
        """The other replicas accepting new requests, in the order after ``server`` (by id,
        cyclically)."""
        others = [p for p in server.peers if p.id != server.id]
        after = [p for p in others if p.id > server.id]
        return after + [p for p in others if p.id < server.id]

    def _hop_limit(self, others: list[Server]) -> int:
        if self.params.max_hops is not None:
            return self.params.max_hops
        return len(others)

    # -- scheduler call --------------------------------------------------------------------
    def _decide(self, server: Server, undecided: list[int], admitted: list[int]) -> Batch:
        """Run the DP on ``undecided`` with ``admitted`` forced; return forwards and rejects."""
        now = server.now
        forward: list[tuple[int, int]] = []
        reject: list[int] = []
        candidates = [r for r in undecided if self._has_slo[r]]
        for r in undecided:
            if not self._has_slo[r]:
                self.tier[r] = _BEST_EFFORT
        accepted: set[int] = set()
        if candidates:
            rows = admitted + candidates
            remaining = np.array([server.remaining_prefill(r) for r in rows], dtype=np.int64)
            running = np.arange(len(rows)) < len(admitted)
            deadline = np.array([server.token_deadline(r, 1) - now for r in rows], dtype=float)
            tpot = self._tpot[rows]
            prompt = np.array([server.prompt(r) for r in rows], dtype=np.int64)
            output = np.array([server.output(r) for r in rows], dtype=np.int64)
            generated = np.array([server.generated(r) for r in rows], dtype=np.int64)
            t0 = self._batch_duration_s(float(tpot.min()), deadline[remaining > 0])
            # a forced prefill that can no longer meet its deadline has lost its TTFT; it is
            # planned, and served, after every on-time prefill
            late = running & (remaining > 0) & (deadline < t0)
            if late.any():
                capacity = self._batch_tokens(server, t0)
                on_time = deadline[(remaining > 0) & ~late]
                last = float(on_time.max()) if on_time.size else 0.0
                need = t0 * (math.ceil(int(remaining[late].sum()) / capacity) + 1)
                deadline[late] = max(last, 0.0) + need
            deadline = np.where(remaining > 0, deadline, np.nan)
            problem = AdmissionProblem(
                running=running,
                remaining_prefill_tokens=remaining,
                prefill_deadline_s=deadline,
                tpot_s=tpot,
                kv_tokens=prompt + output - self._cached[rows],
                value=np.where(running, 0.0, 1.0),
                output_tokens=output,
                kv_capacity_tokens=server.kv_capacity_tokens,
                timing=server.timing,
                generated_tokens=np.minimum(generated, output),
                call_time_s=now,
                batch_duration_s=t0,
            )
            decision = slos_dp(problem, self.params.memory_unit, self.params.budget_unit)
            self.call_times_s.append(decision.runtime_s)
            self.call_sizes.append((len(candidates), len(admitted)))
            if self.capture_calls:
                self.captured_calls.append((list(rows), problem))
            accepted = {rows[i] for i in decision.admitted}
        others = self._other_replicas(server)
        limit = self._hop_limit(others)
        for r in candidates:
            if r in accepted:
                self.tier[r] = _SLO
                continue
            hops = self.hops.get(r, 0)
            if hops < limit and others:
                self.hops[r] = hops + 1
                self._seen_s.pop(r, None)
                forward.append((r, others[0].id))
            elif self.params.decline_action == "reject":
                reject.append(r)
            else:
                self.tier[r] = _BEST_EFFORT
        return Batch(forward=forward, reject=reject)

    # -- batch formation -------------------------------------------------------------------
    def next_batch(self, server: Server) -> Batch:
        """Decide pending arrivals when a call is due, then form the next planned batch."""
        now = server.now
        running = server.prefilling + server.decoding
        undecided = [r for r in server.waiting if r not in self.tier]
        for r in undecided:
            self._seen_s.setdefault(r, now)
        admitted = [r for r in running + server.waiting if self.tier.get(r) == _SLO]
        routing = Batch()
        if undecided and (
            not admitted
            or len(undecided) >= self.params.arrival_threshold
            or now - min(self._seen_s[r] for r in undecided) >= self.params.timeout_s - 1e-12
        ):
            routing = self._decide(server, undecided, admitted)
            admitted = [r for r in running + server.waiting if self.tier.get(r) == _SLO]
        gone = {r for r, _ in routing.forward} | set(routing.reject)
        batch = self._form(server, admitted, gone)
        batch.forward = routing.forward
        batch.reject = [*routing.reject, *batch.reject]
        if batch.empty and not routing.forward and not routing.reject and not batch.preempt:
            pending = [r for r in server.waiting if r not in self.tier]
            if pending:
                wake = min(self._seen_s[r] for r in pending) + self.params.timeout_s
                batch.wake_at_s = max(wake, math.nextafter(now, math.inf))
        return batch

    def _form(self, server: Server, admitted: list[int], gone: set[int]) -> Batch:
        now = server.now
        adm = set(admitted)
        order = self._started.setdefault(server.id, [])
        running_now = set(server.prefilling) | set(server.decoding)
        order[:] = [r for r in order if r in running_now]
        if admitted:
            tpot_t0 = float(self._tpot[admitted].min())
        else:
            slo_tpot = self._tpot[self._has_slo]
            tpot_t0 = float(slo_tpot.min()) if slo_tpot.size else 0.05
        pending = np.array(
            [
                server.token_deadline(r, 1) - now
                for r in admitted
                if r not in gone and server.remaining_prefill(r) > 0
            ]
        )
        t0 = self._batch_duration_s(tpot_t0, pending)
        budget = self._batch_tokens(server, t0)
        slots = server.max_batch_size
        free = server.kv_free_tokens
        decode: list[int] = []
        prefill: list[tuple[int, int]] = []
        preempt: list[int] = []
        in_batch: set[int] = set()
        waiting = set(server.waiting)

        def victims_free(need: int) -> bool:
            """Preempt running best-effort requests (latest started first) until ``need`` fits."""
            nonlocal free
            while need > free:
                victim = next(
                    (
                        v
                        for v in reversed(order)
                        if self.tier.get(v) != _SLO and v not in preempt and v not in in_batch
                    ),
                    None,
                )
                if victim is None:
                    return False
                free += _freed_more(server, preempt, victim)
                preempt.append(victim)
            return True

        def add_prefill(r: int, slo: bool, headroom: int) -> None:
            nonlocal free, budget, slots
            rem = server.remaining_prefill(r)
            c = min(rem, budget)
            if c <= 0 or slots <= 0:
                return
            need = c + (1 if c == rem else 0)
            if r in waiting and not slo:
                # a best-effort start needs room for its whole (re)prefill
                if rem + 1 > free - headroom:
                    return
            elif slo:
                if not victims_free(need):
                    return
            elif need > free - headroom:
                return
            prefill.append((r, c))
            in_batch.add(r)
            if r in waiting:
                order.append(r)
            free -= need
            budget -= c
            slots -= 1

        def add_decode(r: int, slo: bool, headroom: int) -> None:
            nonlocal free, budget, slots
            if budget <= 0 or slots <= 0:
                return
            if slo:
                if not victims_free(1):
                    return
            elif free - headroom < 1:
                return
            decode.append(r)
            in_batch.add(r)
            free -= 1
            budget -= 1
            slots -= 1

        # admitted decode tokens due before the iteration after this one, earliest first
        horizon = now + t0 + tpot_t0
        slo_decoding = sorted(
            (server.next_token_deadline(r), r) for r in server.decoding if r in adm
        )
        ahead: list[int] = []
        for d, r in slo_decoding:
            if d < horizon - 1e-12:
                add_decode(r, True, 0)
            else:
                ahead.append(r)
        # admitted prefills, earliest prefill deadline first; a prefill that can no longer meet
        # its deadline (it would end after it) goes after the on-time ones
        slo_prefill = sorted(
            (d < now + t0 - 1e-12, d, r)
            for r in server.prefilling + server.waiting
            if r in adm and r not in gone
            for d in (server.token_deadline(r, 1),)
        )
        for _, _, r in slo_prefill:
            if budget <= 0 or slots <= 0:
                break
            add_prefill(r, True, 0)
        # leftover: admitted decode ahead of the cadence, then the best-effort tier
        for r in ahead:
            add_decode(r, True, 0)
        # kv_held counts a given cache once the prefill starts, which the capacity does not
        reserve = int(
            sum(
                server.prompt(r) + server.output(r) - max(server.kv_held(r), self._cached_prompt(r))
                for r in admitted
                if r not in preempt and r not in gone
            )
        ) - sum(1 for r in in_batch if r in adm)
        reserve = max(reserve, 0)
        for r in server.decoding:
            if r not in adm and r not in preempt:
                add_decode(r, False, reserve)
        for r in server.prefilling:
            if r not in adm and r not in preempt:
                add_prefill(r, False, reserve)
        be_waiting = [
            r for r in server.waiting if self.tier.get(r) == _BEST_EFFORT and r not in gone
        ]
        for r in be_waiting:
            if budget <= 0 or slots <= 0:
                break
            add_prefill(r, False, reserve)
        stuck = [r for r in server.decoding if r not in adm and r not in preempt]
        if not in_batch and not preempt and stuck and free - reserve < 1:
            # memory is full and only best-effort requests could grow: preempt the latest
            # started one (recomputed later) so that the others go on, rather than stall
            victim = next((v for v in reversed(order) if v in stuck), stuck[-1])
            free += _freed_more(server, preempt, victim)
            preempt.append(victim)
            for r in stuck:
                if r != victim:
                    add_decode(r, False, reserve)
        reject = [
            r
            for r in be_waiting
            if r not in in_batch
            and server.prompt(r) + server.output(r) - self._cached_prompt(r)
            > server.kv_capacity_tokens
        ]
        repeat = (
            not prefill
            and not preempt
            and not server.waiting
            and len(decode) == len(server.decoding)
            and budget > 0
            and slots > 0
        )
        if repeat:
            return Batch(decode=server.decoding_ids(), repeat=True, reject=reject)
        return Batch(prefill=prefill, decode=decode, preempt=preempt, reject=reject)


register_policy(
    "slos-serve",
    SLOsServePolicy,
    "SLOs-Serve: multi-SLO DP admission, soft admission to best effort, replica forwarding",
)

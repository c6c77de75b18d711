"""HyperFlexis's online algorithms and the baselines of its evaluation.

- :class:`HyperFlexisDispatcher` — the multi-SLO-aware dispatcher (Sec. 5.1, Algorithm 1):
  a global queue (requests held centrally, :data:`slolab.sim.HOLD`) ordered by SLO then
  arrival; a worker takes work only once mature (its maturity time passed); its token budget
  (Eq. 5) bounds the prompt tokens of the next prefill batch; the queue is scanned and each
  candidate admitted when its TTFT-feasibility probability passes a threshold; the worker's
  shadow state (dispatch time, predicted prefill) is updated. On a disaggregated cluster the
  same object is the Dispatcher of the prefill workers (maturity: the end of the prefill
  batch) and the Migrator of the decode workers (decisions at every decode step, admission
  while the step time stays within the tightest TPOT).
- :class:`PriorityMapper` — priority-based SLO mapping (Sec. 5.2, HyperFlexis-PM): sliding
  windows of recent TTFT and TPOT per priority, the index rule, the queuing-delay correction,
  per-priority bounds with the contention rule.
- :class:`HyperFlexisScaler` — the threshold scaler (Sec. 6, Algorithm 3): every period it
  measures utilization, wait time relative to the SLO and the ratio of input to processing
  rate per pool; above an upper threshold it adds a worker, below the lower thresholds for a
  sustained number of periods it drains one; on a disaggregated cluster it moves a worker
  between the prefill and decode pools when their demands diverge (role change).
- The worker's latency model (Eqs. 1-2: :func:`prefill_s`, :func:`decode_step_s`), which
  SCORPIO's guards read too.

The baselines of Sec. 7.4 live beside it: SCORPIO in :mod:`slolab.heuristics.scorpio`, the
SA-ordering scheduler run online in :mod:`slolab.heuristics.sa_online`; the dispatch-scale
problem (:mod:`slolab.problems.dispatch_scale`) names each heuristic of the evaluation
(``hyperflexis-scaling``, ``round-robin``, ``scorpio-rr``, ``sa-rr``, ...) as registered
policies, routers and scalers.

Formulas the text lost (Eq. 5, the mapping's index rule), every parameter and its default are
derived and listed in docs/hyperflexis.md.

References
----------
HyperFlexis, Sec. 3 (Eqs. 1-2), 5.1 (Algorithm 1), 5.2 (Eq. 6), 6 (Algorithm 3), 7.4
(baselines), Appendix B (the token limit, Eq. 7).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.heuristics.baselines import (
    REPEAT_LOOKAHEAD,
    AdmissionOrder,
    decode_server_recompute,
    decode_server_room,
    make_room_for_decode,
    recompute_waits,
)
from slolab.heuristics.policies import register_policy, register_router
from slolab.heuristics.scalers import drain_order, register_scaler
from slolab.instances.records import cached_prompt_tokens
from slolab.sim.policy import HOLD, Batch
from slolab.sim.scaling import ClusterView, ScaleAction
from slolab.timing.base import (
    F_DECODE_KV,
    accumulate_from,
    decode_run_features,
    prefill_chunk_attention,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.timing.base import TimingModel

__all__ = [
    "DispatcherParams",
    "HoldRouter",
    "HyperFlexisDispatcher",
    "HyperFlexisScaler",
    "PriorityMapper",
    "ScalerParams",
    "decode_step_s",
    "kv_monotone",
    "prefill_s",
    "safely_before",
    "token_budget",
]


# -- latency model (Eqs. 1-2, the worker's own timing model) ----------------------------------


def prefill_s(
    timing: TimingModel, prompts: Sequence[int], prefixes: Sequence[int] | None = None
) -> float:
    """Time of one prefill iteration of whole prompts (Eq. 1): ``prompts`` the tokens each
    computes, ``prefixes`` the tokens already cached before them (a given cache; none: 0),
    which their attention reads."""
    if not prompts:
        return 0.0
    p = [int(x) for x in prompts]
    before = [0] * len(p) if prefixes is None else [int(x) for x in prefixes]
    return float(
        timing.time_of(
            prefill_tokens=sum(p),
            prefill_attention_work=sum(
                prefill_chunk_attention(x, k) for x, k in zip(p, before, strict=True)
            ),
            num_prefill_seqs=len(p),
        )
    )


class PrefillClock:
    """Prefill times of whole-prompt batches on one timing model, fast.

    With a model affine once the phases are known (Eqs. 1-2 and every linear model) a batch
    costs its intercepts plus one term per prompt, added up in Python; any other model is
    evaluated through :func:`prefill_s`. Per-prompt terms are cached.
    """

    def __init__(self, timing: TimingModel) -> None:
        from slolab.timing.forms import phase_affine

        self.timing = timing
        self.view = phase_affine(timing)
        self._part: dict[int | tuple[int, int], float] = {}

    def part_s(self, prompt: int, prefix: int = 0) -> float:
        """The terms one prompt of ``prompt`` computed tokens after ``prefix`` cached ones adds
        to a batch (affine models)."""
        key = (prompt, prefix) if prefix else prompt
        t = self._part.get(key)
        if t is None:
            assert self.view is not None
            t = self._part[key] = self.view.prefill_part_s(prompt + prefix, prefix)
        return t

    def batch_s(self, prompts: Sequence[int], prefixes: Sequence[int] | None = None) -> float:
        """Time of one prefill iteration of ``prompts`` (Eq. 1), after ``prefixes`` cached
        tokens each (a given cache; none: 0)."""
        if not prompts:
            return 0.0
        if self.view is None:
            return prefill_s(self.timing, prompts, prefixes)
        v = self.view
        if prefixes is None:
            return v.any_s + v.prefill_s + sum(self.part_s(int(p)) for p in prompts)
        return (
            v.any_s
            + v.prefill_s
            + sum(self.part_s(int(p), int(k)) for p, k in zip(prompts, prefixes, strict=True))
        )


def decode_step_s(timing: TimingModel, batch: int, kv_tokens: int) -> float:
    """Time of one decode step of ``batch`` requests reading ``kv_tokens`` KV tokens (Eq. 2);
    0 for an empty batch."""
    if batch <= 0:
        return 0.0
    return float(
        timing.time_of(decode_tokens=batch, num_decode_seqs=batch, decode_kv_tokens=kv_tokens)
    )


def linear_prefill_coefficients(timing: TimingModel) -> tuple[float, float]:
    """``(a, b)``: seconds per prompt token and per prefill batch of Eq. 1 without its
    quadratic term (as Appendix B drops it), read off the timing model."""
    one = float(timing.time_of(prefill_tokens=1, num_prefill_seqs=1))
    two = float(timing.time_of(prefill_tokens=2, num_prefill_seqs=1))
    a = max(two - one, 1e-12)
    return a, max(one - a, 0.0)


def token_budget(
    a: float,
    b: float,
    *,
    ttft_s: float,
    tpot_s: float,
    decode_s: float,
    time_saving_rate: float = 0.0,
) -> float:
    """Eq. 5: prompt tokens a worker may take in its next prefill batch.

    A worker alternates a prefill batch of ``P = a N + b`` seconds with ``n`` decode steps of
    ``D`` seconds. The decodes keep their TPOT when ``(1 - alpha) P + n D <= n TPOT``, so
    ``n = (1 - alpha) P / (TPOT - D)`` steps amortize the prefill (Appendix B); a request
    arriving just after a dispatch waits that cycle, ``P + n D``, then rides in the next batch
    (``P`` again), which must end within the TTFT (Eq. 7). Hence

    ``P = TTFT / (2 + (1 - alpha) D / (TPOT - D))`` and ``n_token = (P - b) / a``,

    with ``TTFT`` and ``TPOT`` the tightest targets, ``D`` the decode step of the ongoing
    requests, ``(a, b)`` the linear prefill coefficients (the quadratic term dropped, as
    Appendix B does) and ``alpha`` the time-saving rate of overlapping prefill with decode.
    0 when the ongoing decodes already use the whole TPOT. Derivation: docs/hyperflexis.md.

    References
    ----------
    HyperFlexis, Sec. 5.1 (Eq. 5) and Appendix B (Eq. 7).
    """
    if not tpot_s > decode_s:
        return 0.0
    amortize = (1.0 - time_saving_rate) * decode_s / (tpot_s - decode_s)
    batch_s = ttft_s / (2.0 + amortize)
    return max((batch_s - b) / a, 0.0)


def _least_time_after(t0: float, span_s: float) -> float:
    """The least float ``t`` with ``t - t0 >= span_s`` (float subtraction is non-decreasing in
    ``t``, so the times that pass form an interval from it)."""
    t = t0 + span_s
    while t - t0 < span_s:
        t = math.nextafter(t, math.inf)
    while math.nextafter(t, -math.inf) - t0 >= span_s:
        t = math.nextafter(t, -math.inf)
    return t


def safely_before(t: float) -> float:
    """A time before ``t`` by 1 ns and a relative 1e-12: more than the rounding of a sum that
    computes ``t`` another way, so a comparison with ``t`` cannot flip before it."""
    return t - 1e-9 - 1e-12 * abs(t)


def _phi(x: float) -> float:
    """Standard normal distribution function."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def kv_monotone(timing: TimingModel) -> bool:
    """Whether ``timing`` is a maximum of affine lines none of which falls with the decode
    KV tokens (its step time is then non-decreasing in them, rounding included)."""
    from slolab.timing.forms import timing_lines

    try:
        _, coef = timing_lines(timing)
    except ValueError:
        return False
    return bool(np.all(coef[:, F_DECODE_KV] >= 0))


# -- priority mapping (Sec. 5.2) ----------------------------------------------------------------


class PriorityMapper:
    """Priority-based SLO mapping: SLOs from the recent latencies of each priority.

    Priorities are the workload's ``tier`` column (0 is the highest). Two sliding windows keep
    the last ``window_size`` completed requests' (TTFT, queuing delay, priority) and (mean
    TPOT, queuing delay, priority). A new request of priority ``p`` takes, in each window
    sorted by latency, the entry at index ``i = sum_{q < p} n_q + ceil(n_p / 2)`` (``n_q``
    completed requests of priority ``q`` in the window; 1-based, clipped to the window): past
    every higher-priority request, at the middle of its own class (Eq. 6). The chosen
    latency is lowered by the extra queuing delay of that reference request over the most
    recent completed request of priority ``p``, then bounded to ``[lo_p, hi_p] =
    [(1 - w) S_p, (1 + w) S_p]`` with ``S_p`` the median target of priority ``p``
    (Table 1's values in the workload); while no higher-priority request is pending the lower
    bound relaxes to the tightest priority's. An empty window maps to ``S_p``.

    References
    ----------
    HyperFlexis, Sec. 5.2 (five steps, Eq. 6) and Sec. 7.3 ("median SLO targets ... with a
    range").
    """

    def __init__(self, instance: Instance, window_size: int = 100, slo_range: float = 0.5):
        from slolab.sim.metrics import deadline_slos

        if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f"window_size must be an integer >= 1, got {window_size!r}")
        if not 0.0 <= slo_range < 1.0:
            raise ValueError(f"slo_range must be in [0, 1), got {slo_range}")
        wl = instance.workload
        if "tier" not in wl:
            raise ValueError("priority mapping needs a tier column (the priority, 0 highest)")
        self.priority = np.asarray(wl["tier"], dtype=np.int64)
        ttft, tpot = deadline_slos(wl)
        self.levels = sorted(set(self.priority.tolist()))
        self.bounds: dict[str, dict[int, tuple[float, float]]] = {"ttft": {}, "tpot": {}}
        for kind, values in (("ttft", ttft), ("tpot", tpot)):
            for p in self.levels:
                target = float(np.median(values[self.priority == p]))
                self.bounds[kind][p] = ((1 - slo_range) * target, (1 + slo_range) * target)
        self.windows: dict[str, deque[tuple[float, float, int]]] = {
            "ttft": deque(maxlen=window_size),
            "tpot": deque(maxlen=window_size),
        }
        self.recent_queue_s: dict[int, float] = {}

    def record(self, r: int, ttft_s: float, tpot_s: float | None, queue_s: float) -> None:
        """A completed request's latencies and queuing delay enter the windows."""
        p = int(self.priority[r])
        self.windows["ttft"].append((ttft_s, queue_s, p))
        if tpot_s is not None:
            self.windows["tpot"].append((tpot_s, queue_s, p))
        self.recent_queue_s[p] = queue_s

    def _map(self, kind: str, p: int, contended: bool) -> float:
        lo, hi = self.bounds[kind][p]
        if not contended:
            lo = min(b[0] for b in self.bounds[kind].values())
        window = sorted(self.windows[kind])
        if not window:
            target = (self.bounds[kind][p][0] + self.bounds[kind][p][1]) / 2.0
        else:
            counts = {q: 0 for q in self.levels}
            for _, _, q in window:
                counts[q] = counts.get(q, 0) + 1
            base = sum(c for q, c in counts.items() if q < p)
            index = base + math.ceil(counts.get(p, 0) / 2)
            latency, queue_s, _ = window[min(max(index, 1), len(window)) - 1]
            extra = max(queue_s - self.recent_queue_s.get(p, queue_s), 0.0)
            target = latency - extra
        return min(max(target, lo), hi)

    def assign(self, r: int, pending: Sequence[int]) -> tuple[float, float]:
        """``(TTFT, TPOT)`` targets of request ``r``; ``pending``: requests waiting now (a
        higher-priority one among them enforces ``r``'s strict lower bound)."""
        p = int(self.priority[r])
        contended = any(int(self.priority[q]) < p for q in pending)
        return self._map("ttft", p, contended), self._map("tpot", p, contended)


# -- the dispatcher (Sec. 5.1, Algorithm 1) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DispatcherParams:
    """Settings of :class:`HyperFlexisDispatcher` (defaults argued in docs/hyperflexis.md).

    Parameters
    ----------
    time_saving_rate : float
        ``alpha`` of Eq. 5 in ``[0, 1)``: the share of a prefill hidden by overlap with
        decoding (0: the worker runs prefill and decode iterations apart, as vLLM does).
    admit_threshold : float
        A candidate is admitted when its TTFT-feasibility probability is at least this.
    latency_spread : float
        Relative standard deviation of the predicted prefill completion at full utilization
        (the probability's spread grows with the worker's utilization).
    utilization_window_s : float
        Interval over which a worker's utilization is measured (the monitor's interval).
    priority_mapping : bool
        Derive the targets by :class:`PriorityMapper` (HyperFlexis-PM) instead of taking the
        requests' SLOs.
    window_size : int
        Sliding-window length of the mapping.
    slo_range : float
        Relative half-width of each priority's SLO bounds in the mapping.
    """

    time_saving_rate: float = 0.0
    admit_threshold: float = 0.8
    latency_spread: float = 0.25
    utilization_window_s: float = 1.0
    priority_mapping: bool = False
    window_size: int = 100
    slo_range: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.time_saving_rate < 1.0:
            raise ValueError(f"time_saving_rate must be in [0, 1), got {self.time_saving_rate}")
        if not 0.0 < self.admit_threshold < 1.0:
            raise ValueError(f"admit_threshold must be in (0, 1), got {self.admit_threshold}")
        if not (math.isfinite(self.latency_spread) and self.latency_spread >= 0):
            raise ValueError(f"latency_spread must be >= 0, got {self.latency_spread}")
        if not (math.isfinite(self.utilization_window_s) and self.utilization_window_s > 0):
            raise ValueError(f"utilization_window_s must be > 0, got {self.utilization_window_s}")


class HoldRouter:
    """Keeps every request in the central queue (:data:`slolab.sim.HOLD`): a dispatcher
    policy pulls it onto the worker it chooses."""

    name = "hold"
    central = True

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return HOLD


class HyperFlexisDispatcher:
    """HyperFlexis's multi-SLO-aware dispatcher (Algorithm 1) as a policy on every worker.

    The global queue is the central queue of the worker's side (use :class:`HoldRouter`);
    requests routed straight to the worker join it too. At each decision point of a worker:

    1. *Select a worker*: the worker deciding, if mature: idle, or ``now`` past its maturity
       ``t_dispatch + T_prefill + n D`` where ``n = ceil(T_prefill (1 - alpha) / (TPOT - D))``
       decode steps of the current batch (step ``D``) amortize the last prefill within the
       tightest running TPOT. Decision points come in time order, which plays the instance
       priority queue.
    2. *Token budget*: Eq. 5 (:func:`token_budget`) with the tightest TTFT of the queue and the
       tightest TPOT of the worker's requests and the queue's head.
    3. *Scan* the queue by (TPOT target, arrival).
    4. *Admit* a candidate whose prompt fits the budget, memory and batch, when the
       probability of meeting its TTFT, ``Phi((R - T) / (kappa rho T))`` (``R`` the time left to
       its TTFT deadline, ``T`` the predicted prefill of the batch with it, ``rho`` the worker's
       utilization), reaches the threshold. A candidate that cannot meet its TTFT even alone is
       admitted after the feasible ones, budget permitting (best effort, so none starves). An
       idle worker always takes the first candidate that fits memory.
    5. *Dispatch*: a prefill-only iteration of the admitted prompts (vLLM's order); the
       worker's shadow state records the dispatch time and the predicted prefill.

    Otherwise the worker decodes its running requests. Disaggregated: prefill workers run the
    same steps with no decodes (maturity: the end of the prefill batch); decode workers are the
    Migrator: at every step they admit held or transferred requests by (TPOT target, arrival)
    while the predicted step stays within the tightest TPOT and memory allows.

    Speed (the same decisions): a batch that decodes every running request is marked
    ``repeat=True`` and decided again at the first of the monitor's next utilization sample
    (:meth:`_next_sample_s`) and, with requests waiting, the first decision at which one could
    be admitted (:meth:`_none_admitted_until_s`) or, failing that proof, at which the worker
    turns mature (:meth:`_matures_s`); until then every decision would choose that batch.

    References
    ----------
    HyperFlexis, Sec. 5.1 (Algorithm 1, P/D-disaggregated Dispatcher and Migrator), Eq. 5,
    Appendix B.
    """

    name = "hyperflexis"

    def __init__(self, params: DispatcherParams | None = None) -> None:
        self.params = params if params is not None else DispatcherParams()
        self._reset(None)

    def _reset(self, instance: Instance | None) -> None:
        self.instance = instance
        self._order = AdmissionOrder({})
        self._dispatch: dict[int, tuple[float, float]] = {}
        self._busy: dict[int, tuple[float, float, float]] = {}
        self._coef: dict[int, tuple[float, float]] = {}
        self._clocks: dict[int, PrefillClock] = {}
        self._monotone: dict[int, bool] = {}
        self._seen: dict[int, set[int]] = {}
        self._first: dict[int, float] = {}
        self._admitted: dict[int, float] = {}
        self.mapper: PriorityMapper | None = None
        self.ttft = np.zeros(0)
        self.tpot = np.zeros(0)
        self._mapped = np.zeros(0, dtype=bool)
        # each request's given cached prefix (the workload's cached_tokens), None without one:
        # its prefill computes what the engine's remaining_prefill says, after these tokens
        self._cached: list[int] | None = None

    def start(self, instance: Instance, seed: int) -> None:
        """Reset for a run (no random choice; ``seed`` is unused)."""
        from slolab.sim.metrics import deadline_slos

        self._reset(instance)
        ttft, tpot = deadline_slos(instance.workload)
        self.ttft = np.asarray(ttft, dtype=float).copy()
        self.tpot = np.asarray(tpot, dtype=float).copy()
        self._mapped = np.zeros(instance.n_requests, dtype=bool)
        cached = cached_prompt_tokens(instance.workload)
        self._cached = cached.tolist() if cached.any() else None
        if self.params.priority_mapping:
            self.mapper = PriorityMapper(instance, self.params.window_size, self.params.slo_range)

    # -- monitor -------------------------------------------------------------------------------
    def _observe(self, server: Server) -> None:
        """Record first tokens, completions (for the mapping) and the utilization sample."""
        now = server.now
        running = set(server.prefilling) | set(server.decoding)
        for r in server.decoding:
            if r not in self._first:
                self._first[r] = now
        seen = self._seen.setdefault(server.id, set())
        gone = seen - running - set(server.waiting)
        if server.role == "prefill":
            # prefilled here: the first token came at the end of the last iteration
            for r in gone:
                self._first.setdefault(r, now)
        elif self.mapper is not None:
            for r in gone:
                first = self._first.get(r, now)
                out = server.output(r)
                tpot = (now - first) / (out - 1) if out > 1 else None
                queue_s = self._admitted.get(r, now) - server.arrival(r)
                self.mapper.record(r, first - server.arrival(r), tpot, queue_s)
        self._seen[server.id] = running
        t0, b0, rho = self._busy.get(server.id, (now, server.busy_s, 0.0))
        if now - t0 >= self.params.utilization_window_s:
            rho = min(max((server.busy_s - b0) / (now - t0), 0.0), 1.0)
            t0, b0 = now, server.busy_s
        self._busy[server.id] = (t0, b0, rho)

    def _next_sample_s(self, server: Server) -> float:
        """The first time a decision takes the next utilization sample (the least float ``t``
        with ``t - t0 >= utilization_window_s``, ``t0`` the last sample's time).

        A repeated decode batch asks to be decided again at the end of the first iteration
        ending then (``Batch.wake_at_s``): every decision before it returns the same batch and
        leaves the monitor's state as it is (no request finishes, starts decoding or waits while
        the batch repeats), so the samples, and the decisions that read them, are those of a
        decision at every iteration.
        """
        t0 = self._busy[server.id][0]
        return _least_time_after(t0, self.params.utilization_window_s)

    def _targets(self, queue: Sequence[int]) -> None:
        """Give newly seen requests their (mapped) targets."""
        if self.mapper is None:
            return
        for r in queue:
            if not self._mapped[r]:
                self.ttft[r], self.tpot[r] = self.mapper.assign(r, queue)
                self._mapped[r] = True

    def _pending(self, server: Server) -> bool:
        """Whether the global queue of the worker's side or the worker's own waiting requests
        hold any request; newly seen ones get their targets (the mapping sees them all)."""
        held = server.held if server.accepting else ()
        if self.mapper is not None:
            self._targets([*held, *server.waiting])
        return bool(held) or bool(server.waiting)

    @staticmethod
    def _queue(server: Server, tpot: np.ndarray) -> list[int]:
        """That queue by (TPOT target, arrival, id)."""
        held = list(server.held) if server.accepting else []
        queue = held + list(server.waiting)
        return sorted(queue, key=lambda r: (tpot[r], server.arrival(r), r))

    def _prefixes(self, requests: Sequence[int]) -> list[int] | None:
        """The given cached prefix of each of ``requests``, waiting to start their prefill
        (None without a given cache)."""
        if self._cached is None:
            return None
        return [self._cached[r] for r in requests]

    def _clock(self, server: Server) -> PrefillClock:
        clock = self._clocks.get(id(server.timing))
        if clock is None:
            clock = self._clocks[id(server.timing)] = PrefillClock(server.timing)
        return clock

    def _ab(self, server: Server) -> tuple[float, float]:
        coef = self._coef.get(server.id)
        if coef is None:
            coef = self._coef[server.id] = linear_prefill_coefficients(server.timing)
        return coef

    def _decode_now_s(self, server: Server) -> float:
        """Eq. 2 at the worker's decoding batch: the step of its ongoing requests."""
        kv = sum(server.kv_held(r) for r in server.decoding)
        return decode_step_s(server.timing, len(server.decoding), kv)

    def _mature(self, server: Server) -> bool:
        running = list(server.prefilling) + list(server.decoding)
        if not running:
            return True
        t0, pre_s = self._dispatch.get(server.id, (-math.inf, 0.0))
        decode = self._decode_now_s(server)
        tpot = min(self.tpot[r] for r in running) if running else math.inf
        if not tpot > decode:
            return False
        steps = math.ceil(pre_s * (1.0 - self.params.time_saving_rate) / (tpot - decode))
        return server.now >= t0 + pre_s + steps * decode

    # -- the policy ------------------------------------------------------------------------------
    def next_batch(self, server: Server) -> Batch:
        self._observe(server)
        if server.role == "decode":
            return self._migrate(server)
        order = self._order.of(server)
        # sorted only when a batch is chosen from it: a decision that only decodes costs no
        # more with a longer queue
        pending = self._pending(server)
        cap = server.max_batch_tokens or 1 << 62
        if server.prefilling:
            # a prompt longer than the iteration's token cap, or a recompute after a
            # preemption: finish it before anything else
            r = server.prefilling[0]
            return Batch(prefill=[(r, min(server.remaining_prefill(r), cap))])
        mature = pending and self._mature(server)
        if mature:
            admitted = self._scan(server, self._queue(server, self.tpot))
            if admitted:
                waiting = set(server.waiting)
                prompts = [server.remaining_prefill(r) for r in admitted]
                self._dispatch[server.id] = (
                    server.now,
                    self._clock(server).batch_s(prompts, self._prefixes(admitted)),
                )
                for r in admitted:
                    self._admitted.setdefault(r, server.now)
                    order.append(r)
                chunks, room = [], cap
                for r, need in zip(admitted, prompts, strict=True):
                    chunks.append((r, min(need, room)))
                    room -= chunks[-1][1]
                    if room <= 0:
                        break
                taken = {r for r, _ in chunks}
                return Batch(
                    prefill=chunks,
                    pull=[r for r in admitted if r not in waiting and r in taken],
                )
        decode = list(server.decoding[: server.max_batch_size])
        if not decode:
            return Batch()
        preempt = make_room_for_decode(server, decode, order)
        if preempt:
            return Batch(decode=decode, preempt=preempt)
        if len(decode) == len(server.decoding):
            wake = self._next_sample_s(server)
            if pending:
                blocked = self._none_admitted_until_s(server)
                if blocked is not None:
                    wake = min(wake, blocked)
                elif not mature:
                    wake = min(wake, self._matures_s(server))
                else:
                    return Batch(decode=decode)
            return Batch(decode=server.decoding_ids(), repeat=True, wake_at_s=wake)
        return Batch(decode=decode)

    def _none_admitted_until_s(self, server: Server) -> float | None:
        """A time up to which :meth:`_scan` would admit nothing at any decision while the
        worker only decodes (mature or not), or None when that is not shown.

        The queue stays as it is until the batch is decided again (a request held or taken
        from the global queue, or routed here, cuts the engine's window). Each candidate is
        passed over for good when its prompt plus one token exceeds the free memory (which
        only shrinks while decoding) or its prompt exceeds the token budget (Eq. 5 falls as the
        decode step ``D`` grows, and ``D`` grows with the KV tokens read on a model whose step
        never falls with them). Any other candidate is
        passed over now only if it can still meet its TTFT alone (``R >= T``, else it is
        admitted as best effort) and its probability ``Phi((R - T) / (kappa rho T))`` is below
        the threshold by more than 1e-9 (``R`` only falls, and the computed ``Phi`` is within
        an ulp or two of the exact, non-decreasing one); it stays so until ``R < T``, and the
        time returned is no later than the first such turn (less 1 ns and a relative 1e-12, more
        than the rounding of ``R``). ``rho`` changes only at a utilization sample, which the
        caller's ``wake_at_s`` covers too.
        """
        timing = server.timing
        monotone = self._monotone.get(id(timing))
        if monotone is None:
            monotone = self._monotone[id(timing)] = kv_monotone(timing)
        if not monotone:
            return None
        p = self.params
        now = server.now
        queue = self._queue(server, self.tpot)
        if server.max_batch_size - len(server.decoding) <= 0:
            return math.inf
        a, b = self._ab(server)
        decode = self._decode_now_s(server)
        budget = token_budget(
            a,
            b,
            ttft_s=min(self.ttft[r] for r in queue),
            tpot_s=min([self.tpot[r] for r in server.decoding] + [self.tpot[queue[0]]]),
            decode_s=decode,
            time_saving_rate=p.time_saving_rate,
        )
        rho = self._busy.get(server.id, (now, 0.0, 0.0))[2]
        clock = self._clock(server)
        free = server.kv_free_tokens - len(server.decoding)
        until = math.inf
        for r in queue:
            need = server.remaining_prefill(r)
            if need + 1 > free or need > budget:
                continue
            t_hat = clock.batch_s([need], self._prefixes([r]))
            due = server.arrival(r) + self.ttft[r]
            left = due - now
            if left < t_hat:
                return None
            spread = p.latency_spread * rho * t_hat + 1e-12
            if not _phi((left - t_hat) / spread) < p.admit_threshold - 1e-9:
                return None
            until = min(until, safely_before(due - t_hat))
        return until

    def _matures_s(self, server: Server) -> float:
        """A time inside the decode step after which the worker, decoding all its running
        requests and nothing else, turns mature (:meth:`_mature`), among the next
        :data:`~slolab.heuristics.baselines.REPEAT_LOOKAHEAD` steps (inside the last of them
        when none).

        The step ``j`` from now ends at ``e_j`` (the steps' times accumulated from now as the
        engine does) and the decision there reads ``D_(j+1)``, the step at ``batch (j + 1)``
        more KV tokens: mature when ``TPOT > D`` and ``e_j >= t0 + T_prefill + n D`` with
        ``n = ceil(T_prefill (1 - alpha) / (TPOT - D))``, evaluated for every ``j`` at once with
        the same floating-point operations as :meth:`_mature`. The time returned is half that
        step before its end (``Batch.wake_at_s``: the engine's window ends with that step).
        """
        running = server.decoding
        n = len(running)
        kv = sum(server.kv_held(r) for r in running)
        t0, pre_s = self._dispatch.get(server.id, (-math.inf, 0.0))
        tpot = min(self.tpot[r] for r in running)
        k = REPEAT_LOOKAHEAD
        step = server.timing.times(decode_run_features(n, kv, k + 1))
        ends = accumulate_from(server.now, step[:k])[1:]
        decode = step[1:]
        faster = tpot > decode
        with np.errstate(divide="ignore", invalid="ignore"):
            steps = np.ceil(
                pre_s * (1.0 - self.params.time_saving_rate) / np.where(faster, tpot - decode, 1.0)
            )
        mature = faster & (ends >= t0 + pre_s + steps * decode)
        j = int(np.argmax(mature)) if mature.any() else k - 1
        return float(ends[j] - 0.5 * step[j])

    def _scan(self, server: Server, queue: list[int]) -> list[int]:
        """Steps 2-4 of Algorithm 1 for ``server``: the requests of its next prefill batch."""
        p = self.params
        now = server.now
        a, b = self._ab(server)
        running = list(server.prefilling) + list(server.decoding)
        decode = self._decode_now_s(server)
        ttft_star = min(self.ttft[r] for r in queue)
        tpot_star = min([self.tpot[r] for r in running] + [self.tpot[queue[0]]])
        if server.role == "prefill":
            decode, tpot_star = 0.0, math.inf
        budget = token_budget(
            a,
            b,
            ttft_s=ttft_star,
            tpot_s=tpot_star,
            decode_s=decode,
            time_saving_rate=p.time_saving_rate,
        )
        rho = self._busy.get(server.id, (now, 0.0, 0.0))[2]
        clock = self._clock(server)
        free = server.kv_free_tokens - len(server.decoding)
        slots = server.max_batch_size - len(server.decoding)
        idle = not running
        cap = server.max_batch_tokens or 1 << 62
        batch: list[int] = []
        prompts: list[int] = []
        best_effort: list[int] = []
        for r in queue:
            if slots <= 0:
                break
            need = server.remaining_prefill(r)
            if need + 1 > free or (batch and sum(prompts) + need > cap):
                continue
            if need > budget and not (idle and not batch):
                continue
            t_hat = clock.batch_s([*prompts, need], self._prefixes([*batch, r]))
            left = server.arrival(r) + self.ttft[r] - now
            if left < clock.batch_s([need], self._prefixes([r])):
                best_effort.append(r)
                continue
            spread = p.latency_spread * rho * t_hat + 1e-12
            if _phi((left - t_hat) / spread) < p.admit_threshold:
                continue
            batch.append(r)
            prompts.append(need)
            free -= need + 1
            budget -= need
            slots -= 1
        for r in sorted(best_effort, key=lambda q: (server.arrival(q), q)):
            need = server.remaining_prefill(r)
            if slots <= 0 or need + 1 > free or (batch and sum(prompts) + need > cap):
                break
            if need > budget and not (idle and not batch):
                continue
            batch.append(r)
            prompts.append(need)
            free -= need + 1
            budget -= need
            slots -= 1
        if idle and not batch:
            # an idle worker takes work: the first candidate that fits its memory
            for r in queue:
                if server.remaining_prefill(r) + 1 <= free:
                    return [r]
        return batch

    def _migrate(self, server: Server) -> Batch:
        """The Migrator: decode the running requests, recompute those preempted here (when
        memory runs out the latest to start decoding are preempted,
        :func:`~slolab.heuristics.baselines.decode_server_room`), and admit transferred ones by
        (TPOT target, arrival) while the step stays within the tightest TPOT."""
        candidates = sorted(
            (list(server.held) if server.accepting else []) + list(server.waiting),
            key=lambda r: (self.tpot[r], server.arrival(r), r),
        )
        decode = list(server.decoding[: server.max_batch_size])
        preempt, free = decode_server_room(server, decode)
        budget = (server.max_batch_tokens or 1 << 62) - len(decode)
        prefill, free = decode_server_recompute(
            server, free, budget, server.max_batch_size - len(decode)
        )
        if prefill or preempt or recompute_waits(server, prefill):
            return Batch(prefill=prefill, decode=decode, preempt=preempt)
        kv = sum(server.kv_held(r) for r in decode)
        tpot = min((self.tpot[r] for r in decode), default=math.inf)
        waiting = set(server.waiting)
        pull: list[int] = []
        for r in candidates:
            if len(decode) >= server.max_batch_size:
                break
            need = server.kv_held(r)
            if need + 1 > free:
                continue
            step = decode_step_s(server.timing, len(decode) + 1, kv + need)
            if decode and step > min(tpot, self.tpot[r]):
                continue
            decode.append(r)
            kv += need
            free -= need + 1
            tpot = min(tpot, self.tpot[r])
            if r not in waiting:
                pull.append(r)
        if not decode:
            return Batch()
        admitted = len(decode) > len(server.decoding)
        if not admitted and not candidates and len(decode) == len(server.decoding):
            return Batch(
                decode=server.decoding_ids(), repeat=True, wake_at_s=self._next_sample_s(server)
            )
        return Batch(decode=decode, pull=pull)

    # -- as a router --------------------------------------------------------------------------
    central = True

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        """Every request joins the global queue (the central queue)."""
        return HOLD


# -- the scaler (Sec. 6, Algorithm 3) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScalerParams:
    """Settings of :class:`HyperFlexisScaler` (defaults argued in docs/hyperflexis.md).

    Parameters
    ----------
    interval_s : float
        The scaler's period ``T`` (the paper's ablation: 0.5, 1 and 2 s).
    utilization_upper, utilization_lower : float
        Mean share of the TPOT budget a pool's ready workers use: a worker's decode step
        (Eq. 2 at its batch) over its tightest TPOT, capped at 1 (0 when idle); a prefill
        worker's busy fraction over the period. A busy fraction would not do for the others:
        under continuous batching a worker holding one request is busy all the time.
    wait_upper, wait_lower : float
        Longest wait of a queued request relative to its SLO (TTFT for new requests; the
        TPOT for transferred ones on decode workers).
    rate_upper, rate_lower : float
        Input over processing rate: requests entering the pool's queue over requests taken
        from it in the last period (0 while the queue holds no more requests than the pool
        has workers: no backlog).
    sustain : int
        Periods every metric must stay below its lower threshold before a scale-in.
    min_servers, max_servers : int
        Workers of each pool at least (accepting work) and of the cluster at most (on).
    step : int
        Workers added per scale-out.
    role_change : bool
        Disaggregated: move a worker from the pool below its lower thresholds to the pool
        above its upper ones instead of switching one on.
    """

    interval_s: float = 1.0
    utilization_upper: float = 0.95
    utilization_lower: float = 0.5
    wait_upper: float = 0.5
    wait_lower: float = 0.1
    rate_upper: float = 1.1
    rate_lower: float = 0.5
    sustain: int = 3
    min_servers: int = 1
    max_servers: int = 8
    step: int = 1
    role_change: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise ValueError(f"interval_s must be a finite number > 0, got {self.interval_s}")
        for low, high in (
            ("utilization_lower", "utilization_upper"),
            ("wait_lower", "wait_upper"),
            ("rate_lower", "rate_upper"),
        ):
            lo, hi = getattr(self, low), getattr(self, high)
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi):
                raise ValueError(f"need 0 <= {low} < {high}, got {lo} and {hi}")
        for name in ("sustain", "min_servers", "max_servers", "step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.min_servers > self.max_servers:
            raise ValueError(
                f"min_servers must be <= max_servers, got {self.min_servers} > {self.max_servers}"
            )


@dataclass
class _PoolState:
    present: set[int]
    busy: dict[int, tuple[float, float]]
    queued: int = 0
    calm: int = 0


class HyperFlexisScaler:
    """HyperFlexis's threshold scaler (Algorithm 3), per pool, with role changes.

    Every ``interval_s`` and for each pool (``main`` co-located; ``prefill`` and ``decode``
    disaggregated) it measures the utilization ``U``, the wait ratio ``W`` (longest wait of a
    queued request over its SLO) and the rate ratio ``Q`` (requests entering the pool's queue
    over requests taken from it in the period, 0 without a backlog). A pool with any metric above its upper threshold wants
    a worker; a pool with every metric below its lower threshold for ``sustain`` periods may
    give one. Co-located: switch ``step`` workers on (at most ``max_servers`` on) or drain one
    (a starting one first, then the least loaded, the newest on ties; at least
    ``min_servers`` stay). Disaggregated with ``role_change``: a pool that wants a worker
    takes one from the other pool when that one may give one (a move: drained, then started
    in the other role after the cluster's ``move_s``), else one is switched on.

    References
    ----------
    HyperFlexis, Sec. 6 (Algorithm 3, P/D scaling with role reassignment, fast scaling).
    """

    name = "hyperflexis"

    def __init__(self, params: ScalerParams | None = None) -> None:
        self.params = params if params is not None else ScalerParams()
        self.interval_s = self.params.interval_s
        self._pools: list[str] = []
        self._state: dict[str, _PoolState] = {}
        self._arrival = np.zeros(0)
        self._ttft = np.zeros(0)
        self._tpot = np.zeros(0)
        self._last = 0.0

    def start(self, instance: Instance, seed: int) -> None:
        """Reset for a run (no random choice; ``seed`` is unused)."""
        from slolab.sim.metrics import deadline_slos

        self._pools = [p.name for p in instance.cluster.resolved_pools()]
        self._state = {name: _PoolState(set(), {}) for name in self._pools}
        self._arrival = np.asarray(instance.workload.arrival_s, dtype=float)
        ttft, tpot = deadline_slos(instance.workload)
        self._ttft, self._tpot = np.asarray(ttft, dtype=float), np.asarray(tpot, dtype=float)
        self._last = 0.0

    def _metrics(self, cluster: ClusterView, pool: str, role: str) -> tuple[float, float, float]:
        """``(U, W, Q)`` of ``pool`` over the period ending now."""
        now = cluster.now
        st = self._state[pool]
        servers = cluster.in_pool(pool)
        shares = []
        samples: dict[int, tuple[float, float]] = {}
        for s in servers:
            if not s.ready:
                continue
            if role == "prefill":
                # prefill workers batch no decodes: their busy fraction over the period
                samples[s.id] = (now, s.busy_s)
                before = st.busy.get(s.id)
                if before is not None and now > before[0]:
                    busy = (s.busy_s - before[1]) / (now - before[0])
                    shares.append(min(max(busy, 0.0), 1.0))
                continue
            ids = list(s.decoding)
            tpot = min((self._tpot[r] for r in ids if self._tpot[r] > 0), default=math.inf)
            step = decode_step_s(s.timing, len(ids), sum(s.kv_held(r) for r in ids))
            shares.append(min(step / tpot, 1.0) if math.isfinite(tpot) else 0.0)
        st.busy = samples
        utilization = sum(shares) / len(shares) if shares else 0.0
        queued = [r for s in servers for r in s.waiting]
        if servers:
            queued += list(servers[0].held)
        waits = []
        for r in queued:
            if role == "decode":
                due = servers[0].next_token_deadline(r)
                tpot = self._tpot[r]
                if tpot > 0:
                    waits.append((now - due + tpot) / tpot)
            elif math.isfinite(self._ttft[r]) and self._ttft[r] > 0:
                waits.append((now - self._arrival[r]) / self._ttft[r])
        wait = max(waits, default=0.0)
        present = set(queued)
        for s in servers:
            present |= set(s.prefilling) | set(s.decoding)
        if role == "decode":
            entered = len(present - st.present)
        else:
            lo = bisect.bisect_right(self._arrival, self._last)
            hi = bisect.bisect_right(self._arrival, now)
            entered = hi - lo
        # requests taken from the queue in the period (conservation of the queue)
        taken = entered + st.queued - len(queued)
        st.present = present
        st.queued = len(queued)
        backlog = len(queued) > len([s for s in servers if s.accepting])
        rate = entered / max(taken, 1) if backlog else 0.0
        return utilization, wait, rate

    def decide(self, cluster: ClusterView) -> Sequence[ScaleAction]:
        """The actions for now (see the class docstring)."""
        p = self.params
        roles = {pl.name: pl.role for pl in cluster.pools}
        want: dict[str, int] = {}
        for pool in self._pools:
            u, w, q = self._metrics(cluster, pool, roles[pool])
            st = self._state[pool]
            high = u > p.utilization_upper or w > p.wait_upper or q > p.rate_upper
            low = u < p.utilization_lower and w < p.wait_lower and q < p.rate_lower
            st.calm = st.calm + 1 if low else 0
            want[pool] = 1 if high else (-1 if st.calm >= p.sustain else 0)
        self._last = cluster.now
        actions: list[ScaleAction] = []
        on = len(cluster.servers)
        for pool in self._pools:
            active = cluster.active(pool)
            if len(active) < p.min_servers and on < p.max_servers:
                actions.append(ScaleAction.on(pool))
                on += 1
                want[pool] = 0
        for pool in self._pools:
            if want[pool] != 1:
                continue
            donors = [
                other
                for other in self._pools
                if other != pool
                and want[other] == -1
                and len(cluster.active(other)) > p.min_servers
            ]
            if p.role_change and donors:
                donor = donors[0]
                victim = min(cluster.active(donor), key=drain_order)
                actions.append(ScaleAction.move(victim.id, pool))
                want[donor] = 0
                self._state[donor].calm = 0
                continue
            count = min(p.step, p.max_servers - on)
            actions += [ScaleAction.on(pool)] * count
            on += count
        for pool in self._pools:
            active = cluster.active(pool)
            if want[pool] == -1 and len(active) > p.min_servers:
                actions.append(ScaleAction.drain(min(active, key=drain_order).id))
                self._state[pool].calm = 0
        return actions


# -- registrations ------------------------------------------------------------------------------


def _scaler_from_options(min_servers: int = 1, max_servers: int = 8, **params: Any) -> Any:
    return HyperFlexisScaler(
        ScalerParams(min_servers=min_servers, max_servers=max_servers, **params)
    )


def _pm_dispatcher() -> HyperFlexisDispatcher:
    return HyperFlexisDispatcher(DispatcherParams(priority_mapping=True))


register_policy(
    "hyperflexis",
    HyperFlexisDispatcher,
    "HyperFlexis's multi-SLO dispatcher: global queue, maturity, token budget (Eq. 5), TTFT "
    "feasibility (Alg. 1); pair with --router hold",
    router="hold",
    decode_router="hold",
)
register_policy(
    "hyperflexis-pm",
    _pm_dispatcher,
    "the HyperFlexis dispatcher with priority-based SLO mapping (Sec. 5.2; priorities: tier)",
    router="hold",
    decode_router="hold",
)
register_router("hold", HoldRouter, "central queue: a dispatcher policy pulls each request")
register_scaler(
    "hyperflexis",
    _scaler_from_options,
    "HyperFlexis Alg. 3: utilization, wait/SLO and rate thresholds every second, sustained "
    "scale-in, P/D role changes",
)

"""ProServe's schedulers and the baselines of its evaluation.

- :class:`SlideBatching` (policy ``"slide-batching"``): the engine-level scheduler (Sec. 4.2,
  Algorithm 1). A latency budget ``t_budget = max(min_r remain_r, eta)``; requests with
  ``remain < gamma * phi`` are URGENT and go first by gain density (next-token weight over
  execution time), the others by remaining time; the batch is filled in that order, each request
  with the largest chunk that keeps the estimated iteration time within the budget.
- :class:`GoRouting` (router ``"go-routing"``): the cluster-level router (Sec. 4.3, Algorithm 2):
  gain-oriented candidates, then the dual-threshold capability-aware choice that reserves lightly
  loaded instances for future requests. :class:`MostFreeKV` (``"most-free-kv"``) is its decode
  pool choice when prefill and decode are disaggregated.
- Baselines (Sec. 5.1): ``"vllm-fcfs"`` and ``"sarathi-fcfs"`` are the existing ``"vllm"`` and
  ``"sarathi"`` policies under the paper's names (same classes);
  :class:`SarathiPriority`, :class:`FairBatching` and :class:`WeightedVTC` are new; the router
  baseline ``"min-load"`` is :class:`slolab.heuristics.baselines.LeastLoaded`.

Every per-request read a policy makes (arrival, SLOs, priority, TDG weights, generated tokens, KV
held, remaining prompt, token deadlines) goes through the helpers at the top of this module; the
policies otherwise use only the public attributes of a server.

References
----------
Huang et al., "ProServe: Unified Multi-Priority Request Scheduling for LLM Serving": Sec. 2
(TDG), Sec. 4.1 (latency estimator), Sec. 4.2 (SlideBatching), Sec. 4.3 (GoRouting), Sec. 5.1
(baselines). Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024 (VTC). Lyu et
al., "FairBatching", arXiv:2510.14392 (deadline-aware batch formation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import add
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.heuristics.baselines import (
    REPEAT_LOOKAHEAD,
    AdmissionOrder,
    EDFTokens,
    LeastLoaded,
    PrefillFirstFCFS,
    SarathiFCFS,
    decode_server_batch,
    decode_steps_within_until_s,
    make_room_for_decode,
)
from slolab.heuristics.policies import register_policy, register_router
from slolab.sim.policy import Batch
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    TimingModel,
    prefill_attention_work,
    prefill_chunk_attention,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server

__all__ = [
    "FairBatching",
    "GoRouting",
    "GoRoutingParams",
    "LatencyEstimator",
    "MostFreeKV",
    "RequestData",
    "SarathiPriority",
    "SlideBatching",
    "SlideBatchingParams",
    "WeightedVTC",
    "capture_point",
]

_INT = np.int64
_NO_FEATURES = np.zeros(N_FEATURES)
_NO_FEATURES.setflags(write=False)
#: Seconds by which an estimated batch time may exceed the budget (floating-point rounding).
BUDGET_TOL_S = 1e-12
#: Seconds by which SlideBatching's early exit errs on the safe side (far above rounding).
LINE_FLOOR_MARGIN_S = 1e-9
#: Queues longer than this get SlideBatching's early exit (shorter ones are walked whole).
FLOOR_QUEUE = 64
#: Queues up to this long are built and ordered on Python lists (numpy's calls cost more there).
SHORT_QUEUE = 32
#: Step numbers of a repeated decode batch's lookahead (read-only).
_STEPS = np.arange(REPEAT_LOOKAHEAD, dtype=_INT)
_STEPS.setflags(write=False)


# -- per-request reads: the one place policies look at requests ------------------------------


@dataclass(frozen=True, slots=True)
class RequestData:
    """Static per-request arrays of an instance, read once when a run starts.

    ``first_weight`` / ``decode_weight`` are the TDG gains of a request's first and later tokens:
    ``w_p * w_{p(r)}`` and ``w_d * w_{p(r)}`` (ProServe Eq. 3, weights from
    :func:`slolab.sim.metrics.token_weights`' rules). A NaN TTFT SLO is an infinite deadline, a
    NaN TPOT SLO adds nothing per token. ``cached`` is each request's prompt tokens in a
    snapshot's given cache (:func:`~slolab.instances.records.cached_prompt_tokens`; zeros
    without one): found again at every start of its prefill, so not prefilled then.
    """

    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    priority: np.ndarray
    first_weight: np.ndarray
    decode_weight: np.ndarray
    cached: np.ndarray

    @classmethod
    def of(cls, instance: Instance) -> RequestData:
        from slolab.instances.records import cached_prompt_tokens
        from slolab.sim.metrics import tdg_request_weights

        wl = instance.workload
        first, decode = tdg_request_weights(instance)
        return cls(
            arrival_s=np.asarray(wl.arrival_s, dtype=float),
            ttft_s=np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf),
            tpot_s=np.nan_to_num(np.asarray(wl["tpot_slo_s"], dtype=float), nan=0.0),
            priority=np.asarray(wl["priority"], dtype=float),
            first_weight=first,
            decode_weight=decode,
            cached=cached_prompt_tokens(wl),
        )


def generated_tokens(server: Server, ids: np.ndarray) -> np.ndarray:
    """Output tokens each request of ``ids`` has emitted so far."""
    return server.generated_of(ids)


def kv_held_tokens(server: Server, ids: np.ndarray) -> np.ndarray:
    """KV tokens each request of ``ids`` holds (its prefix for attention)."""
    return server.kv_held_of(ids)


def prompt_tokens(server: Server, ids: np.ndarray) -> np.ndarray:
    """Prompt tokens of each request of ``ids``."""
    return server.prompt_of(ids)


def remaining_prefill_tokens(server: Server, ids: Sequence[int]) -> np.ndarray:
    """Prompt (or recompute) tokens each request of ``ids`` still has to prefill."""
    return np.fromiter((server.remaining_prefill(int(r)) for r in ids), dtype=_INT, count=len(ids))


def next_token(
    data: RequestData, server: Server, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(generated, deadline_s, weight)`` of each request's next token.

    Token ``k = generated + 1`` has deadline ``arrival + TTFT + (k - 1) TPOT`` and TDG weight
    ``first_weight`` when ``k = 1``, else ``decode_weight`` (ProServe Eq. 3).
    """
    gen = generated_tokens(server, ids)
    deadline = data.arrival_s[ids] + data.ttft_s[ids] + gen * data.tpot_s[ids]
    weight = np.where(gen == 0, data.first_weight[ids], data.decode_weight[ids])
    return gen, deadline, weight


# -- latency estimator (Sec. 4.1) ----------------------------------------------------------------


class LatencyEstimator:
    """ProServe's batch latency estimator (Sec. 4.1) on the instance's timing model.

    ``t_c`` is the time of an empty batch (the constant overhead); a request's ``exec`` is what
    it adds alone: ``T(request) - t_c`` (Eq. 4-7). For an affine timing model (ProServe's own
    estimator is one, Eq. 7) the batch time is ``t_c + sum exec`` exactly. A roofline (maximum of
    affine lines) is tracked line by line, so the batch time is exact there too, and chunks are
    sized in closed form per line; other forms are evaluated by the model on the batch's real
    shape. The paper's online correction factor ``beta`` is 1 here: the estimator is the
    engine's own timing model.
    """

    def __init__(self, timing: TimingModel) -> None:
        from slolab.timing.forms import RooflineTiming

        self.timing = timing
        self.t_c = float(timing.times(np.zeros((1, N_FEATURES)))[0])
        view = timing.affine()
        if view is not None:
            intercepts, coef = np.array([view[0]]), np.asarray(view[1], dtype=float)[:, None]
        elif isinstance(timing, RooflineTiming):
            intercepts, coef = timing.intercepts_s, timing.coef_matrix
        else:
            intercepts, coef = np.zeros(0), np.zeros((N_FEATURES, 0))
        #: True when the batch time is tracked exactly line by line (affine or roofline).
        self.lined = len(intercepts) > 0
        #: True when the time is affine: every item adds its own ``exec`` to the batch.
        self.affine = view is not None
        self.intercepts = [float(b) for b in intercepts]
        self.coef = coef
        self._c_pt = [float(v) for v in coef[F_PREFILL_TOKENS]]
        self._c_np = [float(v) for v in coef[F_NUM_PREFILL]]
        self._c_attn = [float(v) for v in coef[F_PREFILL_ATTN]]
        #: per line ``(c_pt, c_np, c_attn, c_attn / 2)``: a chunk's terms in GETMAXCHUNK
        self._chunk_terms = [
            (c_pt, c_np, c_attn, c_attn / 2.0)
            for c_pt, c_np, c_attn in zip(self._c_pt, self._c_np, self._c_attn, strict=True)
        ]

    @staticmethod
    def decode_features(context_tokens: np.ndarray) -> np.ndarray:
        """One row per decode token reading ``context_tokens`` KV tokens."""
        f = np.zeros((len(context_tokens), N_FEATURES))
        f[:, F_DECODE_TOKENS] = 1.0
        f[:, F_NUM_DECODE] = 1.0
        f[:, F_DECODE_KV] = context_tokens
        return f

    @staticmethod
    def chunk_features(chunk_tokens: np.ndarray, prefix_tokens: np.ndarray) -> np.ndarray:
        """One row per prefill chunk of ``chunk_tokens`` after ``prefix_tokens`` cached."""
        c = np.asarray(chunk_tokens, dtype=float)
        f = np.zeros((len(c), N_FEATURES))
        f[:, F_PREFILL_TOKENS] = c
        f[:, F_NUM_PREFILL] = (c > 0).astype(float)
        f[:, F_PREFILL_ATTN] = prefill_attention_work(c, prefix_tokens)
        return f

    def exec_s(self, features: np.ndarray) -> np.ndarray:
        """``T(row) - t_c`` for each row (a request alone in a batch)."""
        if len(features) == 0:
            return np.zeros(0)
        return np.asarray(self.timing.times(features), dtype=float) - self.t_c

    def smallest_item_s(self, decode_exec_s: np.ndarray) -> float:
        """Least time any item adds (affine models): a decode token of ``decode_exec_s`` or a
        one-token chunk; a little under it, so rounding never stops a fit too early."""
        chunk = self._c_pt[0] + self._c_np[0] if self.affine else 0.0
        least = min(float(decode_exec_s.min()), chunk) if len(decode_exec_s) else chunk
        return max(least * (1.0 - 1e-9), 0.0)

    def empty(self) -> tuple[list[float], np.ndarray]:
        """State of an empty batch: per-line times and the feature vector (read-only zeros:
        adding to it makes a new vector)."""
        return list(self.intercepts), _NO_FEATURES

    def line_increments(self, features: np.ndarray) -> np.ndarray:
        """``(n, L)``: what each row adds to each line."""
        return np.asarray(features, dtype=float) @ self.coef

    def batch_s(self, lines: list[float], features: np.ndarray) -> float:
        """Time of the batch in state ``(lines, features)``."""
        if self.lined:
            return max(lines)
        return float(self.timing.times(features[None, :])[0])

    def time_with(
        self, lines: list[float], features: np.ndarray, inc: Sequence[float], row: np.ndarray
    ) -> float:
        """Time of the batch with one more row (``inc`` its line increments)."""
        if self.lined:
            return max([v + d for v, d in zip(lines, inc, strict=True)])
        return float(self.timing.times((features + row)[None, :])[0])

    def max_chunk(
        self, lines: list[float], features: np.ndarray, budget_s: float, prefix: int, cap: int
    ) -> int:
        """Largest chunk ``c <= cap`` keeping the batch within ``budget_s`` (GETMAXCHUNK);
        0 when not even one token fits."""
        if cap <= 0:
            return 0
        if self.lined:
            best = cap
            for v, (c_pt, c_np, c_attn, a) in zip(lines, self._chunk_terms, strict=True):
                left = budget_s - v - c_np
                b = c_pt + c_attn * (prefix + 0.5)
                if left + BUDGET_TOL_S < a + b:
                    return 0
                if math.isinf(left):
                    c = cap
                elif a > 0:
                    c = int(math.floor(2.0 * left / (b + math.sqrt(b * b + 4.0 * a * left)) + 1e-9))
                elif b > 0:
                    c = int(math.floor(left / b + 1e-9))
                else:
                    c = cap
                best = min(best, c)
            while best > 0 and self._chunk_over(lines, best, prefix, budget_s):
                best -= 1
            return max(best, 0)

        def fits(c: int) -> bool:
            row = features + self.chunk_features(np.array([c]), np.array([prefix]))[0]
            return float(self.timing.times(row[None, :])[0]) <= budget_s

        if not fits(1):
            return 0
        lo, hi = 1, cap
        if fits(hi):
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def _chunk_over(self, lines: list[float], c: int, prefix: int, budget_s: float) -> bool:
        work = prefill_chunk_attention(c, prefix)
        limit = budget_s + BUDGET_TOL_S
        for v, (c_pt, c_np, c_attn, _) in zip(lines, self._chunk_terms, strict=True):
            if v + c_pt * c + c_np + c_attn * work > limit:
                return True
        return False

    def add(
        self, lines: list[float], features: np.ndarray, row: np.ndarray
    ) -> tuple[list[float], np.ndarray]:
        """State after adding ``row`` to the batch."""
        inc = row @ self.coef
        return [v + float(d) for v, d in zip(lines, inc, strict=True)], features + row

    def add_chunk(
        self, lines: list[float], features: np.ndarray, chunk: int, prefix: int
    ) -> tuple[list[float], np.ndarray]:
        """State after a prefill chunk of ``chunk`` tokens after ``prefix`` cached joins the
        batch: :meth:`add` of :meth:`chunk_features`' row (the same floats), built without
        array arithmetic. With lines the feature vector is left as it is (only a model without
        lines reads it)."""
        row = np.array(chunk_row(chunk, prefix))
        if self.lined:
            inc = (row @ self.coef).tolist()
            return [v + d for v, d in zip(lines, inc, strict=True)], features
        return self.add(lines, features, row)


def decode_row(context_tokens: int) -> list[float]:
    """:meth:`LatencyEstimator.decode_features`' row of one decode token, as a list."""
    row = [0.0] * N_FEATURES
    row[F_DECODE_TOKENS] = 1.0
    row[F_NUM_DECODE] = 1.0
    row[F_DECODE_KV] = float(context_tokens)
    return row


#: :func:`decode_row` before and after its context column (one flat list of rows built fast)
_DECODE_HEAD = decode_row(0)[:F_DECODE_KV]
_DECODE_TAIL = decode_row(0)[F_DECODE_KV + 1 :]


def queue_features(prefix: list[int], rem_prefill: list[int], n_dec: int) -> np.ndarray:
    """``(n, N_FEATURES)``: :func:`decode_row` of the first ``n_dec`` requests' contexts, then
    :func:`chunk_row` of the others' whole remaining prefills at their prefixes (the same
    floats), built as one flat list (a C-ordered array, as ``np.array`` of the rows)."""
    flat: list[float] = []
    head, tail = _DECODE_HEAD, _DECODE_TAIL
    for context in prefix[:n_dec]:
        flat += head
        flat.append(float(context))
        flat += tail
    for c, p in zip(rem_prefill[n_dec:], prefix[n_dec:], strict=True):
        flat += chunk_row(c, p)
    return np.array(flat).reshape(len(prefix), N_FEATURES)


def chunk_row(chunk: int, prefix: int) -> list[float]:
    """:meth:`LatencyEstimator.chunk_features`' row of one chunk, as a list (the same floats:
    :func:`~slolab.timing.base.prefill_chunk_attention` is ``prefill_attention_work`` of one
    chunk in the same order)."""
    c = float(chunk)
    row = [0.0] * N_FEATURES
    row[F_PREFILL_TOKENS] = c
    row[F_NUM_PREFILL] = float(chunk > 0)
    row[F_PREFILL_ATTN] = prefill_chunk_attention(chunk, prefix)
    return row


# -- SlideBatching (Sec. 4.2) ----------------------------------------------------------------------

PHI_CHOICES = ("aggressive", "conservative")
ORDER_CHOICES = ("slide", "deadline", "density")


@dataclass(frozen=True, slots=True)
class SlideBatchingParams:
    """Parameters of SlideBatching.

    Parameters
    ----------
    eta_s : float or None
        Lower bound ``eta`` of the latency budget (s). None (default): the tightest TPOT SLO of
        the instance's requests (the paper's budgets range over ``[eta, max TPOT]``, Sec. 4.2;
        it gives no value), or 20 ms when no request has one.
    gamma : float
        Aggressiveness coefficient ``gamma`` (Algorithm 1, line 9): larger sends more requests
        to URGENT. Default 1 (the paper gives no value).
    phi : {"aggressive", "conservative"}
        Load-judgment function: ``phi_a`` (Eq. 8, the paper's choice for all co-located
        results) or ``phi_c`` (Eq. 9). Prefill servers of a disaggregated cluster always use
        ``phi_p`` (Sec. 4.2).
    order : {"slide", "deadline", "density"}
        ``"slide"`` is the algorithm; ``"deadline"`` / ``"density"`` are the ablations "w/ only
        deadline" and "w/ only density" (Sec. 5.4).

    References
    ----------
    ProServe, Sec. 4.2 and Algorithm 1; Sec. 5.4 (ablations).
    """

    eta_s: float | None = None
    gamma: float = 1.0
    phi: str = "aggressive"
    order: str = "slide"

    def __post_init__(self) -> None:
        if self.eta_s is not None and not (math.isfinite(self.eta_s) and self.eta_s > 0):
            raise ValueError(f"eta_s must be a finite number > 0 (s), got {self.eta_s}")
        if not (math.isfinite(self.gamma) and self.gamma >= 0):
            raise ValueError(f"gamma must be a finite number >= 0, got {self.gamma}")
        if self.phi not in PHI_CHOICES:
            raise ValueError(f"phi must be one of {', '.join(PHI_CHOICES)}, got {self.phi!r}")
        if self.order not in ORDER_CHOICES:
            raise ValueError(f"order must be one of {', '.join(ORDER_CHOICES)}, got {self.order!r}")


def default_eta_s(instance: Instance) -> float:
    """The default ``eta``: the tightest TPOT SLO of the instance (20 ms without one)."""
    tpot = np.asarray(instance.workload["tpot_slo_s"], dtype=float)
    tpot = tpot[np.isfinite(tpot) & (tpot > 0)]
    return float(tpot.min()) if len(tpot) else 0.020


@dataclass
class _QueueArrays:
    """The columns of a long queue as arrays (decoding requests first), for numpy's order."""

    ids: np.ndarray
    decode: np.ndarray  # bool: decoding (else prefilling or waiting)
    waiting: np.ndarray  # bool: not admitted yet
    remain_s: np.ndarray
    weight: np.ndarray
    exec_s: np.ndarray
    inc: np.ndarray | None  # ``rows @ est.coef`` (None: a timing model without lines)


@dataclass
class _Queue:
    """The queue of one SlideBatching call as Python lists (decoding requests first).

    ``rows`` are the items' feature rows (decode tokens at their contexts, whole remaining
    prompts at their prefixes) and ``inc`` their line increments ``rows @ est.coef`` (a row a
    list, or the array of a long queue; None without lines). ``arrays`` holds a long queue's
    columns as arrays (None for a short one, built and ordered on the lists alone).
    """

    ids: list[int]
    decode: list[bool]
    waiting: list[bool]
    generated: list[int]
    remain_s: list[float]
    weight: list[float]
    prefix: list[int]
    rem_prefill: list[int]
    exec_s: list[float]
    rows: np.ndarray = field(repr=False)
    inc: np.ndarray | list[list[float]] | None = field(default=None, repr=False)
    arrays: _QueueArrays | None = field(default=None, repr=False)


class _Members:
    """A server's queued requests (decoding, prefilling, waiting) and their static columns,
    kept while the server's three tuples stay the same objects (a tuple does not change, so
    the same object holds the same requests). Read-only."""

    __slots__ = (
        "key",
        "ids",
        "id_array",
        "n_dec",
        "n_run",
        "decode",
        "waiting",
        "first_due",
        "tpot",
        "first_weight",
        "decode_weight",
    )

    def __init__(
        self,
        static: tuple[list[float], list[float], list[float], list[float]],
        decoding: tuple[int, ...],
        prefilling: tuple[int, ...],
        waiting: tuple[int, ...],
    ) -> None:
        self.key = (decoding, prefilling, waiting)
        self.ids = list(decoding + prefilling + waiting)
        self.id_array = np.array(self.ids, dtype=_INT)
        n = len(self.ids)
        self.n_dec = len(decoding)
        self.n_run = self.n_dec + len(prefilling)
        self.decode = [True] * self.n_dec + [False] * (n - self.n_dec)
        self.waiting = [False] * self.n_run + [True] * (n - self.n_run)
        first_due, tpot, first_weight, decode_weight = static
        self.first_due = [first_due[r] for r in self.ids]
        self.tpot = [tpot[r] for r in self.ids]
        self.first_weight = [first_weight[r] for r in self.ids]
        self.decode_weight = [decode_weight[r] for r in self.ids]

    def holds(
        self, decoding: tuple[int, ...], prefilling: tuple[int, ...], waiting: tuple[int, ...]
    ) -> bool:
        """True when the server's tuples are the ones these columns were read from."""
        key = self.key
        return key[0] is decoding and key[1] is prefilling and key[2] is waiting


def numpy_sum(values: Sequence[float]) -> float:
    """``np.sum`` of a float64 array of ``values``, on Python floats: numpy's pairwise
    summation (fewer than 8 values added left to right; up to 128 in eight running sums
    combined pairwise, the rest left to right; more split in two at a multiple of 8), so the
    same float as ``float(np.asarray(values).sum())``."""
    n = len(values)
    if n < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    if n <= 128:
        r = list(values[:8])
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in values[i:]:
            total += v
        return total
    half = n // 2
    half -= half % 8
    return numpy_sum(values[:half]) + numpy_sum(values[half:])


class SlideBatching:
    """SlideBatching (policy ``"slide-batching"``): ProServe's engine-level scheduler.

    At every call, for the queue ``Q`` (decoding, prefilling and waiting requests):

    1. ``exec`` of each request from the latency estimator (a decode token at its context, the
       whole remaining prompt at its prefix); ``remain = deadline of the next token - now``;
       ``density = w_r(next token) / exec`` (lines 2-5);
    2. ``t_budget = max(min remain, eta)`` (lines 6-7);
    3. URGENT when ``remain < gamma * phi(r, Q)`` with ``phi_a(Q) = t_budget / (t_budget - t_c)
       * sum exec`` (Eq. 8) or ``phi_c`` (Eq. 9: the sum up to the request's position in
       deadline order); on a disaggregated prefill server ``phi_p = sum exec + |Q| t_c``;
    4. URGENT requests by decreasing density, then NORMAL by increasing remain (line 13);
    5. from ``t_batch = t_c``, while the budget is not used up and memory allows, each request
       in turn joins with GETMAXCHUNK: a decode token if it fits, a prefill chunk of the largest
       size that fits (lines 14-18).

    If no request fits the budget (``t_c`` plus the smallest item exceeds it) the first request
    in order is served anyway, with a one-token chunk or its decode token, so the server never
    stalls with work queued. Memory: a waiting request is admitted only if its whole prompt plus
    one token fits (as the vLLM and Sarathi baselines do); when not even the decode tokens fit,
    the most recently admitted requests are preempted (recomputed later).

    Short queues (speed; the same floats): a queue of at most :data:`SHORT_QUEUE` requests is
    built, summed and ordered on Python floats, with the same operations in the same order as
    numpy's on the arrays (elementwise arithmetic is correctly rounded either way; ``sum exec``
    is numpy's pairwise sum, :func:`numpy_sum`; the stable sort on the same keys gives
    ``np.lexsort``'s order, no key being NaN); the line increments stay one matrix product on
    the same feature rows, as for a long queue.

    Repeated decode batches (speed; the same decisions): a call that decodes every decoding
    request and prefills nothing is marked ``repeat=True`` (the engine runs it without asking
    again until a request arrives, one finishes, memory runs out, or ``wake_at_s``) when the
    same call would be made at every iteration until then, whatever the order: nothing is
    prefilling; every waiting request's prompt plus one token exceeds the free KV memory, which
    only shrinks while the batch decodes, so each is skipped wherever the order puts it; the
    timing model is a maximum of affine lines with non-negative coefficients (a batch's time
    never falls when an item joins, so every item of a batch that fits fits wherever it comes);
    and each decode step stays within the budget of the call at its start less 1 ns, 1 ns being
    more than the filling loop's rounding and tolerance, so every decode token joins and the
    early exits (the cheapest item, the line floors) never cut before the last. That budget is
    known ahead: ``t_budget = max(min remain, eta)`` where a decoding request's next deadline
    moves on by one TPOT a step and a waiting request's stays, and each step starts where the
    one before ends; :meth:`_repeat_until_s` computes it with the floats of the call (each
    deadline by the same operations on the same values; the least remaining time as the least
    deadline minus the start, the same float since ``x -> x - start`` rounds monotonically).
    ``wake_at_s`` ends the window with the last step within
    its budget, timed step by step ahead as the engine times it
    (:func:`~slolab.heuristics.baselines.decode_steps_within_until_s`).
    ``tests/heuristics/test_slide_batching_speed.py`` checks the tokens against one call per
    iteration, bit for bit.

    Parameters
    ----------
    params : SlideBatchingParams, optional
        ``eta``, ``gamma``, the load-judgment function and the ordering (ablations).
    capture : bool
        Record every call's queue and budget in :attr:`captured` (for per-batch instances).

    References
    ----------
    ProServe, Sec. 4.2, Algorithm 1, Eq. 8-9.
    """

    name = "slide-batching"

    def __init__(self, params: SlideBatchingParams | None = None, capture: bool = False) -> None:
        self.params = params or SlideBatchingParams()
        self.capture = capture
        self.captured: list[dict[str, Any]] = []
        self._data: RequestData | None = None
        self._est: LatencyEstimator | None = None
        self._eta_s = 0.0
        self._order = AdmissionOrder({})
        self._chunk_floors: list[float] | None = None
        self._static = np.zeros((0, 4))
        self._static_lists: tuple[list[float], list[float], list[float], list[float]] = (
            [],
            [],
            [],
            [],
        )
        self._roofline: np.ndarray | None = None
        self._members: dict[int, _Members] = {}
        self._given: np.ndarray | None = None
        self._caches = False

    def start(self, instance: Instance, seed: int) -> None:
        from slolab.timing.forms import RooflineTiming

        self._members = {}
        # with prefix caching a waiting request's prefill is its prompt less the prefix its
        # server caches now (Server.remaining_prefill), not its whole prompt
        self._caches = instance.cluster.prefix_block_tokens > 0
        self._data = RequestData.of(instance)
        self._est = est = LatencyEstimator(instance.timing)
        data = self._data
        # a snapshot's given cache (None: none): a waiting request skips its cached prefix
        self._given = data.cached if data.cached.any() else None
        # per request: arrival + TTFT, TPOT, first and later tokens' weights (one gather a call)
        self._static = np.column_stack(
            [data.arrival_s + data.ttft_s, data.tpot_s, data.first_weight, data.decode_weight]
        )
        first_due, tpot, first_weight, decode_weight = self._static.T.tolist()
        self._static_lists = (first_due, tpot, first_weight, decode_weight)
        # a roofline's times are its line increments plus its intercepts, maximised
        self._roofline = (
            instance.timing.intercepts_s
            if type(instance.timing) is RooflineTiming and instance.timing.affine() is None
            else None
        )
        self._eta_s = self.params.eta_s or default_eta_s(instance)
        self._order = AdmissionOrder({})
        self.captured = []
        self._chunk_floors = (
            [
                c_pt + c_np + c_attn
                for c_pt, c_np, c_attn in zip(est._c_pt, est._c_np, est._c_attn, strict=True)
            ]
            if est.lined and not bool((est.coef < 0).any())
            else None
        )

    # -- Algorithm 1 -------------------------------------------------------------------------
    def _queue(self, server: Server) -> _Queue | None:
        """The call's queue: on Python lists up to :data:`SHORT_QUEUE` requests, else arrays."""
        n = server.load
        if n == 0:
            return None
        if n <= SHORT_QUEUE:
            return self._short_queue(server)
        return self._long_queue(server)

    def _short_queue(self, server: Server) -> _Queue:
        """:meth:`_long_queue`'s columns computed item by item on Python floats."""
        est = self._est
        assert est is not None
        decoding, prefilling, waiting_ids = server.decoding, server.prefilling, server.waiting
        members = self._members.get(server.id)
        if members is None or not members.holds(decoding, prefilling, waiting_ids):
            members = _Members(self._static_lists, decoding, prefilling, waiting_ids)
            self._members[server.id] = members
        ids, n_dec, n_run = members.ids, members.n_dec, members.n_run
        now = server.now
        gen = server.generated_of(members.id_array).tolist()
        prefix = server.kv_held_of(members.id_array).tolist()
        rem = [0] * n_dec + [server.remaining_prefill(r) for r in prefilling]
        # a waiting request prefills its prompt plus the tokens it generated before a recompute
        # (less its cached prefix, when the servers cache prefixes)
        if self._caches:
            rem += [server.remaining_prefill(r) for r in waiting_ids]
        else:
            rem += [server.prompt(r) + g for r, g in zip(waiting_ids, gen[n_run:], strict=True)]
            if self._given is not None:
                self._skip_given(waiting_ids, n_run, rem, prefix)
        remain = [
            due + g * tpot - now
            for due, tpot, g in zip(members.first_due, members.tpot, gen, strict=True)
        ]
        weight = [
            first if g == 0 else later
            for first, later, g in zip(
                members.first_weight, members.decode_weight, gen, strict=True
            )
        ]
        features = queue_features(prefix, rem, n_dec)
        inc: list[list[float]] | None = None
        if est.lined:
            inc = (features @ est.coef).tolist()
        if self._roofline is not None:
            assert inc is not None
            b = est.intercepts
            t_c = est.t_c
            exec_s = [max(map(add, row, b)) - t_c for row in inc]
        else:
            exec_s = est.exec_s(features).tolist()
        return _Queue(
            ids,
            members.decode,
            members.waiting,
            gen,
            remain,
            weight,
            prefix,
            rem,
            exec_s,
            features,
            inc,
        )

    def _long_queue(self, server: Server) -> _Queue:
        """The queue's columns built on arrays (one numpy call a column)."""
        est = self._est
        assert est is not None
        dec = server.decoding_ids()
        prefilling, waiting_ids = server.prefilling, server.waiting
        n_dec = len(dec)
        n_run = n_dec + len(prefilling)
        n = n_run + len(waiting_ids)
        ids = np.empty(n, dtype=_INT)
        ids[:n_dec] = dec
        ids[n_dec:n_run] = prefilling
        ids[n_run:] = waiting_ids
        decode = np.zeros(n, dtype=bool)
        decode[:n_dec] = True
        waiting = np.zeros(n, dtype=bool)
        waiting[n_run:] = True
        # next_token's deadline and weight, arrival + TTFT summed once per run (the same floats)
        gen = generated_tokens(server, ids)
        first_due, tpot, first_weight, decode_weight = self._static[ids].T
        deadline = first_due + gen * tpot
        weight = np.where(gen == 0, first_weight, decode_weight)
        prefix = kv_held_tokens(server, ids)
        rem = np.zeros(n, dtype=_INT)
        if n_run > n_dec:
            rem[n_dec:n_run] = remaining_prefill_tokens(server, prefilling)
        # a waiting request has prefilled nothing: it prefills its prompt plus, after a
        # recompute preemption, the tokens it had generated (one array read for the long queue)
        if self._caches:
            rem[n_run:] = remaining_prefill_tokens(server, waiting_ids)
        else:
            rem[n_run:] = prompt_tokens(server, ids[n_run:]) + gen[n_run:]
            if self._given is not None:
                # a given cache's prefix is found again at the start: not prefilled, attended to
                cached = self._given[ids[n_run:]]
                rem[n_run:] -= cached
                prefix[n_run:] += cached
        # decode_features over the decoding rows, chunk_features over the others, in one array
        features = np.zeros((n, N_FEATURES))
        features[:n_dec, F_DECODE_TOKENS] = 1.0
        features[:n_dec, F_NUM_DECODE] = 1.0
        features[:n_dec, F_DECODE_KV] = prefix[:n_dec]
        c = rem[n_dec:].astype(float)
        features[n_dec:, F_PREFILL_TOKENS] = c
        features[n_dec:, F_NUM_PREFILL] = c > 0
        features[n_dec:, F_PREFILL_ATTN] = prefill_attention_work(c, prefix[n_dec:])
        inc: np.ndarray | None = None
        if est.lined:
            inc = features @ est.coef
        if self._roofline is not None:
            # RooflineTiming.times on the line increments the batch filling reads anyway
            assert inc is not None
            exec_s = (inc + self._roofline).max(axis=1) - est.t_c
        else:
            exec_s = est.exec_s(features)
        remain = deadline - server.now
        arrays = _QueueArrays(ids, decode, waiting, remain, weight, exec_s, inc)
        return _Queue(
            ids.tolist(),
            decode.tolist(),
            waiting.tolist(),
            gen.tolist(),
            remain.tolist(),
            weight.tolist(),
            prefix.tolist(),
            rem.tolist(),
            exec_s.tolist(),
            features,
            inc,
            arrays,
        )

    def _skip_given(
        self, waiting_ids: Sequence[int], n_run: int, rem: list[int], prefix: list[int]
    ) -> None:
        """A waiting request finds its given cached prefix again when it starts its prefill:
        take it off its remaining prefill (from position ``n_run``) and make it the prefix its
        chunk attends to."""
        given = self._given
        assert given is not None
        for i, r in enumerate(waiting_ids, n_run):
            k = int(given[r])
            rem[i] -= k
            prefix[i] += k

    def budget_s(self, remain_s: Sequence[float]) -> float:
        """``t_budget = max(min remain, eta)`` (Algorithm 1, lines 6-7)."""
        return max(float(min(remain_s)), self._eta_s)

    def _steps(self, budget_s: float) -> float:
        """``t_budget / (t_budget - t_c)``: iterations to serve the queue (Eq. 8's factor)."""
        est = self._est
        assert est is not None
        if math.isinf(budget_s):
            return 1.0
        return budget_s / (budget_s - est.t_c) if budget_s > est.t_c else math.inf

    def _urgent(self, q: _QueueArrays, budget_s: float, role: str) -> np.ndarray:
        """URGENT mask: ``remain < gamma * phi(r, Q)`` (Algorithm 1, lines 8-12)."""
        est = self._est
        assert est is not None
        gamma = self.params.gamma
        if role == "prefill":
            return q.remain_s < gamma * (q.exec_s.sum() + len(q.ids) * est.t_c)
        steps = self._steps(budget_s)
        if self.params.phi == "aggressive":
            return q.remain_s < gamma * steps * float(q.exec_s.sum())
        by_deadline = np.argsort(q.remain_s, kind="stable")
        phi = np.empty(len(q.ids))
        phi[by_deadline] = steps * np.cumsum(q.exec_s[by_deadline])
        return q.remain_s < gamma * phi

    def _short_urgent(self, q: _Queue, budget_s: float, role: str) -> list[bool]:
        """:meth:`_urgent` on Python floats (the same operations, in the same order)."""
        est = self._est
        assert est is not None
        gamma = self.params.gamma
        remain = q.remain_s
        if role == "prefill":
            limit = gamma * (numpy_sum(q.exec_s) + len(q.ids) * est.t_c)
            return [v < limit for v in remain]
        steps = self._steps(budget_s)
        if self.params.phi == "aggressive":
            limit = gamma * steps * numpy_sum(q.exec_s)
            return [v < limit for v in remain]
        phi = [0.0] * len(remain)
        total = 0.0
        for i in sorted(range(len(remain)), key=remain.__getitem__):
            total += q.exec_s[i]
            phi[i] = steps * total
        return [v < gamma * p for v, p in zip(remain, phi, strict=True)]

    def order(self, q: _Queue, budget_s: float, role: str) -> list[int]:
        """Positions of the queue in service order (Algorithm 1, line 13)."""
        a = q.arrays
        if a is None:
            return self._short_order(q, budget_s, role)
        density = a.weight / np.maximum(a.exec_s, 1e-12)
        if self.params.order == "deadline":
            return np.lexsort((np.arange(len(a.ids)), a.remain_s)).tolist()
        if self.params.order == "density":
            return np.lexsort((a.remain_s, -density)).tolist()
        urgent = self._urgent(a, budget_s, role)
        # URGENT first by decreasing density, then NORMAL by increasing remaining time
        key = np.where(urgent, -density, a.remain_s)
        return np.lexsort((np.arange(len(a.ids)), key, ~urgent)).tolist()

    def _short_order(self, q: _Queue, budget_s: float, role: str) -> list[int]:
        """:meth:`order` by Python's stable sort: ties keep the queue's order, as the index
        key of ``np.lexsort`` does."""
        remain, weight, exec_s = q.remain_s, q.weight, q.exec_s
        positions = range(len(remain))
        if self.params.order == "deadline":
            return sorted(positions, key=remain.__getitem__)
        if self.params.order == "density":
            density = [w / max(e, 1e-12) for w, e in zip(weight, exec_s, strict=True)]
            return sorted(positions, key=lambda i: (-density[i], remain[i]))
        urgent = self._short_urgent(q, budget_s, role)
        # URGENT first by decreasing density, then NORMAL by increasing remaining time: two
        # stable sorts on floats, the lexsort's order (ties keep the queue's order)
        first = [i for i in positions if urgent[i]]
        if not first:
            return sorted(positions, key=remain.__getitem__)
        first.sort(key=lambda i: -(weight[i] / max(exec_s[i], 1e-12)))
        return first + sorted((i for i in positions if not urgent[i]), key=remain.__getitem__)

    def next_batch(self, server: Server) -> Batch:
        if server.role == "decode":
            return decode_server_batch(server)
        q = self._queue(server)
        if q is None:
            return Batch()
        est = self._est
        assert est is not None
        budget = self.budget_s(q.remain_s)
        order = self.order(q, budget, server.role)
        if self.capture:
            queued = np.asarray(q.ids, dtype=_INT)
            self.captured.append(capture_point(server, queued, budget, self._eta_s))
        # admissions in order (synchronised with the running set only when preempting)
        admitted = self._order.order.setdefault(server.id, [])
        free = server.kv_free_tokens
        slots = server.max_batch_size
        tokens_left = server.max_batch_tokens or (1 << 62)
        lines, feats = est.empty()
        batch_s = est.batch_s(lines, feats)
        # line increments as lists (a long queue's array converted once)
        inc_rows = q.inc.tolist() if isinstance(q.inc, np.ndarray) else q.inc
        rows = q.rows
        decode: list[int] = []
        prefill: list[tuple[int, int]] = []
        # affine time: once the budget left is below the cheapest item, nothing else fits
        smallest = 0.0
        if est.affine:
            dec_exec = [e for e, d in zip(q.exec_s, q.decode, strict=True) if d]
            smallest = est.smallest_item_s(np.array(dec_exec, dtype=float))
        # lines: once one line is over the budget by more than its cheapest item, nothing fits
        floors = self._line_floors(q.arrays, budget) if len(q.ids) > FLOOR_QUEUE else None
        full = False
        limit = budget + BUDGET_TOL_S
        ids, is_decode, is_waiting = q.ids, q.decode, q.waiting
        rem_prefill, prefix = q.rem_prefill, q.prefix
        for i in order:
            if full or budget - batch_s < smallest or slots <= 0 or tokens_left <= 0:
                break
            r = ids[i]
            if is_decode[i]:
                if free < 1:
                    continue
                if inc_rows is not None:
                    # est.time_with on lines: the lines with the item, maximised
                    with_item = list(map(add, lines, inc_rows[i]))
                    new_s = max(with_item)
                    if new_s > limit:
                        continue
                    lines = with_item
                    if floors:
                        full = any(v + f > budget for v, f in zip(lines, floors, strict=True))
                else:
                    new_s = est.time_with(lines, feats, (), rows[i])
                    if new_s > limit:
                        continue
                    feats = feats + rows[i]
                decode.append(r)
                batch_s = new_s
                free -= 1
                tokens_left -= 1
                slots -= 1
                continue
            rem = rem_prefill[i]
            if is_waiting[i] and rem + 1 > free:
                continue
            cap = min(rem, tokens_left, rem if is_waiting[i] else free - 1)
            c = est.max_chunk(lines, feats, budget, prefix[i], cap)
            if c <= 0:
                continue
            prefill.append((r, c))
            lines, feats = est.add_chunk(lines, feats, c, prefix[i])
            batch_s = est.batch_s(lines, feats)
            if floors:
                full = any(v + f > budget for v, f in zip(lines, floors, strict=True))
            free -= c + (1 if c == rem else 0)
            tokens_left -= c
            slots -= 1
            if is_waiting[i]:
                admitted.append(r)
        if not decode and not prefill:
            return self._progress(server, q, order, self._order.of(server))
        if not prefill and len(decode) == len(server.decoding):
            wake = self._repeat_until_s(server, q)
            if wake is not None:
                return Batch(decode=server.decoding_ids(), repeat=True, wake_at_s=wake)
        return Batch(prefill=prefill, decode=decode)

    def _repeat_until_s(self, server: Server, q: _Queue) -> float | None:
        """Up to when the decision to decode every decoding request, and nothing else, stays
        the same (the class docstring's argument); None when that is not shown."""
        est = self._est
        assert est is not None
        if self.capture or self._chunk_floors is None or server.prefilling:
            return None
        if server.timing is not est.timing and server.timing != est.timing:
            return None
        free = server.kv_free_tokens
        if any(w and rem + 1 <= free for w, rem in zip(q.waiting, q.rem_prefill, strict=True)):
            return None
        # nothing prefills: the decoding requests come first in the queue, then the waiting
        n_dec = len(server.decoding)
        ids, gen = q.ids, q.generated
        first_due_of, tpot_of = self._static_lists[0], self._static_lists[1]
        # a waiting request's next deadline does not move (next_token's float)
        waiting_due = min(
            (
                first_due_of[r] + g * tpot_of[r]
                for r, g in zip(ids[n_dec:], gen[n_dec:], strict=True)
            ),
            default=math.inf,
        )
        dec = np.asarray(ids[:n_dec], dtype=_INT)
        first_due = self._static[dec, 0][:, None]
        tpot = self._static[dec, 1][:, None]
        emitted_now = np.asarray(gen[:n_dec], dtype=_INT)[:, None]
        eta, margin = self._eta_s, LINE_FLOOR_MARGIN_S

        def limits_s(starts: np.ndarray) -> np.ndarray:
            # the budget of the call at each step's start, less 1 ns: next_token's deadlines
            # (a decoding request has emitted one more token a step), the least of them
            # minus the start (x -> x - start rounds monotonically: the least remaining time
            # is the least deadline minus the start), at least eta
            emitted = emitted_now + _STEPS[: len(starts)]
            due = (first_due + emitted * tpot).min(axis=0)
            return np.maximum(np.minimum(due, waiting_due) - starts, eta) - margin

        kv = sum(q.prefix[:n_dec])
        return decode_steps_within_until_s(est.timing, server.now, n_dec, kv, limits_s)

    def _line_floors(self, q: _QueueArrays | None, budget_s: float) -> list[float] | None:
        """Per line, the least any item of the queue adds to it, less a margin: a line whose
        time plus its floor exceeds ``budget_s`` admits no further item (an early exit of the
        filling loop that cannot change its outcome); None when no such bound holds (a timing
        model without lines, a negative coefficient, or an infinite budget).

        A decode token adds its own increment; a prefill chunk adds at least one token with no
        cached prefix, ``c_pt + c_np + c_attn`` (the attention work ``c (prefix + (c + 1) / 2)``
        is at least 1). The margin (1 ns plus the fitting tolerance) exceeds any rounding of the
        fits' own arithmetic, so an item the fits would accept is never cut off.
        """
        floors = self._chunk_floors
        if q is None or q.inc is None or floors is None or not math.isfinite(budget_s):
            return None
        if q.decode.any():
            least = q.inc[q.decode].min(axis=0).tolist()
            floors = [min(f, d) for f, d in zip(floors, least, strict=True)]
        return [f - BUDGET_TOL_S - LINE_FLOOR_MARGIN_S for f in floors]

    def _progress(self, server: Server, q: _Queue, order: list[int], admitted: list[int]) -> Batch:
        """Nothing fits the budget: serve the first request in order that memory allows."""
        free = server.kv_free_tokens
        for i in order:
            r = q.ids[i]
            if q.decode[i]:
                if free >= 1:
                    return Batch(decode=[r])
                continue
            rem = q.rem_prefill[i]
            if (rem + 1 if q.waiting[i] else 2) <= free:
                if q.waiting[i]:
                    admitted.append(r)
                return Batch(prefill=[(r, 1)])
        if server.decoding:
            decode = list(server.decoding[:1])
            preempt = make_room_for_decode(server, decode, admitted)
            return Batch(decode=decode, preempt=preempt) if decode else Batch(preempt=preempt)
        return Batch()


def capture_point(server: Server, ids: np.ndarray, budget_s: float, eta_s: float) -> dict[str, Any]:
    """A scheduling point as the state of its queue (for per-batch instances)."""
    return {
        "now_s": float(server.now),
        "server": int(server.id),
        "ids": ids.copy(),
        "decoding": np.isin(ids, server.decoding_ids()),
        "waiting": np.isin(ids, np.asarray(server.waiting, dtype=_INT)),
        "generated": generated_tokens(server, ids).copy(),
        "remaining_prefill": remaining_prefill_tokens(server, ids.tolist()),
        "kv_free_tokens": int(server.kv_free_tokens),
        "latency_budget_s": float(budget_s),
        "eta_s": float(eta_s),
    }


# -- GoRouting (Sec. 4.3) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GoRoutingParams:
    """Thresholds of GoRouting (Algorithm 2; the paper gives no values).

    Parameters
    ----------
    alpha : float
        Candidates are the instances with gain ``Delta_p >= alpha * Delta_max`` (line 8).
    mu : float
        Lightly loaded: estimated execution ``< mu * TTFT_SLO`` (line 10).
    lam : float
        Heavily loaded: estimated execution with the request ``> lam * TTFT_SLO`` (line 11).
    """

    alpha: float = 0.9
    mu: float = 0.25
    lam: float = 0.75

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
        if not 0 <= self.mu <= self.lam:
            raise ValueError(f"need 0 <= mu <= lam, got mu={self.mu}, lam={self.lam}")


class GoRouting:
    """GoRouting (router ``"go-routing"``): gain-oriented, capability-aware dispatch.

    For each instance ``p`` of the entry pool, with ``Q_p`` its prefill queue (waiting and
    prefilling requests) and ``n_d`` its decoding requests:

    - ESTIMATEEXEC: co-located, ``phi_a`` (Eq. 8) over ``Q_p`` plus the decode time ``n_d b_d``
      (``b_d`` the estimator's time of one decode token at the queue's mean context), with
      ``t_budget = max(eta, min(smallest remaining time in Q_p, TPOT SLO))``; prefill servers of
      a disaggregated cluster, ``phi_p = sum exec + |Q| t_c``;
    - ESTIMATEGAIN(Q): the first-token weights of the requests of ``Q`` whose remaining time is at
      least ESTIMATEEXEC(Q) (every request placed at the end of the queue: conservative);
    - ``Delta_p = gain(Q_p + req) - gain(Q_p)``; candidates ``C`` those within ``alpha`` of the
      best; if ``Delta_max > 0``: the most idle light instance, else the most loaded candidate
      that stays below ``lam * TTFT``, else the least loaded candidate; otherwise a random
      instance (seeded).

    The router sees the servers' true state, so the paper's compensation for stale queue
    information (``ts_curr - ts_p``) is not needed.

    References
    ----------
    ProServe, Sec. 4.3 and Algorithm 2.
    """

    name = "go-routing"

    def __init__(self, params: GoRoutingParams | None = None) -> None:
        self.params = params or GoRoutingParams()
        self._data: RequestData | None = None
        self._est: LatencyEstimator | None = None
        self._eta_s = 0.0
        self._rng = np.random.default_rng(0)

    def start(self, instance: Instance, seed: int) -> None:
        self._data = RequestData.of(instance)
        self._est = LatencyEstimator(instance.timing)
        self._eta_s = default_eta_s(instance)
        self._rng = np.random.default_rng(seed)

    def _exec_and_gain(
        self, server: Server, request: int, now: float
    ) -> tuple[float, float, float, float]:
        """``(exec without, exec with, gain without, gain with)`` of the request on ``server``."""
        data, est = self._data, self._est
        assert data is not None and est is not None
        queue = server.prefilling + server.waiting
        ids = np.asarray((*queue, request), dtype=_INT)
        prefix = kv_held_tokens(server, ids)
        prefix[-1] = 0
        rem = np.empty(len(ids), dtype=_INT)
        rem[:-1] = remaining_prefill_tokens(server, queue)
        rem[-1] = 0
        _, deadline, weight = next_token(data, server, ids)
        # the request being routed has not been placed: its prompt is all left
        rem[-1] = int(prompt_tokens(server, ids[-1:])[0])
        if data.cached.any():
            # a given cache: the waiting requests (and this one) attend to their cached
            # prefixes, which they do not prefill
            waiting = len(server.prefilling)
            prefix[waiting:] += data.cached[ids[waiting:]]
            rem[-1] -= int(data.cached[request])
        weight[-1] = data.first_weight[request]
        deadline[-1] = data.arrival_s[request] + data.ttft_s[request]
        remain = deadline - now
        exec_s = est.exec_s(est.chunk_features(rem, prefix))
        if server.role == "prefill":
            base = exec_s[:-1].sum() + len(queue) * est.t_c
            with_req = base + exec_s[-1] + est.t_c
        else:
            dec = server.decoding_ids()
            n_d = len(dec)
            decode_s = 0.0
            if n_d:
                ctx = kv_held_tokens(server, dec)
                decode_s = float(est.exec_s(est.decode_features(np.array([ctx.mean()])))[0]) * n_d
            tpot = data.tpot_s[ids]
            tpot = tpot[tpot > 0]
            limit = min(float(remain.min()), float(tpot.min()) if len(tpot) else math.inf)
            budget = max(self._eta_s, limit)
            steps = budget / (budget - est.t_c) if budget > est.t_c else math.inf
            if math.isinf(budget):
                steps = 1.0
            work = float(exec_s[:-1].sum()) + decode_s
            # a server with nothing to run needs no time, whatever its step count (inf * 0)
            base = steps * work if work else 0.0
            with_req = steps * (exec_s.sum() + decode_s)
        gain_without = float(weight[:-1][remain[:-1] >= base].sum())
        gain_with = float(weight[remain >= with_req].sum())
        return float(base), float(with_req), gain_without, gain_with

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        data = self._data
        assert data is not None
        p = self.params
        stats = [self._exec_and_gain(s, request, now) for s in servers]
        exec_without = np.array([s[0] for s in stats])
        exec_with = np.array([s[1] for s in stats])
        delta = np.array([s[3] - s[2] for s in stats])
        d_max = float(delta.max())
        if not d_max > 0:
            return int(self._rng.integers(len(servers)))
        cand = np.flatnonzero(delta >= p.alpha * d_max)
        ttft = float(data.ttft_s[request])
        light = cand[exec_without[cand] < p.mu * ttft]
        if len(light):
            return int(light[np.argmin(exec_without[light])])
        not_heavy = cand[~(exec_with[cand] > p.lam * ttft)]
        if len(not_heavy):
            return int(not_heavy[np.argmax(exec_without[not_heavy])])
        return int(cand[np.argmin(exec_without[cand])])


class MostFreeKV:
    """Decode-pool router: the decode instance with the most free KV memory (lowest index on
    ties), GoRouting's decode choice (ProServe Sec. 4.3, Algorithm 2 line 20)."""

    name = "most-free-kv"

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return max(range(len(servers)), key=lambda j: (servers[j].kv_free_tokens, -j))


# -- baselines (Sec. 5.1) -----------------------------------------------------------------------


class _DataBudgeted(EDFTokens):
    """A Sarathi-budgeted policy that reads the instance's request data when a run starts and
    orders the budget's items by :meth:`_ranked` (``(kind, request)``, see ``EDFTokens``)."""

    _data: RequestData | None = None

    def start(self, instance: Instance, seed: int) -> None:
        super().start(instance, seed)
        self._data = RequestData.of(instance)

    def _items(self, server: Server) -> list[tuple[int, int]]:
        assert self._data is not None
        return self._ranked(self._data, server)

    def _ranked(self, data: RequestData, server: Server) -> list[tuple[int, int]]:
        raise NotImplementedError


class SarathiPriority(_DataBudgeted):
    """Sarathi-Priority: Sarathi's token budget, decode tokens first, then prefill chunks by
    priority (higher first) and arrival (earlier first).

    References
    ----------
    ProServe, Sec. 5.1 ("Sarathi-Priority").
    """

    name = "sarathi-priority"

    def _ranked(self, data: RequestData, server: Server) -> list[tuple[int, int]]:
        pre = server.prefilling + server.waiting
        ids = np.asarray(pre, dtype=_INT)
        ranked = [pre[i] for i in np.lexsort((data.arrival_s[ids], -data.priority[ids]))]
        return [(0, r) for r in server.decoding] + [(1, r) for r in ranked]


class FairBatching(_DataBudgeted):
    """FairBatching, as ProServe runs it: within Sarathi's token budget, first the decode tokens
    nearing their deadline (due within one TPOT of now), earliest deadline first; then prefill
    chunks, earliest first-token deadline first; then the remaining decode tokens.

    References
    ----------
    ProServe, Sec. 5.1 ("FairBatching ... prioritizing decode sequences nearing their deadlines,
    followed by prefill sequences, and finally the remaining decode requests"); Lyu et al.,
    FairBatching, arXiv:2510.14392.
    """

    name = "fairbatching"

    def _ranked(self, data: RequestData, server: Server) -> list[tuple[int, int]]:
        dec = server.decoding_ids()
        pre = np.asarray(server.prefilling + server.waiting, dtype=_INT)
        _, d_dec, _ = next_token(data, server, dec)
        _, d_pre, _ = next_token(data, server, pre)
        near = d_dec - server.now <= data.tpot_s[dec]
        dec_order = np.argsort(d_dec, kind="stable")
        first = [(0, int(dec[i])) for i in dec_order if near[i]]
        rest = [(0, int(dec[i])) for i in dec_order if not near[i]]
        prefill = [(1, int(pre[i])) for i in np.argsort(d_pre, kind="stable")]
        return first + prefill + rest


#: VTC's cost of a prompt token and of an output token (Sheng et al., OSDI 2024, Sec. 4).
VTC_PROMPT_COST = 1.0
VTC_OUTPUT_COST = 2.0


class WeightedVTC(_DataBudgeted):
    """Weighted VTC: token-level fair sharing between priority classes, weighted by priority.

    Each class (requests of one priority weight) has a virtual token counter: the service it
    received, prompt tokens at cost 1 and output tokens at cost 2, divided by its weight. Within
    Sarathi's token budget, decode tokens go first (VTC keeps running requests in the batch);
    prefill chunks then go to the class with the smallest counter, FCFS within a class. A class
    that becomes backlogged is lifted to the smallest counter among the backlogged ones, so it
    cannot claim service for the time it was idle (VTC's counter lift).

    References
    ----------
    Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024 (VTC, Algorithm 2,
    weighted variant); ProServe, Sec. 5.1 ("Weighted VTC").
    """

    name = "weighted-vtc"

    def __init__(self, token_budget: int = 0) -> None:
        super().__init__(token_budget)
        self._counter: dict[float, float] = {}
        self._seen: dict[int, tuple[int, int]] = {}

    def start(self, instance: Instance, seed: int) -> None:
        super().start(instance, seed)
        self._counter = {}
        self._seen = {}

    def _charge(self, server: Server) -> None:
        """Add the service running requests received since the last call to their counters."""
        data = self._data
        assert data is not None
        running = server.decoding + server.prefilling
        if not running:
            return
        ids = np.asarray(running, dtype=_INT)
        gen = generated_tokens(server, ids)
        rem = remaining_prefill_tokens(server, running)
        prompt = prompt_tokens(server, ids)
        for r, g, left, p in zip(running, gen.tolist(), rem.tolist(), prompt.tolist(), strict=True):
            done_prompt = max(int(p) - int(left), 0)
            g0, p0 = self._seen.get(r, (0, 0))
            w = float(data.priority[r])
            cost = (VTC_PROMPT_COST * (done_prompt - p0) + VTC_OUTPUT_COST * (g - g0)) / w
            self._counter[w] = self._counter.get(w, 0.0) + max(cost, 0.0)
            self._seen[r] = (g, done_prompt)

    def _ranked(self, data: RequestData, server: Server) -> list[tuple[int, int]]:
        self._charge(server)
        pre = server.prefilling + server.waiting
        queues: dict[float, list[int]] = {}
        for r in pre:
            queues.setdefault(float(data.priority[r]), []).append(r)
        backlogged = [w for w in queues]
        if backlogged:
            floor = min(self._counter.get(w, 0.0) for w in backlogged)
            for w in backlogged:
                self._counter[w] = max(self._counter.get(w, floor), floor)
        virtual = {w: self._counter.get(w, 0.0) for w in queues}
        ranked: list[int] = []
        heads = {w: 0 for w in queues}
        while len(ranked) < len(pre):
            w = min((v, w) for w, v in virtual.items() if heads[w] < len(queues[w]))[1]
            r = queues[w][heads[w]]
            heads[w] += 1
            ranked.append(r)
            virtual[w] += VTC_PROMPT_COST * server.remaining_prefill(r) / w
        return [(0, r) for r in server.decoding] + [(1, r) for r in ranked]


register_policy(
    "slide-batching",
    SlideBatching,
    "ProServe SlideBatching: latency budget, URGENT by gain density, NORMAL by deadline",
)
register_policy(
    "vllm-fcfs", PrefillFirstFCFS, "ProServe's vLLM-FCFS baseline (the 'vllm' policy, same class)"
)
register_policy(
    "sarathi-fcfs",
    SarathiFCFS,
    "ProServe's Sarathi-FCFS baseline (the 'sarathi' policy, same class)",
    token_budget=True,
)
register_policy(
    "sarathi-priority",
    SarathiPriority,
    "Sarathi token budget, decode first, then prefills by priority and arrival",
    token_budget=True,
)
register_policy(
    "fairbatching",
    FairBatching,
    "FairBatching: near-deadline decodes, then prefills by deadline, then other decodes",
    token_budget=True,
)
register_policy(
    "weighted-vtc",
    WeightedVTC,
    "Weighted VTC: prefills to the priority class with the least weighted service",
    token_budget=True,
)
register_router("go-routing", GoRouting, "ProServe GoRouting: gain-oriented, capability-aware")
register_router("min-load", LeastLoaded, "ProServe's Min-Load baseline (least-loaded, same class)")
register_router("most-free-kv", MostFreeKV, "decode pool: the instance with the most free KV")


# -- one scheduling decision as a schedule (per-batch instances) ---------------------------------


class _OneIteration:
    """Asks ``inner`` once, at ``at_s``, and records the batch it returns; idles afterwards."""

    def __init__(self, inner: Any, at_s: float) -> None:
        self.inner = inner
        self.at_s = at_s
        self.batch: Batch | None = None

    def start(self, instance: Instance, seed: int) -> None:
        self.inner.start(instance, seed)
        self.batch = None

    def next_batch(self, server: Server) -> Batch:
        if self.batch is not None:
            return Batch()
        if server.now < self.at_s:
            return Batch(wake_at_s=self.at_s)
        self.batch = self.inner.next_batch(server)
        return self.batch


def one_iteration_schedule(instance: Instance, policy: Any, *, seed: int = 0) -> Any:
    """The one iteration ``policy`` chooses at a snapshot's scheduling time, as a Schedule.

    ``instance.settings["scheduling_time_s"]`` is the scheduling point; the warm-started
    requests of the snapshot are in place by then. A choice that preempts or rejects requests
    cannot be written as one iteration and raises ValueError.
    """
    from slolab.sim import run
    from slolab.sim.schedule import PlannedIteration, Schedule

    at = float(instance.settings["scheduling_time_s"])
    wrapper = _OneIteration(policy, at)
    run(instance, wrapper, seed=seed)
    batch = wrapper.batch
    if batch is None or batch.empty:
        return Schedule(((),))
    if len(batch.preempt) or len(batch.reject) or len(batch.forward) or len(batch.static):
        raise ValueError(
            f"{type(policy).__name__} preempted, rejected or forwarded requests at {at} s; "
            "one iteration cannot express that"
        )
    entries = tuple((int(r), "prefill", int(c)) for r, c in batch.prefill) + tuple(
        (int(r), "decode", 1) for r in np.asarray(batch.decode).tolist()
    )
    return Schedule(((PlannedIteration(entries, not_before_s=at),),))


def _snapshot_slide(instance: Instance, order: str) -> SlideBatching:
    eta = instance.settings.get("eta_s")
    return SlideBatching(
        SlideBatchingParams(eta_s=None if eta is None else float(eta), order=order)
    )


def slide_batching_step(instance: Instance, *, seed: int) -> Any:
    """SlideBatching's one-iteration choice at a snapshot (its ``eta`` from the settings)."""
    return one_iteration_schedule(instance, _snapshot_slide(instance, "slide"), seed=seed)


def slide_deadline_step(instance: Instance, *, seed: int) -> Any:
    """The "w/ only deadline" ablation's one-iteration choice (Sec. 5.4)."""
    return one_iteration_schedule(instance, _snapshot_slide(instance, "deadline"), seed=seed)


def slide_density_step(instance: Instance, *, seed: int) -> Any:
    """The "w/ only density" ablation's one-iteration choice (Sec. 5.4)."""
    return one_iteration_schedule(instance, _snapshot_slide(instance, "density"), seed=seed)

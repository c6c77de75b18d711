"""PolyServe's online scheduler and the baselines of its evaluation.

PolyServe (Sec. 4) bins requests by TPOT tier and gives each tier its own servers (one engine
pool per tier, named ``tpot-20ms`` and so on); every tier grows from, and returns servers to, a
best-effort pool (servers switched off in the engine: they cost nothing).

- :class:`PolyServeController` is the router (and, disaggregated, the decode router) and the
  scaler at once, as PolyServe's central scheduler is. It keeps the requests it cannot place in
  its own queues (the engine's held requests, :data:`slolab.sim.HOLD`), routes each request to
  the *highest-load* server of its tier that can still meet its deadlines (a load gradient,
  Sec. 4.3), with profile-based admission (Sec. 4.5: the server's future iterations predicted
  from a (batch, KV) table and the mean output length) and wait-time-aware admission (Sec.
  4.6), promotes a request to a tighter tier only when its own is full (lazy promotion, Sec.
  4.4), moves a *pending* server (its last own-tier request gone) into the tier of the requests
  it runs when that tier needs a server, and autoscales: a tier with requests it cannot place
  takes a server from the best-effort pool; the last server of a tier returns to it once empty
  (Sec. 4.3-4.4).
- :class:`PolyServePolicy` forms each server's batches: co-located, decode every running request
  and fill the tier's TPOT with prefill chunks (continuous chunked-prefill prediction, Sec.
  4.7); disaggregated prefill servers, dynamic chunking (Sec. 4.7); decode servers decode
  everything the router admitted.
- Baselines (Sec. 5.1): ``random`` (a random server), ``minimal`` (the server with the lowest
  predicted cycle time) and ``chunk`` (least-loaded routing and a static token budget, swept
  by the studies), co-located or disaggregated as ``--mode`` says (``chunk`` is co-located
  only, as in the paper). These are *policies*; the router registry's ``random`` (a random
  server for any policy) is a different thing.

Every parameter the paper leaves open is a field of :class:`PolyServeParams`, with the value
chosen and why in ``docs/polyserve.md``.

References
----------
PolyServe: Efficient Multi-SLO Serving at Scale, Sec. 3.4 (batch limits), 4.2-4.7 (design),
5.1 (setup, baselines).
"""

from __future__ import annotations

import dataclasses
import math
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.heuristics.baselines import (
    LeastLoaded,
    RandomRouter,
    SarathiFCFS,
    _AdmissionOrder,
    _make_room_for_decode,
)
from slolab.heuristics.policies import Scheduler, register_policy
from slolab.sim.policy import HOLD, Batch
from slolab.sim.scaling import ClusterView, ScaleAction
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
)
from slolab.timing.forms import ProfiledTiming, row_timer, timing_lines
from slolab.timing.inverse import time_to_tokens
from slolab.timing.presets import LLAMA31_8B

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.timing.base import TimingModel

__all__ = [
    "H200_LLAMA31_8B_KV_BYTES_PER_TOKEN",
    "H200_LLAMA31_8B_KV_TOKENS",
    "MinimalCycleRouter",
    "PolyServeController",
    "PolyServeParams",
    "PolyServePolicy",
    "Profile",
    "kv_peak",
    "polyserve_cluster",
    "tier_pool",
]

#: KV tokens of one H200 serving Llama-3.1-8B: vLLM's 90 % of 141 GB less the 16.06 GB of FP16
#: weights, over 131,072 B of KV per token (32 layers, 8 KV heads of 128, K and V in FP16).
H200_LLAMA31_8B_KV_TOKENS = 845_642
#: KV bytes per token of Llama-3.1-8B (the KV cache moved from a prefill to a decode server).
H200_LLAMA31_8B_KV_BYTES_PER_TOKEN = LLAMA31_8B.kv_bytes_per_token  # 2 x 32 x 8 x 128 x 2 B
#: Name of the disaggregated prefill pool.
PREFILL_POOL = "prefill"
#: Admission outcomes: admitted; refused for batch, memory or TPOT; refused on a deadline.
_ADMIT, _FULL, _TOO_LATE = 0, 1, 2
#: Entries a memo of the profile's answers (tokens, chunks) holds before it starts afresh.
MEMO_ENTRIES = 1 << 16
#: Integer-valued float sums below this are exact in any order (every partial sum is exact).
_EXACT_INTEGERS = 1 << 52


def tier_pool(tpot_s: float) -> str:
    """Name of the pool of the tier of TPOT ``tpot_s``: ``"tpot-20ms"``."""
    return f"tpot-{tpot_s * 1e3:g}ms"


def tiers_of(instance: Instance) -> np.ndarray:
    """The instance's TPOT tiers (s), tightest first: its requests' distinct TPOT SLOs."""
    tpot = np.asarray(instance.workload["tpot_slo_s"], dtype=float)
    tiers = np.unique(tpot[np.isfinite(tpot)])
    if not len(tiers):
        raise ValueError(
            f"instance {instance.name!r}: no request has a TPOT SLO; PolyServe bins requests by "
            "TPOT tier (use --slos polyserve)"
        )
    return tiers


def polyserve_cluster(instance: Instance, mode: str, servers: int) -> Instance:
    """``instance`` on PolyServe's pools: one empty pool per TPOT tier (mixed co-located,
    decode disaggregated, plus an empty ``prefill`` pool), with the instance's limits; the
    fleet size ``servers`` goes to the settings (the controller's cap)."""
    from slolab.instances.records import Cluster, Pool

    if mode not in ("colocated", "disaggregated"):
        raise ValueError(f"PolyServe runs colocated or disaggregated, got mode {mode!r}")
    cl = instance.cluster
    role = "mixed" if mode == "colocated" else "decode"
    pools = [Pool(tier_pool(t), role) for t in tiers_of(instance)]
    if mode == "disaggregated":
        pools.insert(0, Pool(PREFILL_POOL, "prefill"))
    cluster = Cluster.from_pools(
        pools,
        kv_capacity_tokens=cl.kv_capacity_tokens,
        max_batch_size=cl.max_batch_size,
        max_batch_tokens=cl.max_batch_tokens,
        kv_bytes_per_token=cl.kv_bytes_per_token,
        kv_transfer_bandwidth_bytes_per_s=cl.kv_transfer_bandwidth_bytes_per_s,
        startup_s=cl.startup_s,
        move_s=cl.move_s,
    )
    settings = {**instance.settings, "servers": int(servers), "mode": mode}
    return dataclasses.replace(instance, cluster=cluster, settings=settings)


# -- the profile ----------------------------------------------------------------------------------


class Profile:
    """PolyServe's profiled map (token batch size, KV tokens) -> iteration time (Sec. 4.5).

    Tabulated from the run's timing model on decode shapes (:meth:`ProfiledTiming.from_model`),
    as a profiler of decode iterations would measure it; prefill attention is not charged (the
    paper ignores it below 10K-token sequences). Reads are bilinear.
    """

    def __init__(self, timing: TimingModel, kv_capacity_tokens: int, max_tokens: int = 1 << 16):
        small = np.arange(1, 64, dtype=float)
        large = np.unique(np.round(np.geomspace(64, max(max_tokens, 128), 160)))
        self.table = ProfiledTiming.from_model(
            timing,
            np.concatenate([small, large]),
            np.linspace(0.0, max(float(kv_capacity_tokens), 1.0) * 1.25, 65),
            name=f"profile of {getattr(timing, 'name', 'timing')}",
        )
        self._xs_list = self.table.batch_sizes.tolist()
        self._ys_list = self.table.kv_tokens.tolist()
        self._cols = self.table.times_s.T.tolist()  # one list of times per KV grid point
        self._max_tokens: dict[tuple[float, float], int] = {}
        # a read between two KV grid points never falls along the batch grid: at each step
        # the lower point's time stays put and the upper's does not fall, or both rise by
        # more than the read's rounding can undo (docs/polyserve.md, "The chunk search")
        times = self.table.times_s
        steps = np.diff(times, axis=0)
        lower, upper = steps[:, :-1], steps[:, 1:]
        clear = 16 * np.finfo(float).eps * float(np.abs(times).max())
        self._rising = bool(
            (((lower == 0) & (upper >= 0)) | ((lower > clear) & (upper > clear))).all()
        )
        # the grid searches' last segment by (decode batch, budget); batch 0: max_tokens
        self._segment_guess: dict[tuple[int, float], int] = {}

    def time(self, tokens: float, kv_tokens: float) -> float:
        """Predicted iteration time (s) of ``tokens`` tokens reading ``kv_tokens`` KV tokens."""
        return self.table._scalar_time(float(tokens), float(kv_tokens))

    def _column_parts(self, kv_tokens: float) -> tuple[list[float], list[float], float]:
        """The two KV grid columns around ``kv_tokens`` and its place between them: the time
        at batch grid index ``i`` is ``lo[i] + ty * (hi[i] - lo[i])``."""
        ys = self._ys_list
        j = min(max(bisect_right(ys, kv_tokens) - 1, 0), len(ys) - 2)
        ty = (kv_tokens - ys[j]) / (ys[j + 1] - ys[j])
        return self._cols[j], self._cols[j + 1], ty

    def _segment(self, fits: Callable[[int], bool], near: tuple[int, float] | None = None) -> int:
        """Index ``lo`` of the grid segment where ``fits`` (true up to a batch grid index, then
        false) turns false (the last segment when it never does), or -1 when even the first
        grid point does not fit.

        ``near``: the caller knows ``fits`` monotone (:attr:`_rising`, a KV within the grid);
        the search then starts from the last answer under that key (decode batch, budget;
        batch 0 for :meth:`max_tokens`), the same answer (docs/polyserve.md, "The chunk
        search")."""
        if not fits(0):
            return -1
        last = len(self._xs_list) - 1
        guess = None if near is None else self._segment_guess.get(near)
        if guess is None:
            lo = last - 1 if fits(last) else _last_fitting(0, last, fits)
        else:
            lo = _last_fitting_near(0, last, guess, fits)
            lo = last - 1 if lo == last else lo  # extrapolate the last segment
        if near is not None:
            _remember(self._segment_guess, near, lo, MEMO_ENTRIES)
        return lo

    def max_tokens(self, kv_tokens: float, budget_s: float) -> int:
        """Most tokens an iteration reading ``kv_tokens`` KV tokens may carry within
        ``budget_s`` (0 when not even one token fits): bisection on the batch grid at that KV
        (times non-decreasing in the batch), then the bilinear segment solved. Remembered by
        its arguments (the table is fixed)."""
        key = (kv_tokens, budget_s)
        most = self._max_tokens.get(key)
        if most is None:
            most = self._max_tokens_at(kv_tokens, budget_s)
            _remember(self._max_tokens, key, most, MEMO_ENTRIES)
        return most

    def _max_tokens_at(self, kv_tokens: float, budget_s: float) -> int:
        lo_col, hi_col, ty = self._column_parts(kv_tokens)

        def fits(i: int) -> bool:  # the column's read (_column) within the budget
            low = lo_col[i]
            return low + ty * (hi_col[i] - low) <= budget_s

        lo = self._segment(fits, (0, budget_s) if self._rising and 0.0 <= ty <= 1.0 else None)
        if lo < 0:
            return 0
        xs = self._xs_list
        t0 = lo_col[lo] + ty * (hi_col[lo] - lo_col[lo])
        t1 = lo_col[lo + 1] + ty * (hi_col[lo + 1] - lo_col[lo + 1])
        slope = (t1 - t0) / (xs[lo + 1] - xs[lo])
        if slope <= 0:
            return int(xs[lo + 1])
        return max(int(math.floor(xs[lo] + (budget_s - t0) / slope + 1e-9)), 0)

    def max_chunk(
        self, kv_tokens: float, budget_s: float, batch: int, attention_s: float, longest: int
    ) -> int:
        """Most prefill tokens ``c`` an iteration of ``batch`` other tokens reading
        ``kv_tokens`` KV tokens may add within ``budget_s`` when the chunk also pays its
        prefill attention: the largest ``c`` with ``time(batch + c, kv) + attention_s *
        chunk_attention_work(c, longest) <= budget_s`` (``attention_s``: seconds per unit of
        attention work; ``longest``: the longest prompt the chunks come from). With
        ``attention_s = 0`` this is ``max_tokens(kv, budget) - batch``. May be below 1 (no
        chunk fits)."""
        if attention_s <= 0:
            return self.max_tokens(kv_tokens, budget_s) - batch
        longest = int(longest)
        span = 2 * longest + 1
        whole_work = longest * (longest + 1)

        # the predicates below are written out, without calls to chunk_attention_work or the
        # table's reader where the arguments allow: the same operations on the same integers,
        # so the same floats (this runs at every co-located admission check)
        def cost(x: float) -> float:  # attention_s * chunk_attention_work(chunk, longest)
            c = int(x) - batch
            if c <= 0:
                return 0.0
            if c < longest:
                return attention_s * (c * (span - c) / 2.0)
            whole, rest = divmod(c, longest)
            return attention_s * (whole * whole_work / 2.0 + rest * (span - rest) / 2.0)

        xs = self._xs_list
        lo_col, hi_col, ty = self._column_parts(kv_tokens)

        def fits(i: int) -> bool:  # at(i) + cost(xs[i]) <= budget_s, the same operations
            low = lo_col[i]
            return low + ty * (hi_col[i] - low) + cost(xs[i]) <= budget_s

        # with the grid's times rising at this KV, fits and the segment's line below are
        # monotone: a bisection then finds their last true point, and so does a search
        # outwards from the last answer for the same batch and budget (docs/polyserve.md,
        # "The chunk search")
        rising = self._rising and 0.0 <= ty <= 1.0
        lo = self._segment(fits, (batch, budget_s) if rising else None)
        if lo < 0:
            return -batch
        t0 = lo_col[lo] + ty * (hi_col[lo] - lo_col[lo])  # the column's reads, as _column
        x_lo = int(xs[lo])
        gap = xs[lo + 1] - xs[lo]
        slope = (lo_col[lo + 1] + ty * (hi_col[lo + 1] - lo_col[lo + 1]) - t0) / gap
        if lo + 2 < len(xs):
            x_hi = int(xs[lo + 1])
        else:  # the last segment, extrapolated: the table alone is over the budget beyond
            x_hi = x_lo + (int((budget_s - t0) / slope) + 1 if slope > 0 else 1)

        def on_line(x: int) -> bool:
            return t0 + slope * (x - x_lo) + cost(x) <= budget_s

        # the table's reading at this KV (ProfiledTiming._scalar_time): on the segment's own
        # span the batch grid index is lo, else it is looked up
        read = self.table._scalar_time
        kv = float(kv_tokens)
        x0, low0, low1, high0, high1 = (
            xs[lo],
            lo_col[lo],
            lo_col[lo + 1],
            hi_col[lo],
            hi_col[lo + 1],
        )
        top = xs[lo + 1]

        def within(x: int) -> bool:  # as time() reads the table, to the last bit
            f = float(x)
            if x0 <= f < top:
                tx = (f - x0) / gap
                low = low0 + tx * (low1 - low0)
                high = high0 + tx * (high1 - high0)
                return max(low + ty * (high - low), 0.0) + cost(x) <= budget_s
            return read(f, kv) + cost(x) <= budget_s

        # the segment's line first (cheap), then the table's own reading settles the last bit
        if not rising:
            x = _last_fitting(x_lo, x_hi, on_line)
        else:  # from where the line crosses for a chunk within the longest prompt
            x = _last_fitting_near(
                x_lo,
                x_hi,
                batch + _line_crossing(t0, slope, x_lo, batch, attention_s, longest, budget_s),
                on_line,
            )
        if within(x) and not within(x + 1):
            return x - batch
        while x_lo > 0 and not within(x_lo):  # the grid's rounding put the crossing lower
            x_lo -= 1
        return _last_fitting(x_lo, x_hi, within) - batch


def _remember(memo: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Store ``value`` under ``key`` in ``memo``, started afresh once it holds ``limit``."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value


def _last_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """The largest ``x`` in ``[lo, hi]`` with ``fits(x)`` (non-increasing in ``x``), given
    ``fits(lo)``: bisection, ``hi`` itself checked last."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return hi if fits(hi) else lo


def _line_crossing(
    t0: float, slope: float, x0: int, batch: int, attention_s: float, longest: int, budget_s: float
) -> int:
    """Roughly the chunk ``c <= longest`` where ``t0 + slope (batch + c - x0) + attention_s c
    (2 longest - c + 1) / 2`` reaches ``budget_s`` (a quadratic in ``c``; ``longest`` when it
    does not within the prompt): a starting point for the exact search, nothing more."""
    room = budget_s - t0 - slope * (batch - x0)
    rise = attention_s * (2 * longest + 1) / 2.0 + slope
    disc = rise * rise - 2.0 * attention_s * room
    if room <= 0 or disc < 0 or rise <= 0:
        return 0 if room <= 0 else longest
    return min(int(2.0 * room / (rise + math.sqrt(disc))), longest)


def _last_fitting_near(lo: int, hi: int, guess: int, fits: Callable[[int], bool]) -> int:
    """:func:`_last_fitting` for a monotone ``fits`` (true up to a point, then false), given
    ``fits(lo)``: steps of 1, 2, 4, ... outwards from ``guess`` (clamped to ``[lo, hi]``)
    bracket the last true point, then bisection. The same answer as :func:`_last_fitting`,
    in fewer calls when ``guess`` is near it."""
    x = min(max(guess, lo), hi)
    step = 1
    if fits(x):
        lo = x
        while lo < hi:
            nxt = min(lo + step, hi)
            if not fits(nxt):
                hi = nxt
                break
            lo = nxt
            step *= 2
        else:
            return lo
    else:
        hi = x
        while hi - step > lo:
            if fits(hi - step):
                lo = hi - step
                break
            hi -= step
            step *= 2
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def chunk_attention_work(chunk: int, longest: int) -> float:
    """Largest prefill attention work of one iteration carrying ``chunk`` consecutive prompt
    tokens (in the order the server prefills them) of prompts of at most ``longest`` tokens.

    A prompt token at position ``i`` (1-based) attends to ``i`` keys, so an iteration's work is
    the sum of its tokens' positions (:func:`slolab.timing.base.prefill_attention_work`). With
    ``chunk = q longest + s`` (``0 <= s < longest``) the largest sum is ``q`` whole prompts of
    ``longest`` tokens and the last ``s`` tokens of another:
    ``q longest (longest + 1) / 2 + s (2 longest - s + 1) / 2``; for ``chunk <= longest`` the
    chunk that ends the longest prompt, ``c (longest - (c - 1) / 2)``. The proof is in
    docs/polyserve.md ("Co-located admission with prefill attention")."""
    if chunk <= 0:
        return 0.0
    chunk, longest = int(chunk), int(longest)
    if chunk < longest:  # no whole prompt: the sum below is 0.0 + this term, the same float
        return chunk * (2 * longest - chunk + 1) / 2.0
    whole, rest = divmod(chunk, longest)
    return whole * longest * (longest + 1) / 2.0 + rest * (2 * longest - rest + 1) / 2.0


def kv_peak(contexts: np.ndarray, remaining: np.ndarray) -> float:
    """Largest KV a set of requests will hold as they grow: request ``i`` holds
    ``contexts[i] + t`` tokens at step ``t < remaining[i]``, then leaves.

    ``KV(t) = sum_{i: remaining_i > t} (contexts_i + t)`` is largest just before a request
    leaves (``t = remaining_k - 1``), so it is the maximum over ``k`` of the suffix sums of the
    contexts sorted by ``remaining`` plus ``(requests left) (remaining_k - 1)``.

    References
    ----------
    PolyServe, Sec. 4.5 ("simulates future iterations and computes the maximum KV cache size").
    """
    n = len(contexts)
    if n == 0:
        return 0.0
    # the arrays' own methods and the ufunc's reduce: what np.argsort, np.cumsum and np.max
    # call, without their Python wrappers (this runs at every co-located admission check)
    order = remaining.argsort(kind="stable")
    rem = remaining[order]
    ctx = contexts[order]
    suffix = ctx[::-1].cumsum()[::-1]
    alive = n - np.arange(n)
    return float(np.maximum.reduce(suffix + alive * (rem - 1.0)))


class KvPeakBase:
    """:func:`kv_peak` of a fixed set of requests with one more request added, for many
    candidate additions: the fixed set is sorted once.

    In :func:`kv_peak`'s sorted order, requests with equal remaining steps leave together, and
    the first of such a group has the largest suffix sum and the most requests left, so the
    peak is the largest over the groups ``v`` of ``S(v) + N(v) (v - 1)``, with ``S(v)`` the
    contexts and ``N(v)`` the count of the requests with ``remaining >= v``. An added request
    with at least every other's remaining steps (a newcomer has emitted the fewest tokens)
    adds its context to every ``S(v)`` and one to every ``N(v)``, and a group of its own when
    its remaining steps exceed them all. The contexts are integers, so the suffix sums are
    exact whatever their order, and every group's value is the same float operations as in
    :func:`kv_peak`: :meth:`with_one` returns the same float (proof in docs/polyserve.md,
    "Admission inputs kept per server state"). Fewer remaining steps than the fixed set's
    largest: :func:`kv_peak` on the joined arrays.
    """

    __slots__ = ("contexts", "remaining", "top", "suffix", "left", "levels", "steps")

    def __init__(self, contexts: np.ndarray, remaining: np.ndarray) -> None:
        self.contexts = contexts
        self.remaining = remaining
        n = len(contexts)
        order = remaining.argsort(kind="stable")
        rem = remaining[order]
        first = np.ones(n, dtype=bool)  # the first request of each group of equal steps
        np.not_equal(rem[1:], rem[:-1], out=first[1:])
        self.top = float(rem[-1]) if n else -math.inf
        self.suffix = contexts[order][::-1].cumsum()[::-1][first]
        self.left = n + 1 - np.flatnonzero(first)  # requests left, the added one included
        self.levels = rem[first]
        # (requests left) x (steps - 1), as kv_peak multiplies them
        self.steps = self.left * (self.levels - 1.0)

    def plus(self, context: float, remaining: float) -> KvPeakBase:
        """The base of the fixed set and one more request of ``context`` tokens and
        ``remaining >= top`` steps, without sorting again: each group keeps its first position,
        so its ``S(v)`` gains the context (integers: the same float) and its ``N(v)`` one, and
        steps above every other's open a group of their own (proof in docs/polyserve.md,
        "Admission inputs carried across queue moves")."""
        base = KvPeakBase.__new__(KvPeakBase)
        base.contexts = np.append(self.contexts, context)
        base.remaining = np.append(self.remaining, remaining)
        base.top = remaining
        if remaining > self.top:
            base.suffix = np.append(self.suffix + context, context)
            base.left = np.append(self.left + 1, 2)
            base.levels = np.append(self.levels, remaining)
        else:
            base.suffix = self.suffix + context
            base.left = self.left + 1
            base.levels = self.levels
        base.steps = base.left * (base.levels - 1.0)
        return base

    def with_one(self, context: float, remaining: float) -> float:
        """:func:`kv_peak` of the fixed set and one request of ``context`` tokens and
        ``remaining`` steps, to the bit."""
        if remaining < self.top:
            return kv_peak(np.append(self.contexts, context), np.append(self.remaining, remaining))
        alone = context + (remaining - 1.0)  # the added request's own group: 1 x (steps - 1)
        if not len(self.suffix):
            return alone
        peak = float(np.maximum.reduce(self.suffix + context + self.steps))
        return max(peak, alone) if remaining > self.top else peak


def prefill_attention_s(timing: TimingModel) -> float:
    """Seconds an iteration pays per unit of prefill attention work under ``timing``: the
    largest coefficient among its affine lines (:func:`slolab.timing.timing_lines`), else the
    model's own difference between a one-token chunk with and without 10^6 units of work."""
    try:
        _, coefs = timing_lines(timing)
    except ValueError:
        work = 1e6
        plain = timing.time_of(prefill_tokens=1.0, num_prefill_seqs=1.0)
        heavy = timing.time_of(
            prefill_tokens=1.0, num_prefill_seqs=1.0, prefill_attention_work=work
        )
        return max((heavy - plain) / work, 0.0)
    return max(float(coefs[:, F_PREFILL_ATTN].max()), 0.0)


# -- parameters -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PolyServeParams:
    """PolyServe's settings (the paper gives the mechanisms; the values are ours, see
    docs/polyserve.md).

    Parameters
    ----------
    prefill_chunk_tokens : int
        Disaggregated prefill token budget ``C`` of dynamic chunking (Sec. 4.7's example: 1024).
    min_chunk_tokens : int
        Co-located: prefill tokens an iteration carries even when the decodes fill the TPOT (so
        a prefill never starves).
    dispatch_lookahead : int
        Held requests of one queue tried in a row without placing one before the queue waits
        for the next retry (a request no server can take does not block those behind it).
    prefill_slack_tpots : float
        Disaggregated: a prefill server is chosen only if the prompt is predicted done this many
        of the request's TPOTs before its TTFT deadline, so that its second token (due one TPOT
        after it) can still find a decode server (Sec. 4.6's worst case).
    tick_s : float
        How often the controller looks at the cluster (scale-ups, retries).
    scale_down_s : float
        How often it checks each tier's last server ("periodically", Sec. 4.3).
    promotion : {"lazy", "eager", "none"}
        Lazy (Sec. 4.4): a tighter tier only when the own tier is full; eager: tighter tiers
        first; none: own tier only (ablations).
    chunk_timing : {"model", "profile"}
        How a co-located server sizes its prefill chunks within the tier's TPOT: with its
        iteration-time model, prefill attention included (``"model"``), or with the (batch, KV)
        profile alone, prefill attention ignored as the paper's router does (``"profile"``).
    tpot_bound : {"decoding", "always"}
        When a co-located iteration must stay within the tier's TPOT. ``"decoding"`` (the
        default): when a request decodes on the server (Sec. 3.4 bounds the iteration "from
        the decode perspective"); with none decoding, the first prompt in deadline order is
        chunked as the server allows (its token cap), and the admission predicts that prefill
        on an empty server. ``"always"``: every iteration, prompts alone too (Sec. 4.7 read
        literally: "to attain TPOT, the prefill is chunked into more pieces"), the former rule.
    kv_reserve : float
        Share of a server's KV memory admission keeps free (outputs longer than the mean use
        it; a disaggregated decode server cannot recompute a prompt to make room).
    mean_output_tokens : float, optional
        The output length every prediction assumes (Sec. 4.5: the average decode length);
        default the instance's mean.
    """

    prefill_chunk_tokens: int = 1024
    min_chunk_tokens: int = 32
    dispatch_lookahead: int = 16
    prefill_slack_tpots: float = 1.0
    tick_s: float = 0.005
    scale_down_s: float = 1.0
    promotion: str = "lazy"
    chunk_timing: str = "model"
    tpot_bound: str = "decoding"
    kv_reserve: float = 0.05
    mean_output_tokens: float | None = None

    def __post_init__(self) -> None:
        for name in ("prefill_chunk_tokens", "min_chunk_tokens", "dispatch_lookahead"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("tick_s", "scale_down_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0 (s), got {v!r}")
        if not (math.isfinite(self.prefill_slack_tpots) and self.prefill_slack_tpots >= 0):
            raise ValueError(f"prefill_slack_tpots must be >= 0, got {self.prefill_slack_tpots!r}")
        if self.promotion not in ("lazy", "eager", "none"):
            raise ValueError(f"promotion must be lazy, eager or none, got {self.promotion!r}")
        if not 0 <= self.kv_reserve < 1:
            raise ValueError(f"kv_reserve must be in [0, 1), got {self.kv_reserve!r}")
        if self.chunk_timing not in ("model", "profile"):
            raise ValueError(f"chunk_timing must be model or profile, got {self.chunk_timing!r}")
        if self.tpot_bound not in ("decoding", "always"):
            raise ValueError(f"tpot_bound must be decoding or always, got {self.tpot_bound!r}")
        if self.mean_output_tokens is not None and not self.mean_output_tokens >= 1:
            raise ValueError(f"mean_output_tokens must be >= 1, got {self.mean_output_tokens}")


@dataclass(frozen=True)
class _Requests:
    """Per-request arrays the controller and the policy read once."""

    arrival: np.ndarray
    prompt: np.ndarray
    ttft: np.ndarray  # inf without a TTFT SLO
    tpot: np.ndarray  # the tier's TPOT (best effort: the loosest)
    tier: np.ndarray  # class index, tightest 0 (best effort: the loosest)
    best_effort: np.ndarray

    @classmethod
    def of(cls, instance: Instance, tiers: np.ndarray) -> _Requests:
        wl = instance.workload
        tpot = np.asarray(wl["tpot_slo_s"], dtype=float)
        finite = np.isfinite(tpot)
        tier = np.where(finite, np.searchsorted(tiers, np.where(finite, tpot, 0.0)), len(tiers) - 1)
        return cls(
            arrival=wl.arrival_s.astype(float),
            prompt=wl.prompt_tokens.astype(np.int64),
            ttft=np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf),
            tpot=tiers[tier],
            tier=tier.astype(np.int64),
            best_effort=~finite,
        )


# -- the controller ---------------------------------------------------------------------------------


class _QueuedPrompts:
    """The prompts queued on a co-located server (prefilling and waiting) as the admission
    reads them, for one server state: ``(first-token deadline, tokens left, tokens done)``
    sorted, and over each prefix of that order the tokens left, the longest prompt and the
    prefill attention work. The prompts ahead of a request are such a prefix (those due by its
    deadline, or before now when that is later), so each check bisects instead of walking the
    queue.

    The work of a prompt, ``left (done + (left + 1) / 2)``, is an integer (``left (left + 1)``
    is even), kept as one: while every sum of them stays below ``_EXACT_INTEGERS`` the float
    sum the admission formed in queue order is exact, so it equals the integer sum in any
    order (docs/polyserve.md, "Admission inputs kept per server state"); beyond, it is
    formed as before."""

    __slots__ = ("in_order", "rows", "deadlines", "ahead", "longest", "work", "headroom")

    def __init__(self, rows: list[tuple[float, int, int]]) -> None:
        self.in_order = rows
        self.rows = sorted(rows)
        self.deadlines = [dq for dq, _, _ in self.rows]
        self.ahead = ahead = [0]
        self.longest = longest = [0]
        self.work = work = [0]
        for _, left, done in self.rows:
            ahead.append(ahead[-1] + left)
            longest.append(max(longest[-1], done + left))
            work.append(work[-1] + left * done + left * (left + 1) // 2)
        # how much more integer work (the request's own) keeps every float step exact
        self.headroom = _EXACT_INTEGERS - work[-1] if longest[-1] < _EXACT_INTEGERS else 0

    def ahead_of(
        self, deadline: float, now: float, prompt: int, charged: bool
    ) -> tuple[int, int, int, float]:
        """For a request of ``prompt`` tokens due at ``deadline``: how many rows are ahead of
        it (those due by its deadline, and those due before ``now``, late already, which the
        server prefills first), their tokens left, the longest prompt (the request's own
        included) and their attention work; with ``charged`` false the longest is the
        request's prompt and the work 0.0, as when prefill attention is not charged."""
        i = (
            bisect_left(self.deadlines, now)
            if now > deadline
            else bisect_right(self.deadlines, deadline)
        )
        if not charged:
            return i, self.ahead[i], prompt, 0.0
        if prompt * (prompt + 1) // 2 < self.headroom:
            work = float(self.work[i])
        else:
            work = 0.0
            for dq, left, done in self.in_order:
                if dq <= deadline or dq < now:
                    work += left * (done + (left + 1) / 2.0)
        return i, self.ahead[i], max(prompt, self.longest[i]), work


class _TierRanking:
    """:meth:`PolyServeController._ranked` of ``servers``, each tier ranked when placement
    first asks for it (``get``): a placement that admits on its own tier reads the loads of
    that tier's servers only. A tier's list is the same: its servers sorted on (minus the
    load, the place in the tier's list, the index), a total order, so the same whatever order
    they are listed in."""

    __slots__ = ("controller", "servers", "members", "done")

    def __init__(self, controller: PolyServeController, servers: Sequence[Server]) -> None:
        self.controller = controller
        self.servers = servers
        self.members = controller._members(servers)
        self.done: dict[int, list[int]] = {}

    def get(self, t: int) -> list[int] | None:
        got = self.done.get(t)
        if got is None:
            members = self.members.get(t)
            if members is None:
                return None
            servers = self.servers
            got = self.done[t] = _placement_order(
                ((k, sid, servers[k].load) for k, sid in members), self.controller._ranks()[t]
            )
        return got


def _placement_order(found: Iterable[tuple[int, int, int]], places: dict[int, int]) -> list[int]:
    """The indices of a tier's servers ``found`` as (index, server id, load) in the order
    placement tries them: highest load first, ties to the server with the earlier place in the
    tier's list (``places``; unlisted ones last), then to the lower index."""
    return [k for _, _, k in sorted((-load, places.get(sid, 1 << 30), k) for k, sid, load in found)]


class _HeldQueue:
    """Held requests of one queue (a tier's, or the prefill queue), kept sorted by (first-token
    deadline, the order they were held), so that a retry reads them in dispatch order without
    sorting: those still on time (deadline >= now) by deadline, then the late ones by deadline,
    ties in the order held (the order of the engine's held list)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[float, int, int]] = []  # (deadline, held order, request)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, deadline: float, order: int, r: int) -> None:
        insort(self.entries, (deadline, order, r))

    def positions(self, now: float) -> Iterator[int]:
        """Positions in :attr:`entries` in dispatch order at ``now`` (read lazily)."""
        split = bisect_left(self.entries, (now,))  # the first with deadline >= now
        yield from range(split, len(self.entries))
        yield from range(split)

    def remove(self, positions: list[int]) -> None:
        for i in sorted(positions, reverse=True):
            del self.entries[i]


class _DecodeSide:
    """The controller seen as the decode router of a disaggregated cluster."""

    def __init__(self, controller: PolyServeController) -> None:
        self.c = controller

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return self.c.route_decode(request, servers, now)

    def dispatch(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        return self.c.dispatch_decode(held, servers, now)


class PolyServeController:
    """PolyServe's central scheduler: entry router, decode router (:attr:`decode_router`) and
    scaler in one object.

    Co-located, a request is placed on a server of its tier (prefill and decode there). Disag-
    gregated, the prefill side is one shared pool scheduled by earliest first-token deadline
    (Sec. 4.2); after the KV transfer the request is placed on a decode server of its tier.
    Placement: see the module docstring; admission: :meth:`admit_colocated`,
    :meth:`admit_decode`, :meth:`admit_prefill`.

    Parameters
    ----------
    params : PolyServeParams, optional
    """

    name = "polyserve"

    def __init__(self, params: PolyServeParams | None = None) -> None:
        self.params = params or PolyServeParams()
        self.interval_s = self.params.tick_s
        self.decode_router = _DecodeSide(self)
        # let the engine pass over ticks that would repeat the last one exactly while requests
        # are held (held_quiet_until, pass_held_ticks; the same run either way): on in the
        # registered scheduler (polyserve_scheduler); off, every such tick runs
        self.skip_held_ticks = False

    # -- life -----------------------------------------------------------------------------------
    def start(self, instance: Instance, seed: int) -> None:
        """Read the instance: tiers, pools, the profile, the mean output length."""
        self.tiers = tiers_of(instance)
        self.req = _Requests.of(instance, self.tiers)
        self.mode = instance.cluster.mode
        self.pools = [tier_pool(t) for t in self.tiers]
        self.tier_of_pool = {p: j for j, p in enumerate(self.pools)}
        known = {p.name for p in instance.cluster.resolved_pools()}
        missing = [p for p in self.pools if p not in known]
        if missing:
            raise ValueError(
                f"PolyServe needs one pool per TPOT tier ({', '.join(self.pools)}); the cluster "
                f"lacks {', '.join(missing)} (build it with polyserve_cluster)"
            )
        pool = instance.cluster.resolved_pools()[-1]
        self.kv_capacity = int(pool.kv_capacity_tokens)  # type: ignore[arg-type]
        self.kv_admit = self.kv_capacity * (1.0 - self.params.kv_reserve)
        self.max_seqs = int(pool.max_batch_size)  # type: ignore[arg-type]
        self.max_tokens = int(pool.max_batch_tokens)  # type: ignore[arg-type]
        self.profile = Profile(instance.timing, self.kv_capacity)
        self._read_time = self.profile.table._scalar_time  # Profile.time on floats
        self.attention_s = (
            prefill_attention_s(instance.timing) if self.params.chunk_timing == "model" else 0.0
        )
        self._chunk_times = [
            self.profile.time(i, 0.0) for i in range(2 * self.params.prefill_chunk_tokens + 1)
        ]
        mean = self.params.mean_output_tokens
        self.d_hat = float(mean if mean is not None else instance.workload.output_tokens.mean())
        self.fleet = int(instance.settings.get("servers", instance.cluster.servers))
        self.order: list[list[int]] = [[] for _ in self.tiers]  # servers of each tier, join order
        # the tier lists as _ranks last read them, with each server's place
        self._rank_lists: list[tuple[list[int], dict[int, int]]] = [([], {}) for _ in self.tiers]
        # (servers, their pools, the pending ids, per tier its (index, id) pairs): _members
        self._members_of: tuple[Any, list[str], set[int], dict[int, list[tuple[int, int]]]] = (
            None,
            [],
            set(),
            {},
        )
        self.prefill_order: list[int] = []
        self.pending: set[int] = set()  # servers on the pending list (Sec. 4.4)
        # per tier, as Python ints and bools (read at every tick and retry point)
        self.held_count = [0] * len(self.tiers)  # entry (CO) or decode (PD)
        self.held_prefill = 0
        # the held requests themselves, in dispatch order: per tier (the side _route_tier holds
        # on) and the prefill queue; numbered in the order held
        self._held_tiers = [_HeldQueue() for _ in self.tiers]
        self._held_prefill = _HeldQueue()
        self._held_order = 0
        self.unplaced = [False] * len(self.tiers)  # a tier left requests unplaced
        self.unplaced_prefill = False
        self.next_scale_down = 0.0
        self.placed: dict[int, int] = {}  # requests placed on each server (tier or decode)
        self._prefill_queue: tuple[float, dict[int, int]] = (-1.0, {})
        self._refused: dict[int, dict[int, tuple[int, float, int]]] = {}
        # held requests every usable server refused with _FULL, and the signature then
        self._full_at: dict[int, tuple[tuple[int, int], ...]] = {}
        # the last tick, as held_quiet_until reads it: when its decide ran changing nothing it
        # decides by (-inf: it changed something), when the last dispatch ran, the routing
        # decisions that dispatch counted, the (request, server id) pairs it refused _TOO_LATE
        # afresh, and how many _TOO_LATE refusals it answered from an earlier moment's memory
        self._decided_quiet_at = -math.inf
        self._dispatched_at = -math.inf
        self._dispatch_decisions = 0
        self._fresh_late: list[tuple[int, int]] = []
        self._late_hits = 0
        self.decisions = 0
        self.decision_s = 0.0
        # each request's first routing decision (s): at the entry router, and disaggregated also
        # at the decode router when its KV cache arrives (retries of held requests not counted)
        self.latencies_s: list[float] = []
        # co-located: when the admission predicted each request placed on time to end its
        # prompt (s; its first token), for comparing with the replay
        self.predicted_prefill_end_s: dict[int, float] = {}
        self._predicted_end = math.nan
        # co-located prefill chunks by (KV peak, TPOT, decode batch, longest prompt)
        self._chunks: dict[tuple[float, float, int, int], int] = {}
        # per server id, what the admission reads of it, with the server state read at
        # (Server._state_key): its KV-peak base and (co-located) its queued prompts
        self._bases: dict[int, tuple[tuple[object, ...], KvPeakBase]] = {}
        self._queues: dict[int, tuple[tuple[object, ...], _QueuedPrompts]] = {}
        # the admission's parts on a server with no request, by (request, TPOT, late, KV used)
        self._empty: dict[tuple[int, float, bool, int], tuple[int, float, int, float, float, float]]
        self._empty = {}
        # with tpot_bound="decoding", the same for the prefill as the server allows
        self._unbound = self.params.tpot_bound == "decoding"
        self._row_time = row_timer(instance.timing)
        self._idle: dict[tuple[int, float, bool, int], tuple[int, tuple[float, ...], float]]
        self._idle = {}
        # fixed for the run, read at every placement: the tiers each class may use in the order
        # tried, each tier's TPOT as a float, each request's first-token deadline (the same
        # float sums as arrival + TTFT read one at a time)
        self._tries = [self._candidate_tiers(j) for j in range(len(self.tiers))]
        self._tier_taus = [float(t) for t in self.tiers]
        self._first_deadline: list[float] = (self.req.arrival + self.req.ttft).tolist()
        self._tier_list: list[int] = self.req.tier.tolist()  # each request's class, as a list

    # -- routing ----------------------------------------------------------------------------------
    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        """Entry router: the prefill server (disaggregated) or the tier server (co-located) of an
        arriving request, or HOLD (its queue is not empty, or no server admits it)."""
        t0 = time.perf_counter()
        if self.mode == "disaggregated":
            k = HOLD if self.held_prefill else self._place_prefill(request, servers, now)
            if k == HOLD:
                self.held_prefill += 1
                self.unplaced_prefill = True
                self._held_prefill.add(self._deadline(request), self._held_order, request)
                self._held_order += 1
        else:
            k = self._route_tier(request, servers, now)
        return self._timed(k, t0)

    def route_decode(self, request: int, servers: Sequence[Server], now: float) -> int:
        """Decode router: a decode server of the request's tier (or a tighter one), or HOLD."""
        t0 = time.perf_counter()
        return self._timed(self._route_tier(request, servers, now), t0)

    def _route_tier(self, request: int, servers: Sequence[Server], now: float) -> int:
        """A server of the request's tier (or a tighter one), or HOLD behind its tier's queue."""
        j = int(self.req.tier[request])
        k = HOLD if self.held_count[j] else self._place(request, servers, now)
        if k == HOLD:
            self.held_count[j] += 1
            self.unplaced[j] = True
            self._held_tiers[j].add(self._deadline(request), self._held_order, request)
            self._held_order += 1
        return k

    def _deadline(self, r: int) -> float:
        """Request ``r``'s first-token deadline, arrival + TTFT (s; inf without a TTFT SLO)."""
        return self._first_deadline[r]

    def _synced(self, held: Sequence[int], queues: list[_HeldQueue]) -> list[_HeldQueue]:
        """``queues``, rebuilt from ``held`` (the engine's list, in the order held) when they
        do not hold as many requests: they hold every request this router held, and the
        engine may have rejected one instead of holding it (no server could ever fit it)."""
        if len(held) == sum(len(q) for q in queues):
            return queues
        fresh = [_HeldQueue() for _ in queues]
        for i, r in enumerate(held, start=self._held_order):
            j = int(self.req.tier[r]) if len(queues) > 1 else 0
            fresh[j].entries.append((self._deadline(r), i, int(r)))
        for q in fresh:
            q.entries.sort()
        self._held_order += len(held)
        return fresh

    def _timed(self, k: int, t0: float) -> int:
        """Count one first routing decision that started at ``t0``; return its answer ``k``."""
        spent = time.perf_counter() - t0
        self.decisions += 1
        self.decision_s += spent
        self.latencies_s.append(spent)
        return k

    def dispatch(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        """Held entry requests, earliest deadline first: disaggregated, the prefill queue (one
        queue, EDF on arrival + TTFT); co-located, each tier's queue until its head finds no
        server."""
        if self.mode == "disaggregated":
            placed = self._dispatch_queue(held, servers, now, self._place_prefill)
            self.held_prefill -= len(placed)
            self.unplaced_prefill = self.held_prefill > 0
            return placed
        return self._dispatch_tiers(held, servers, now)

    def dispatch_decode(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        return self._dispatch_tiers(held, servers, now)

    def _dispatch_tiers(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        t0 = time.perf_counter()
        self._dispatched_at = now
        self._fresh_late = []
        self._late_hits = 0
        decisions = self.decisions
        self._held_tiers = queues = self._synced(held, self._held_tiers)
        placed: list[tuple[int, int]] = []
        # loads change only once the engine places the pairs: one look at the servers serves
        # the rankings and every signature of this dispatch
        usable = self._tier_servers(servers)
        ranked = self._ranked(servers, usable)
        for j, queue in enumerate(queues):
            if not len(queue):
                self.unplaced[j] = False
                continue
            failures = 0
            signature = self._signature(j, servers, usable)
            taken = []
            for i in queue.positions(now):  # on time by deadline, then lost
                r = queue.entries[i][2]
                self.decisions += 1
                k = self._place(r, servers, now, signature, ranked)
                if k == HOLD:
                    failures += 1
                    if failures >= self.params.dispatch_lookahead:
                        break
                    continue
                failures = 0
                placed.append((r, k))
                taken.append(i)
                self.held_count[j] -= 1
                signature = self._signature(j, servers, usable)
            queue.remove(taken)
            self.unplaced[j] = self.held_count[j] > 0
        self._dispatch_decisions = self.decisions - decisions
        self.decision_s += time.perf_counter() - t0
        return placed

    def _dispatch_queue(self, held, servers, now, place) -> list[tuple[int, int]]:
        t0 = time.perf_counter()
        (queue,) = self._synced(held, [self._held_prefill])
        self._held_prefill = queue
        placed = []
        taken = []
        failures = 0
        for i in queue.positions(now):  # on time first, each by deadline
            r = queue.entries[i][2]
            self.decisions += 1
            k = place(r, servers, now)
            if k == HOLD:
                failures += 1
                if failures >= self.params.dispatch_lookahead:
                    break
                continue
            failures = 0
            placed.append((r, k))
            taken.append(i)
        queue.remove(taken)
        self.decision_s += time.perf_counter() - t0
        return placed

    def _candidate_tiers(self, j: int) -> list[int]:
        """Tiers a class-``j`` request may use, in the order tried (Sec. 4.4)."""
        promotion = self.params.promotion
        if promotion == "none":
            return [j]
        tighter = list(range(j - 1, -1, -1))  # nearest tighter tier first
        return [j, *tighter] if promotion == "lazy" else [*reversed(tighter), j]

    def _place(
        self,
        r: int,
        servers: Sequence[Server],
        now: float,
        signature: tuple[tuple[int, int], ...] | None = None,
        ranked: dict[int, list[int]] | None = None,
    ) -> int:
        """Highest-load admitting server of the request's tier, then of tighter tiers; HOLD.

        ``signature``: the (server, requests departed) of every server the request may use
        (:meth:`_signature`). When every one of them refused ``r`` for its batch, memory or
        TPOT (``_FULL``) at that same signature, each would refuse it again from memory
        (:meth:`_admit`): HOLD at once, without asking them. ``ranked``: :meth:`_ranked` of
        ``servers`` when the caller already has it (loads do not change within a dispatch)."""
        if signature is not None and self._full_at.get(r) == signature:
            return HOLD
        j = int(self.req.tier[r])
        by_tier = _TierRanking(self, servers) if ranked is None else ranked
        late = self._late(r, now)
        all_full = True
        admit = self._admit
        for t in self._tries[j]:
            ks = by_tier.get(t)
            if not ks:
                continue
            tau = self._tier_taus[t]
            for k in ks:
                code = admit(servers[k], r, tau, late, now)
                if code == _ADMIT:
                    sid = servers[k].id
                    self.placed[sid] = self.placed.get(sid, 0) + 1
                    if not late and servers[k].role == "mixed":
                        self.predicted_prefill_end_s[r] = self._predicted_end
                    self._refused.pop(r, None)
                    self._full_at.pop(r, None)
                    return k
                all_full = all_full and code == _FULL
        if signature is not None and all_full:
            self._full_at[r] = signature
        return HOLD

    def _tier_servers(self, servers: Sequence[Server]) -> list[tuple[int, int, int, int]]:
        """(index in ``servers``, server id, tier, load) of every tier server, pending ones
        excepted (:meth:`_members`, tier by tier): what :meth:`_ranked` and :meth:`_signature`
        read of the servers, read once for a dispatch (no server joins, leaves or changes its
        load before the engine places the dispatch's pairs); both sort what they read."""
        return [
            (k, sid, t, servers[k].load)
            for t, members in self._members(servers).items()
            for k, sid in members
        ]

    def _ranked(
        self,
        servers: Sequence[Server],
        usable: list[tuple[int, int, int, int]] | None = None,
    ) -> dict[int, list[int]]:
        """Per tier, the indices of its servers (pending ones excepted) in the order placement
        tries them: highest load first, ties to the server that joined the tier first.

        ``usable``: :meth:`_tier_servers` of ``servers`` when the caller has it. Each server
        is sorted on (minus its load, its place in the tier's list, its index): servers the
        first two leave tied (two not yet listed) stay in index order, as in a stable sort on
        the first two over the servers in index order. A server's place is the first index of
        its id in the list, the only one (a server joins a list only when it is in none)."""
        if usable is None:
            usable = self._tier_servers(servers)
        keyed: dict[int, list[tuple[int, int, int]]] = {}
        for k, sid, t, load in usable:
            keyed.setdefault(t, []).append((k, sid, load))
        ranks = self._ranks()
        return {t: _placement_order(found, ranks[t]) for t, found in keyed.items()}

    def _members(self, servers: Sequence[Server]) -> dict[int, list[tuple[int, int]]]:
        """Per tier, (index in ``servers``, id) of its servers, pending ones excepted, in the
        order of ``servers``; kept while the servers, their pools and the pending set are the
        same (a server changes its pool in place when assigned to another)."""
        kept_servers, kept_pools, kept_pending, members = self._members_of
        pools = [s.pool for s in servers]
        if kept_servers is servers and kept_pools == pools and kept_pending == self.pending:
            return members
        tier_of_pool = self.tier_of_pool
        pending = self.pending
        members = {}
        for k, s in enumerate(servers):
            t = tier_of_pool.get(s.pool)
            if t is not None and s.id not in pending:
                members.setdefault(t, []).append((k, s.id))
        self._members_of = (servers, pools, set(pending), members)
        return members

    def _ranks(self) -> list[dict[int, int]]:
        """Per tier, each listed server's place in the tier's list (:attr:`order`; the first
        index of its id), rebuilt only for a list that changed since the last call."""
        kept = self._rank_lists
        for t, order in enumerate(self.order):
            if kept[t][0] != order:
                places: dict[int, int] = {}
                for i, sid in enumerate(order):
                    places.setdefault(sid, i)
                kept[t] = (list(order), places)
        return [places for _, places in kept]

    def _signature(
        self,
        j: int,
        servers: Sequence[Server],
        usable: list[tuple[int, int, int, int]] | None = None,
    ) -> tuple[tuple[int, int], ...]:
        """(server id, requests departed from it) of every server a class-``j`` request may use
        (its tier's and, with promotion, tighter tiers', pending ones excepted), in id order: the
        state :meth:`_admit`'s memory of ``_FULL`` refusals keys on. ``usable``:
        :meth:`_tier_servers` of ``servers`` when the caller has it."""
        if usable is None:
            usable = self._tier_servers(servers)
        tiers = set(self._tries[j])
        placed = self.placed
        return tuple(
            sorted((sid, placed.get(sid, 0) - load) for _, sid, t, load in usable if t in tiers)
        )

    def _late(self, r: int, now: float) -> bool:
        """The request's next deadline has passed: it is admitted on the TPOT and memory checks
        alone (it is late anyway; it must not make others late)."""
        first = self._first_deadline[r]
        if self.mode == "disaggregated":
            return now > first + self.req.tpot[r]
        return now > first

    def _place_prefill(self, r: int, servers: Sequence[Server], now: float) -> int:
        """Highest-load (queued prefill tokens) prefill server that finishes the prompt by the
        TTFT deadline (Sec. 4.7); HOLD."""
        # queued prompt tokens per prefill server, read once per moment (within one moment only
        # this router's own placements change them, and it adds those itself)
        cached_at, cache = self._prefill_queue
        if cached_at != now or len(cache) != len(servers):
            cache = {
                k: sum(s.remaining_prefill(q) for q in s.waiting + s.prefilling)
                for k, s in enumerate(servers)
                if s.role == "prefill"
            }
            self._prefill_queue = (now, cache)
        queued = [(left, k) for k, left in cache.items()]
        if not queued:
            return HOLD
        rank = {sid: i for i, sid in enumerate(self.prefill_order)}
        queued.sort(key=lambda e: (-e[0], rank.get(servers[e[1]].id, 1 << 30)))
        deadline = self.req.arrival[r] + self.req.ttft[r]
        p = int(self.req.prompt[r])
        if now > deadline:
            k = queued[-1][1]  # lost already: the least-loaded server, behind the others
            cache[k] += p
            return k
        for left, k in queued:
            s = servers[k]
            done = s.free_at_s + self.prefill_time(left + p)
            if done <= deadline - self.params.prefill_slack_tpots * self.req.tpot[r]:
                cache[k] += p
                return k
        return HOLD

    def prefill_time(self, tokens: int) -> float:
        """Predicted time of ``tokens`` prompt tokens under dynamic chunking with budget ``C``:
        iterations of ``C`` tokens, the last two merged when fewer than ``2C`` remain."""
        c = self.params.prefill_chunk_tokens
        if tokens <= 0:
            return 0.0
        full = max(math.ceil(tokens / c) - 1, 0)
        if tokens - (full - 1) * c < 2 * c and full >= 1:
            full -= 1
        last = tokens - full * c
        times = self._chunk_times  # profile time of i prefill tokens, i <= 2C
        return full * times[c] + (
            times[last] if last < len(times) else self.profile.time(last, 0.0)
        )

    # -- admission ----------------------------------------------------------------------------------
    def _peak_with(
        self, s: Server, context: float, generated: float, key: tuple[Any, ...] | None = None
    ) -> float:
        """Predicted KV peak of ``s`` with one more request (``context`` tokens, ``generated``
        emitted); every request's output is predicted as ``d_hat``.

        Decoding requests count at their KV, queued and prefilling ones at their prompt plus
        what they emitted (their whole prompt will be resident). The server's part is read
        once per server state (:meth:`_peak_base`; ``key``: the server's ``_state_key`` when
        the caller has read it)."""
        return self._peak_base(s, key).with_one(context, max(self.d_hat - generated, 1.0))

    def _peak_base(self, s: Server, key: tuple[Any, ...] | None = None) -> KvPeakBase:
        """The server's requests as :func:`kv_peak` reads them (contexts, and remaining steps
        ``max(d_hat - emitted, 1)``), kept while the server's state is unchanged, and carried
        across queue moves that only add requests (:meth:`_carried_base`). ``key``: the
        server's ``_state_key`` when the caller has read it."""
        if key is None:
            key = s._state_key
        got = self._bases.get(s.id)
        if got is not None:
            if got[0] == key:
                return got[1]
            carried = self._carried_base(s, got[0], got[1], key)
            if carried is not None:
                self._bases[s.id] = (key, carried)
                return carried
        dec = s.decoding_ids()
        rest = np.array(s.waiting + s.prefilling, dtype=np.int64)
        gen_rest = s.generated_of(rest)
        ctx = np.concatenate([s.kv_held_of(dec), s.prompt_of(rest) + gen_rest]).astype(float)
        gen = np.concatenate([s.generated_of(dec), gen_rest]).astype(float)
        base = KvPeakBase(ctx, np.maximum(self.d_hat - gen, 1.0))
        self._bases[s.id] = (key, base)
        return base

    def _carried_base(
        self, s: Server, was: tuple[Any, ...], base: KvPeakBase, key: tuple[Any, ...]
    ) -> KvPeakBase | None:
        """``base`` (read at key ``was``) with the requests queued on ``s`` since, or None when
        more than that changed. The same event version, iteration and window in progress and
        decoding requests mean no commit and no preemption in between, so every request read
        then has the same contexts and emitted tokens; a queue move that only adds requests
        (placements) adds theirs, each with at least every other's remaining steps
        (:meth:`KvPeakBase.plus`)."""
        # Server._state_key: (event version, iteration, window, waiting, prefilling, decoding)
        version, iteration, window, waiting, prefilling, decoding = key
        if (
            was[0] != version
            or was[1] is not iteration
            or was[2] is not window
            or was[5] != decoding
        ):
            return None
        before = set(was[3])
        before.update(was[4])
        queued = waiting + prefilling
        added = [r for r in queued if r not in before]
        if len(queued) - len(added) != len(before):
            return None  # a request left the queues
        for r in added:
            generated = float(s.generated(r))
            remaining = max(self.d_hat - generated, 1.0)
            if remaining < base.top:
                return None
            base = base.plus(float(s.prompt(r)) + generated, remaining)
        return base

    def _queued_prompts(self, s: Server, key: tuple[Any, ...]) -> _QueuedPrompts:
        """The server's queued prompts as the co-located admission reads them (tokens done
        only when prefill attention is charged), kept while the server's state (``key``, its
        ``_state_key``) is unchanged."""
        got = self._queues.get(s.id)
        if got is not None and got[0] == key:
            return got[1]
        first = self._first_deadline
        charged = self.attention_s > 0
        rows = []
        for q in s.prefilling + s.waiting:
            done = s.kv_held(q) - s.generated(q) if charged else 0
            rows.append((first[q], s.remaining_prefill(q), done))
        queue = _QueuedPrompts(rows)
        self._queues[s.id] = (key, queue)
        return queue

    def admit_decode(self, s: Server, r: int, tau_s: float, late: bool = False) -> bool:
        """Disaggregated decode admission (Sec. 4.5-4.6): with ``r`` the server's predicted peak
        KV fits memory, the iteration at the current batch and that peak stays within the tier's
        TPOT, and (unless late) ``r``'s second token, out at the end of the iteration after the
        one in progress, meets its deadline ``arrival + TTFT + TPOT``."""
        return self._admit_decode(s, r, tau_s, late) == _ADMIT

    def _admit_decode(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        b = s.load + 1
        if b > self.max_seqs or (self.max_tokens and b > self.max_tokens):
            return _FULL
        p = float(self.req.prompt[r])
        kv_now = s.kv_used_tokens + sum(s.kv_held(q) for q in s.waiting) + p + 1
        if self.profile.time(b, kv_now) > tau_s or kv_now > self.kv_admit:
            return _FULL  # cheap necessary check: the peak is at least the current KV
        peak = self._peak_with(s, p + 1.0, 1.0)
        if peak > self.kv_admit or self.profile.time(b, peak) > tau_s:
            return _FULL
        if late:
            return _ADMIT
        deadline = self.req.arrival[r] + self.req.ttft[r] + self.req.tpot[r]
        return _ADMIT if s.free_at_s + self.profile.time(b, kv_now) <= deadline else _TOO_LATE

    def admit_colocated(self, s: Server, r: int, tau_s: float, late: bool = False) -> bool:
        """Co-located admission (Sec. 4.5-4.7): with ``r`` the predicted peak KV fits, the decode
        batch at that peak leaves a prefill chunk ``c >= 1`` within the tier's TPOT (the chunk the
        whole prefill can keep as the KV grows), and (unless late) ``r``'s prompt, after the
        prompts queued on the server with earlier first-token deadlines, finishes by its TTFT
        deadline, ``free_at + ceil((ahead + p) / c) t(B + c, peak) + a W``, and so does every
        queued prompt with a later deadline (the server prefills in deadline order).

        With ``chunk_timing="model"`` the batch former charges prefill attention, so the
        prediction does too: ``a`` is the model's seconds per unit of attention work
        (:func:`prefill_attention_s`), ``c`` also pays the attention of the chunk that ends the
        longest prompt counted (:meth:`Profile.max_chunk`), and ``W`` is those prompts'
        attention work (the same however they are chunked). With ``"profile"`` (the paper's
        batch former, prefill attention ignored) ``a = 0``: the table alone, as in the paper."""
        return self._admit_colocated(s, r, tau_s, late) == _ADMIT

    def _admit_colocated(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        if not s.load:
            return self._admit_empty(s, r, tau_s, late)
        return self._admit_queued(s, r, tau_s, late)

    def _admit_queued(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        """The co-located admission read from the server's queue and decodes (on an empty
        server too, where :meth:`_admit_empty` gives the same answer)."""
        if not s.load and self._unbound:
            return self._admit_idle(s, r, tau_s, late)
        b = s.load + 1
        if b > self.max_seqs:
            return _FULL
        p = float(self.req.prompt[r])
        kv_now = s.kv_used_tokens + p
        if kv_now > self.kv_admit:
            return _FULL
        read = self._read_time
        decode_s = read(float(b), kv_now)
        if decode_s > tau_s:
            return _FULL
        first = self._first_deadline  # arrival + TTFT of every request
        deadline = first[r]
        free_at = s.free_at_s
        if not late:
            # cheap necessary check: the chunk is at most the one the current KV allows and
            # every iteration carries at least the b decode tokens; r's prompt alone already
            # too late settles it before the queue is read (the queue only adds iterations)
            most = self.profile.max_tokens(kv_now, tau_s) - b
            if most < 1:
                return _FULL
            if free_at + math.ceil(p / most) * decode_s > deadline:
                return _TOO_LATE
        # prompts ahead of r (the server prefills by deadline, lost ones last) and behind it;
        # with prefill attention charged, the longest of them (its last chunk pays the most)
        # and their attention work (c (prefix + (c + 1) / 2) summed over chunks: the same
        # however they are chunked, slolab.timing.base.prefill_attention_work)
        # (read once per server state, _QueuedPrompts)
        key = s._state_key  # read once for the queue and the KV peak
        queue = self._queued_prompts(s, key)
        charged = self.attention_s > 0
        i, queued, longest, work = queue.ahead_of(deadline, s.now, int(p), charged)
        if not late and free_at + math.ceil((queued + p) / most) * decode_s > deadline:
            return _TOO_LATE
        peak = self._peak_with(s, p, 0.0, key)
        if peak > self.kv_admit:
            return _FULL
        chunk = self._prefill_chunk(peak, tau_s, b, longest)
        if chunk < 1:
            return _FULL
        if late:
            return _ADMIT
        step = read(float(b + chunk), peak)
        tokens = queued + p
        if charged:
            work += p * (p + 1) / 2.0
        end = free_at + math.ceil(tokens / chunk) * step + self.attention_s * work
        if end > deadline:
            return _TOO_LATE
        self._predicted_end = end
        for dq, left, done in queue.rows[i:]:  # r must not make a later-deadline prompt late
            if charged:
                if done + left > longest:  # a longer prompt: smaller chunks from here on
                    longest = done + left
                    chunk = self._prefill_chunk(peak, tau_s, b, longest)
                    if chunk < 1:
                        return _TOO_LATE
                    step = read(float(b + chunk), peak)
                work += left * (done + (left + 1) / 2.0)
            tokens += left
            if free_at + math.ceil(tokens / chunk) * step + self.attention_s * work > dq:
                return _TOO_LATE
        return _ADMIT

    def _admit_empty(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        """:meth:`_admit_colocated` on a server with no request (``s.load == 0``), to the bit.

        On such a server the admission reads the server only through its KV in use and its
        free time: the batch is ``b = 1``, no prompt is queued ahead of ``r`` or behind it, and
        the KV peak is that of ``r`` alone. Every check but the two deadline tests is then a
        function of ``(r, tau_s, late, KV in use)``, and so are the two durations those tests
        add to the free time: ``ceil(p / most) t(1, KV)`` (the queue check with nothing queued
        adds the same) and ``ceil(p / c) t(1 + c, peak)`` plus the attention term. They are
        remembered by those arguments (:meth:`_empty_parts`), and each ask adds the server's
        free time to them in the order, and with the operations, of the general path, so the
        answer and the predicted end are the same floats. A held request asks every empty
        server of its tiers at every retry; this makes each such ask a lookup."""
        if self._unbound:
            return self._admit_idle(s, r, tau_s, late)
        key = (r, tau_s, late, s.kv_used_tokens)
        parts = self._empty.get(key)
        if parts is None:
            parts = self._empty_parts(s, r, tau_s, late)
            _remember(self._empty, key, parts, MEMO_ENTRIES)
        before, alone_s, after, steps_s, attention_s, deadline = parts
        if before != _ADMIT:
            return before
        free_at = s.free_at_s
        if not late and free_at + alone_s > deadline:
            return _TOO_LATE
        if after != _ADMIT or late:
            return after
        end = free_at + steps_s + attention_s
        if end > deadline:
            return _TOO_LATE
        self._predicted_end = end
        return _ADMIT

    def _admit_idle(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        """Co-located admission on a server with no request when only a decoding request bounds
        an iteration by the TPOT (``tpot_bound="decoding"``): ``r``'s prompt is prefilled as
        the server allows, in chunks of its token cap (the whole prompt without one), each
        iteration carrying that chunk alone, so its first token comes out at the free time plus
        those iterations' durations under the engine's own timing model
        (:meth:`_idle_prefill_s`), added in the engine's order: the same float as the replay.

        Before that: the batch, memory and TPOT checks of the general path (``r`` alone
        decoding within the tier's TPOT at its KV now and at its predicted peak), which refuse
        it ``_FULL``. Remembered like :meth:`_admit_empty`'s parts, by (request, TPOT, late, KV
        in use)."""
        key = (r, tau_s, late, s.kv_used_tokens)
        parts = self._idle.get(key)
        if parts is None:
            parts = self._idle_parts(s, r, tau_s)
            _remember(self._idle, key, parts, MEMO_ENTRIES)
        code, durations, deadline = parts
        if code != _ADMIT or late:
            return code
        end = s.free_at_s
        for d in durations:
            end += d
        if end > deadline:
            return _TOO_LATE
        self._predicted_end = end
        return _ADMIT

    def _idle_parts(self, s: Server, r: int, tau_s: float) -> tuple[int, tuple[float, ...], float]:
        """:meth:`_admit_idle`'s parts: the code of its checks, the prefill's iteration
        durations, ``r``'s first-token deadline."""
        p = float(self.req.prompt[r])
        deadline = self.req.arrival[r] + self.req.ttft[r]
        kv_now = s.kv_used_tokens + p
        if 1 > self.max_seqs or kv_now > self.kv_admit or self.profile.time(1, kv_now) > tau_s:
            return _FULL, (), deadline
        peak = p + (max(self.d_hat - 0.0, 1.0) - 1.0)
        if peak > self.kv_admit or self._prefill_chunk(peak, tau_s, 1, int(p)) < 1:
            return _FULL, (), deadline
        return _ADMIT, self._idle_prefill_s(int(p)), deadline

    def _idle_prefill_s(self, prompt: int) -> tuple[float, ...]:
        """The iteration durations (s) of a lone ``prompt``-token prefill with nothing
        decoding, as the batch former takes it (:class:`PolyServePolicy`: chunks of the token
        cap, the whole prompt without one) and the engine times it: each row's prefill tokens
        ``c``, one prefill sequence, attention work ``c (prefix + (c + 1) / 2)``."""
        cap = self.max_tokens or prompt
        durations = []
        done = 0
        while done < prompt:
            c = min(cap, prompt - done)
            row = [0.0] * N_FEATURES
            row[F_PREFILL_TOKENS] = float(c)
            row[F_PREFILL_ATTN] = 0.0 + c * (done + (c + 1) / 2.0)
            row[F_NUM_PREFILL] = 1.0
            durations.append(float(self._row_time(row)))
            done += c
        return tuple(durations)

    def _empty_parts(
        self, s: Server, r: int, tau_s: float, late: bool
    ) -> tuple[int, float, int, float, float, float]:
        """The parts of :meth:`_admit_empty` that do not depend on the free time: the code of
        the checks before the first deadline test (``_ADMIT`` when they pass), the duration
        that test adds, the code of the checks between the two tests, the two terms the second
        test adds (the iterations, then the attention), and ``r``'s first-token deadline."""
        p = float(self.req.prompt[r])
        deadline = self.req.arrival[r] + self.req.ttft[r]
        kv_now = s.kv_used_tokens + p
        full = (_FULL, 0.0, _FULL, 0.0, 0.0, deadline)
        if 1 > self.max_seqs or kv_now > self.kv_admit:
            return full
        decode_s = self.profile.time(1, kv_now)
        if decode_s > tau_s:
            return full
        alone_s = 0.0
        if not late:
            most = self.profile.max_tokens(kv_now, tau_s) - 1
            if most < 1:
                return full
            alone_s = math.ceil(p / most) * decode_s
        # the KV peak with no other request (KvPeakBase.with_one on the server's empty base):
        # r alone, its context plus its remaining steps less one
        peak = p + (max(self.d_hat - 0.0, 1.0) - 1.0)
        if peak > self.kv_admit:
            return _ADMIT, alone_s, _FULL, 0.0, 0.0, deadline
        chunk = self._prefill_chunk(peak, tau_s, 1, int(p))
        if chunk < 1:
            return _ADMIT, alone_s, _FULL, 0.0, 0.0, deadline
        steps_s = math.ceil(p / chunk) * self.profile.time(1 + chunk, peak)
        work = p * (p + 1) / 2.0 if self.attention_s > 0 else 0.0
        return _ADMIT, alone_s, _ADMIT, steps_s, self.attention_s * work, deadline

    def _prefill_chunk(self, peak: float, tau_s: float, b: int, longest: int) -> int:
        """The co-located prefill chunk a server can keep beside ``b`` decode tokens at the KV
        peak ``peak`` within ``tau_s`` (Sec. 4.7: a chunk the whole prefill can maintain): by
        the profile's (batch, KV) time plus, when the batch former charges it
        (``chunk_timing="model"``), the prefill attention of the chunk that ends the
        ``longest`` prompt (:func:`chunk_attention_work`), so the chunk the batch former will
        take, not a larger one. May be below 1 (no chunk fits).

        Remembered by its arguments: a pure function of them (the profile, the attention rate
        and the token cap are fixed for the run), and held requests ask the same servers the
        same question at every retry while the KV peak they predict stays put."""
        key = (peak, tau_s, b, longest)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self.profile.max_chunk(peak, tau_s, b, self.attention_s, longest)
            if self.max_tokens:
                chunk = min(chunk, self.max_tokens - b)
            _remember(self._chunks, key, chunk, MEMO_ENTRIES)
        return chunk

    def _admit(self, s: Server, r: int, tau_s: float, late: bool, now: float) -> int:
        """Admission with a memory of failures: a server that refused ``r`` for its batch, memory
        or TPOT (``_FULL``) refuses it again until a request leaves it (the prediction only grows
        while requests only join and grow); one that refused it on its deadline (``_TOO_LATE``)
        is asked again after a tick, as PolyServe's tick-driven scheduler would. Returns the
        admission code (``_ADMIT``, or why not).

        The reasons are part of the decisions: once ``r``'s deadline has passed it is admitted
        as lost, and a ``_FULL`` refusal from before (same departures) or a ``_TOO_LATE`` one
        less than a tick old still refuses it. An attempt skipped without its reason would
        ask such a server afresh (docs/planning.md, "Long prompts: the verdict")."""
        sid = s.id
        load = s.load
        departed = self.placed.get(sid, 0) - load
        seen = self._refused.get(r)
        if seen is not None and sid in seen:
            at_departed, at_s, reason = seen[sid]
            if at_departed == departed:
                if reason == _FULL:
                    return reason
                if now < at_s + self.params.tick_s:
                    self._late_hits += 1
                    return reason
        if s.role != "mixed":
            code = self._admit_decode(s, r, tau_s, late)
        elif load:
            code = self._admit_queued(s, r, tau_s, late)
        else:
            code = self._admit_empty(s, r, tau_s, late)
        if code != _ADMIT:
            if seen is None:  # nothing in between touches the memory: seen is r's entry
                seen = self._refused[r] = {}
            seen[sid] = (departed, now, code)
            if code == _TOO_LATE:
                self._fresh_late.append((r, sid))
        return code

    # -- scaling ----------------------------------------------------------------------------------
    def decide(self, cluster: ClusterView) -> Sequence[ScaleAction]:
        """Every tick: keep the tier lists; a tier (or the prefill pool) that left requests
        unplaced takes a pending server running its requests, else a best-effort server; every
        ``scale_down_s``: each tier's last server goes to the pending list once none of its
        requests is of its tier, and returns to the best-effort pool once empty."""
        now = cluster.now
        live = {s.id: s for s in cluster.servers}
        self._sync(cluster)
        pending = len(self.pending)
        for sid in sorted(self.pending):
            # an empty pending server runs no other tier's request any more: it serves its own
            # tier again while that tier holds requests (else the scale-down check drains it)
            s = live[sid]
            if s.load == 0 and self.held_count[self.tier_of_pool[s.pool]] > 0:
                self.pending.discard(sid)
        quiet = len(self.pending) == pending
        actions: list[ScaleAction] = []
        reclaimed: list[ScaleAction] = []  # at most one prefill server reclaimed per tick
        on = len(cluster.servers)
        for j in range(len(self.tiers)):
            if not (self.unplaced[j] and self.held_count[j] > 0):
                continue
            pool = self.pools[j]
            if any(live[i].state == "starting" for i in self.order[j] if i in live):
                continue  # one start-up at a time per tier
            joiner = self._pending_with(j, live)
            if joiner is not None:
                self.pending.discard(joiner)
                src = self.tier_of_pool[live[joiner].pool]
                self.order[src].remove(joiner)
                self.order[j].append(joiner)
                actions.append(ScaleAction.assign(joiner, pool))
            elif on < self.fleet:
                actions.append(ScaleAction.on(pool))
                on += 1
            elif (idle := self._idle_elsewhere(j, live, actions)) is not None:
                # the fleet is full but a server of a tier with nothing held is empty: it goes
                # back to the best-effort pool now, for this tier at the next tick (waiting for
                # the periodic scale-down check would leave this tier's requests held)
                actions.append(ScaleAction.drain(idle))
            elif self.mode == "disaggregated" and not self.unplaced_prefill and not reclaimed:
                reclaimed = self._reclaim_prefill(live)
                actions += reclaimed
            self.unplaced[j] = False
        if self.mode == "disaggregated" and self.unplaced_prefill and self.held_prefill > 0:
            starting = any(live[i].state == "starting" for i in self.prefill_order if i in live)
            if not starting and on < self.fleet:
                actions.append(ScaleAction.on(PREFILL_POOL))
                on += 1
            self.unplaced_prefill = False
        if now >= self.next_scale_down:
            quiet = False
            self.next_scale_down = now + self.params.scale_down_s
            # a server reclaimed or handed over this tick is already draining: not drained twice
            drained = {a.server for a in actions if a.kind == "drain"}
            actions += [a for a in self._scale_down(live) if a.server not in drained]
        self._decided_quiet_at = now if quiet and not actions else -math.inf
        return actions

    def skip_idle_ticks(self, cluster: ClusterView, ticks: np.ndarray) -> bool:
        """Account for scaler ticks at ``ticks`` on an idle cluster (no request anywhere) and
        let the engine skip them (:class:`slolab.sim.scaling.Scaler`): True when no server of
        PolyServe's pools is on and nothing is held, where every :meth:`decide` returns no
        action and changes only the time of the next scale-down check, advanced here as those
        calls would have; False otherwise (a check would still drain an empty server)."""
        if any(self.held_count) or self.held_prefill or self.pending:
            return False
        ours = self.tier_of_pool.keys() | {PREFILL_POOL}
        if any(s.pool in ours for s in cluster.servers):
            return False
        due = self.next_scale_down
        step = self.params.scale_down_s
        while True:
            # the check runs at the first tick at or after it is due, and is due again then + step
            k = int(ticks.searchsorted(due, side="left"))  # the method: no wrapper call
            if k >= len(ticks):
                break
            due = float(ticks[k]) + step
        self.next_scale_down = due
        return True

    def quiet_until(self, cluster: ClusterView) -> float:
        """Until when every tick returns no action and changes nothing it decides by (the
        engine may skip those ticks, :class:`slolab.sim.scaling.Scaler`): with no request held
        (entry, prefill or decode), the next scale-down check (a tick acts only for held
        requests or at a check); -inf otherwise. Requests are held only as they arrive, which
        ends the span, and disaggregated also as their KV cache reaches the decode side: the
        engine brings the next tick back to the first one at or after a KV transfer that lands
        in the span. The lists of each tier's servers are brought up to date at the next tick
        that runs, in the same order."""
        if any(self.held_count) or self.held_prefill:
            return -math.inf
        return self.next_scale_down

    def held_quiet_until(self, cluster: ClusterView) -> float:
        """Until when every tick would repeat the one just run with requests held (the engine
        may pass over those ticks, :class:`slolab.sim.scaling.Scaler`; co-located only, -inf
        otherwise or with :attr:`skip_held_ticks` off).

        The tick just run must have decided nothing and changed nothing it decides by (no
        action, no pending server released, no scale-down check), its dispatch placed nothing,
        and every ``_TOO_LATE`` refusal of that dispatch must have been asked afresh (one
        remembered from an earlier moment may have been given on a server that has changed
        since). While the servers do not change (the engine bounds the span by every server
        event, arrival, plan action and KV transfer), every later tick asks the same servers
        about the same requests and gets the same answers: a busy server's answer reads its
        free time, queue and KV, which stay put but inside a fast-forwarded decode window,
        where they move at its next iteration end (its free time); an empty server's free
        time is the tick's time, and a deadline refusal there stays one as it grows; ``_FULL``
        answers come from memory. That holds until the first of: the next scale-down check, a
        held request's first-token deadline (it turns late, and the dispatch order changes, at
        the first tick after it), and for each server that refused on the deadline, its free
        time if busy and each prompt queued there reaching its first-token deadline (the
        admission counts it ahead of every request from then on). A deadline bound is returned
        as the next float above it: a tick at the deadline itself still sees it unpassed
        (docs/planning.md, "Held ticks passed over")."""
        now = cluster.now
        if (
            not self.skip_held_ticks
            or self.mode == "disaggregated"
            or self._decided_quiet_at != now
            or self._dispatched_at != now
            or self._late_hits
        ):
            return -math.inf
        until = self.next_scale_down
        for queue in self._held_tiers:
            entries = queue.entries
            split = bisect_left(entries, (now,))  # the first still on time
            if split < len(entries):
                until = min(until, math.nextafter(entries[split][0], math.inf))
        asked = {sid for _, sid in self._fresh_late}
        first = self._first_deadline
        for s in cluster.servers:
            if s.id not in asked:
                continue  # not asked, or its refusal is _FULL and comes from memory
            if s.busy:
                # the free time moves at the next iteration end (within a fast-forwarded decode
                # window, with the KV in use, without a server event)
                until = min(until, s.free_at_s)
            if s.load:
                for q in s.prefilling + s.waiting:
                    if first[q] >= now:
                        until = min(until, math.nextafter(first[q], math.inf))
        return until

    def pass_held_ticks(self, ticks: Sequence[float]) -> None:
        """Account for the ticks at ``ticks`` (after the one :meth:`held_quiet_until` read, and
        before the time it gave) as if each had run: each counts the routing decisions of the
        last dispatch again, and each re-asks a ``_TOO_LATE`` refusal of that dispatch once it
        is a tick old (:meth:`_admit`'s own comparison, ``now < at + tick_s`` answering from
        memory), so every such memory entry ends with the time of its last re-ask."""
        self.decisions += self._dispatch_decisions * len(ticks)
        if not self._fresh_late:
            return
        times = list(ticks)
        tick_s = self.params.tick_s
        # each tick re-asks the entry the one before it wrote: from the first re-ask on, the
        # last tick does (the usual case, tested on the times themselves); else step through
        every = all(b >= a + tick_s for a, b in zip(times, times[1:], strict=False))
        for r, sid in self._fresh_late:
            seen = self._refused[r]
            departed, at_s, code = seen[sid]
            k = bisect_left(times, at_s + tick_s)
            if k == len(times):
                continue
            if every:
                at_s = times[-1]
            else:
                while k < len(times):
                    at_s = times[k]
                    k = bisect_left(times, at_s + tick_s, k + 1)
            seen[sid] = (departed, at_s, code)

    def _idle_elsewhere(
        self, j: int, live: dict[int, Server], actions: list[ScaleAction]
    ) -> int | None:
        """An empty server of another tier that holds no request (not yet drained), or None."""
        drained = {a.server for a in actions if a.kind == "drain"}
        for t, members in enumerate(self.order):
            if t == j or self.held_count[t]:
                continue
            for sid in members:
                s = live.get(sid)
                if s is not None and s.accepting and s.load == 0 and sid not in drained:
                    return sid
        return None

    def _reclaim_prefill(self, live: dict[int, Server]) -> list[ScaleAction]:
        """A decode tier needs a server and the fleet is full: drain the prefill server with the
        fewest prompt tokens queued (prefill servers may leave at any time, Sec. 4.3; this one
        finishes its queue first), keeping one; its device returns to the best-effort pool."""
        members = [i for i in self.prefill_order if i in live and live[i].accepting]
        if len(members) <= 1:
            return []

        def queued(sid: int) -> int:
            s = live[sid]
            return sum(s.remaining_prefill(q) for q in s.waiting + s.prefilling)

        victim = min(members, key=lambda sid: (queued(sid), -sid))
        return [ScaleAction.drain(victim)]

    def _sync(self, cluster: ClusterView) -> None:
        """Servers switched on since the last look join the end of their tier's list; departed
        ones leave the lists."""
        live = {s.id for s in cluster.servers}
        listed = set(self.prefill_order).union(*self.order)
        for s in cluster.servers:
            if s.id in listed or not s.accepting:
                continue
            if s.pool == PREFILL_POOL:
                self.prefill_order.append(s.id)
            elif s.pool in self.tier_of_pool:
                self.order[self.tier_of_pool[s.pool]].append(s.id)
        if not listed <= live:  # a listed server departed (else every list stays as it is)
            for lst in (*self.order, self.prefill_order):
                lst[:] = [i for i in lst if i in live]
        self.pending &= live

    def _pending_with(self, j: int, live: dict[int, Server]) -> int | None:
        """A pending server running class-``j`` requests (Sec. 4.4), or None."""
        for sid in sorted(self.pending):
            s = live.get(sid)
            if s is None or not s.accepting:
                continue
            ids = list(s.waiting) + list(s.prefilling) + list(s.decoding)
            if ids and (self.req.tier[np.array(ids, dtype=np.int64)] == j).any():
                return sid
        return None

    def _scale_down(self, live: dict[int, Server]) -> list[ScaleAction]:
        actions: list[ScaleAction] = []
        for j in range(len(self.tiers)):
            if self.held_count[j]:
                continue
            members = [i for i in self.order[j] if i in live and live[i].accepting]
            for sid in list(self.pending):
                s = live.get(sid)
                if s is not None and s.accepting and s.load == 0 and sid in members:
                    actions.append(ScaleAction.drain(sid))
                    self.pending.discard(sid)
                    members.remove(sid)
            last = next((i for i in reversed(members) if i not in self.pending), None)
            if last is None:
                continue
            s = live[last]
            if s.load == 0:
                actions.append(ScaleAction.drain(last))
                continue
            tier = self._tier_list
            if not any(
                tier[r] == j for queue in (s.waiting, s.prefilling, s.decoding) for r in queue
            ):
                self.pending.add(last)
        if self.mode == "disaggregated" and not self.held_prefill:
            members = [i for i in self.prefill_order if i in live and live[i].accepting]
            if members and live[members[-1]].load == 0:
                actions.append(ScaleAction.drain(members[-1]))
        return actions

    def summary(self) -> dict[str, float]:
        """Routing decisions made (arrivals and retries of held requests), their mean latency,
        and the latency of each request's first decision at each router it meets (mean, p99),
        in seconds."""
        lat = np.asarray(self.latencies_s) if self.latencies_s else np.zeros(1)
        return {
            "decisions": float(self.decisions),
            "decision_mean_s": self.decision_s / self.decisions if self.decisions else 0.0,
            "arrival_decision_mean_s": float(lat.mean()),
            "arrival_decision_p99_s": float(np.percentile(lat, 99)),
        }


# -- batch formation ------------------------------------------------------------------------------


class PolyServePolicy:
    """Each server's batches under PolyServe (by the server's role).

    - co-located (``mixed``): every decoding request, then prefill chunks (earliest first-token
      deadline first) up to the tokens the profile allows within the tier's TPOT at the current
      KV (at least ``min_chunk_tokens``); with no request decoding (``tpot_bound="decoding"``)
      the first prompt alone, as much of it as the server's token cap allows;
    - prefill: dynamic chunking (Sec. 4.7): prompts in deadline order fill a budget of ``C``
      tokens; a prompt with fewer than ``2C`` tokens left is finished in one iteration, and then
      nothing else joins it;
    - decode: every running request plus every transferred one memory allows.

    Memory running out (outputs longer than predicted) preempts the latest admitted request
    (vLLM's recompute), as the baselines do.
    """

    name = "polyserve"

    def __init__(self, controller: PolyServeController) -> None:
        self.c = controller
        self._order = _AdmissionOrder({})
        self._lines: dict[int, Any] = {}

    def start(self, instance: Instance, seed: int) -> None:
        self._order = _AdmissionOrder({})

    def next_batch(self, server: Server) -> Batch:
        if server.role == "decode":
            return self._decode_batch(server)
        if server.role == "prefill":
            return self._prefill_batch(server)
        return self._colocated_batch(server)

    def _chunk_within(
        self,
        timing: TimingModel,
        tau_s: float,
        shape: tuple[int, int, int, float, int],
        prefix: int,
        most: int,
    ) -> int:
        """Largest chunk (at most ``most``) of a prompt with ``prefix`` tokens cached that keeps
        the iteration ``shape`` (decode sequences, their KV, prefill tokens, attention work and
        sequences already in it) within ``tau_s``: a closed form per line of a linear or
        roofline model (:func:`slolab.timing.time_to_tokens` for other forms)."""
        lines = self._lines.get(id(timing))
        if lines is None:
            # each line as its intercept, the coefficients it reads and half the attention
            # coefficient, in Python floats converted once per timing model (the same floats
            # as converting at every call); () without lines
            try:
                intercepts, coefs = timing_lines(timing)
                lines = (
                    [
                        (
                            b,
                            row[F_DECODE_TOKENS],
                            row[F_NUM_DECODE],
                            row[F_DECODE_KV],
                            row[F_PREFILL_TOKENS],
                            row[F_PREFILL_ATTN],
                            row[F_NUM_PREFILL],
                            row[F_PREFILL_ATTN] / 2.0,
                        )
                        for b, row in zip(intercepts.tolist(), coefs.tolist(), strict=True)
                    ],
                )
            except ValueError:
                lines = ()
            self._lines[id(timing)] = lines
        decode, decode_kv, tokens, work, seqs = shape
        if not lines:
            return time_to_tokens(
                timing,
                tau_s,
                decode,
                decode_kv,
                prefix,
                max_tokens=most,
                batch_prefill_tokens=tokens,
                batch_prefill_attention_work=work,
                batch_prefill_seqs=seqs,
            )
        (rows,) = lines
        best = most
        with_it = seqs + 1
        mid = prefix + 0.5
        for b, per_decode, per_seq, per_kv, per_token, per_work, per_prefill, quad in rows:
            base = (
                b
                + per_decode * decode
                + per_seq * decode
                + per_kv * decode_kv
                + per_token * tokens
                + per_work * work
                + per_prefill * with_it
            )
            room = tau_s - base
            if room < 0:
                return 0
            lin = per_token + per_work * mid
            if quad > 0:
                root = 2.0 * room / (lin + math.sqrt(lin * lin + 4.0 * quad * room))
            elif lin > 0:
                root = room / lin
            else:
                continue
            best = min(best, int(math.floor(root)))
        return max(best, 0)

    def _deadline_order(self, ids: Sequence[int], now: float) -> list[int]:
        """``ids`` by first-token deadline, those already past it last (they are lost; they must
        not make the others late)."""
        first = self.c._first_deadline

        def key(r: int) -> tuple[bool, float, int]:
            d = first[r]
            return (d < now, d, r)

        return sorted(ids, key=key)

    def _decode_batch(self, server: Server) -> Batch:
        """Decode every running request and admit the transferred ones (the router admitted
        them) while memory allows. When the next step does not fit (outputs longer than
        predicted), the latest admitted requests are preempted; once memory frees, the server
        recomputes their KV (a prefill of prompt and generated tokens, then they decode on)."""
        decode = list(server.decoding[: server.max_batch_size])
        if len(decode) > server.kv_free_tokens:
            preempt = _make_room_for_decode(server, decode, self._order.of(server))
            return Batch(decode=decode, preempt=preempt)
        free = server.kv_free_tokens - len(decode)
        prefill: list[tuple[int, int]] = []
        admitted = False
        for r in server.waiting:
            if len(decode) + len(prefill) >= server.max_batch_size:
                break
            left = server.remaining_prefill(r)
            need = left + 1 if left else server.kv_held(r) + 1
            tokens = len(decode) + sum(c for _, c in prefill) + max(left, 1)
            if need > free or (server.max_batch_tokens and tokens > server.max_batch_tokens):
                break
            if left:
                prefill.append((r, left))  # a preempted request: recompute its KV
            else:
                decode.append(r)
            free -= need
            admitted = True
        if not decode and not prefill:
            return Batch()
        full = not admitted and len(decode) == len(server.decoding)
        return Batch(prefill=prefill, decode=server.decoding_ids() if full else decode, repeat=full)

    def _prefill_batch(self, server: Server) -> Batch:
        budget = self.c.params.prefill_chunk_tokens
        free = server.kv_free_tokens
        prefill: list[tuple[int, int]] = []
        tokens = 0
        waiting = set(server.waiting)
        for r in self._deadline_order(server.prefilling + server.waiting, server.now):
            left = server.remaining_prefill(r)
            room = budget - tokens
            if room <= 0 or len(prefill) >= server.max_batch_size:
                break
            if left <= room:
                take, stop = left, False
            elif left < 2 * budget and tokens + left <= 2 * budget:
                take, stop = left, True  # finish it now; nothing else joins
            else:
                take, stop = room, True
            need = left + 1 if r in waiting else take + (1 if take == left else 0)
            if need > free:
                break
            prefill.append((r, take))
            free -= take + (1 if take == left else 0)
            tokens += take
            if stop:
                break
        return Batch(prefill=prefill)

    def _colocated_batch(self, server: Server) -> Batch:
        c = self.c
        params = c.params
        tau = c._tier_taus[c.tier_of_pool[server.pool]]
        running = server.decoding
        size = server.max_batch_size
        decode = list(running[:size])
        n_decode = len(decode)
        kv_free = server.kv_free_tokens
        preempt: list[int] = []
        if n_decode > kv_free:
            preempt = _make_room_for_decode(server, decode, self._order.of(server))
            n_decode = len(decode)
        decode_kv = 0
        if decode:
            if n_decode == len(running):
                # every decoding request: the server's cached array of them (the same ids in
                # order) and the KV they hold, kept by the engine
                decode_kv = server._decoding_kv
            else:
                decode_kv = int(server.kv_held_of(np.array(decode, dtype=np.int64)).sum())
        budget = server.max_batch_tokens - n_decode if server.max_batch_tokens else 1 << 30
        cap = budget
        if params.chunk_timing == "profile":
            budget = min(budget, c.profile.max_tokens(decode_kv, tau) - n_decode)
        free = kv_free - n_decode
        if preempt:
            free += sum(server.kv_held(r) for r in preempt)
        slots = size - n_decode
        prefill: list[tuple[int, int]] = []
        queued = server.waiting
        waiting = set(queued)
        tokens, work = 0, 0.0
        candidates = server.prefilling + queued
        if preempt:
            candidates = tuple(q for q in candidates if q not in preempt)
        by_model = params.chunk_timing == "model"
        # nothing decoding: no TPOT bounds this iteration (Sec. 3.4's bound is "from the
        # decode perspective"); the first prompt takes what the server's token cap allows,
        # alone (a prompt joining it would delay its first token)
        unbound = not n_decode and params.tpot_bound == "decoding"
        for r in self._deadline_order(candidates, server.now):
            if slots <= 0:
                break
            left = server.remaining_prefill(r)
            prefix = server.kv_held(r) - server.generated(r)
            if unbound and not prefill:
                take = min(left, cap)
            else:
                take = min(left, budget - tokens)
                if by_model and take > 0:
                    shape = (n_decode, decode_kv, tokens, work, len(prefill))
                    take = self._chunk_within(server.timing, tau, shape, prefix, take)
            if take < 1 and not prefill:
                take = min(left, params.min_chunk_tokens)  # never starve the prompts
            if take < 1:
                break
            extra = 1 if take == left else 0
            need = left + 1 if r in waiting else take + extra
            if need > free:
                continue
            prefill.append((r, take))
            free -= take + extra
            tokens += take
            work += take * (prefix + (take + 1) / 2.0)
            slots -= 1
            if take < left or unbound:
                break  # the budget is used up, or the prompt alone as the server allows
        if not prefill and not decode:
            return Batch(preempt=preempt)
        whole = not preempt and n_decode == len(running)
        repeat = whole and not prefill and not queued and not server.prefilling
        # every decoding request: the server's cached array of them (the engine's check of a
        # batch is cheapest on it)
        return Batch(
            prefill=prefill,
            decode=server.decoding_ids() if whole else decode,
            preempt=preempt,
            repeat=repeat,
        )


# -- baselines ------------------------------------------------------------------------------------


class MinimalCycleRouter:
    """Route to the server with the lowest predicted cycle (iteration) time: its decode tokens
    plus what its prompts would add up to the token budget, at its KV (the profile of the
    run's timing model); fewest requests on ties (PolyServe's PD-/CO-Minimal, Sec. 5.1)."""

    name = "minimal-cycle"

    def __init__(self, token_budget: int = 0) -> None:
        self.token_budget = token_budget

    def start(self, instance: Instance, seed: int) -> None:
        pool = instance.cluster.resolved_pools()[-1]
        self.profile = Profile(instance.timing, int(pool.kv_capacity_tokens))  # type: ignore[arg-type]
        self.budget = self.token_budget or int(instance.cluster.max_batch_tokens) or 2048

    def cycle_s(self, s: Server) -> float:
        prompts = sum(s.remaining_prefill(q) for q in s.prefilling) + sum(
            s.remaining_prefill(q) for q in s.waiting
        )
        tokens = len(s.decoding) + min(prompts, self.budget)
        return self.profile.time(max(tokens, 1), s.kv_used_tokens)

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return min(
            range(len(servers)), key=lambda k: (self.cycle_s(servers[k]), servers[k].load, k)
        )


def _fixed_split(instance: Instance, mode: str, servers: int, prefill_servers: int) -> Instance:
    """``instance`` on a fixed cluster of ``servers``: co-located one pool, disaggregated
    ``prefill_servers`` (0: the tier-partition bound's split, rounded) prefill servers."""
    from slolab.instances.records import Cluster

    cl = instance.cluster
    if mode == "disaggregated" and not prefill_servers:
        prefill_servers = bound_prefill_split(instance, servers)
    cluster = dataclasses.replace(
        cl,
        servers=servers,
        mode=mode,
        prefill_servers=prefill_servers if mode == "disaggregated" else 0,
        pools=(),
    )
    Cluster.__post_init__(cluster)
    settings = {**instance.settings, "servers": servers, "mode": mode}
    if mode == "disaggregated":
        settings["prefill_servers"] = prefill_servers
    return dataclasses.replace(instance, cluster=cluster, settings=settings)


def bound_prefill_split(instance: Instance, servers: int) -> int:
    """Prefill servers of the disaggregated tier-partition bound on ``servers`` servers (between
    1 and ``servers - 1``): the split the baselines run at."""
    from slolab.models.tier_partition import PartitionData, _partition_pulp, _pulp_value
    from slolab.solvers import get_backend
    from slolab.solvers.base import MilpFormulation

    if servers < 2:
        raise ValueError(f"disaggregated serving needs at least 2 servers, got {servers}")
    data = PartitionData.of(instance, mode="disaggregated", servers=servers)
    prob, v = _partition_pulp(data, None, True)
    get_backend("highs")().solve_formulation(MilpFormulation(prob, to_schedule=lambda: None), 30.0)
    value = _pulp_value(v["n_prefill"])
    split = int(round(value)) if math.isfinite(value) else servers // 2
    return min(max(split, 1), servers - 1)


def _mode_of(mode: str | None, instance: Instance) -> str:
    mode = mode or instance.cluster.mode
    if mode not in ("colocated", "disaggregated"):
        raise ValueError(f"PolyServe's policies run colocated or disaggregated, got {mode!r}")
    return mode


def polyserve_scheduler(
    instance: Instance,
    *,
    mode: str | None = None,
    servers: int | None = None,
    params: PolyServeParams | None = None,
    **_: Any,
) -> Scheduler:
    """PolyServe on ``instance`` (its cluster's servers are the fleet): its pools, controller
    (router, decode router, scaler) and policy."""
    mode = _mode_of(mode, instance)
    fleet = int(servers or instance.cluster.servers)
    if mode == "disaggregated" and fleet < 2:
        raise ValueError(
            "disaggregated PolyServe needs --servers >= 2 (a prefill server and a decode "
            f"server), got {fleet}"
        )
    inst = polyserve_cluster(instance, mode, fleet)
    controller = PolyServeController(params)
    controller.skip_held_ticks = True
    return Scheduler(
        PolyServePolicy(controller),
        controller,
        controller.decode_router if mode == "disaggregated" else None,
        controller,
        instance=inst,
    )


def _baseline(kind: str):
    def make(
        instance: Instance,
        *,
        mode: str | None = None,
        servers: int | None = None,
        token_budget: int | None = None,
        prefill_servers: int = 0,
        **_: Any,
    ) -> Scheduler:
        from slolab.heuristics.policies import sarathi_token_budget

        mode = _mode_of(mode, instance)
        if kind == "chunk" and mode != "colocated":
            raise ValueError("chunk (CO-Chunk) is co-located only, as in PolyServe's evaluation")
        fleet = int(servers or instance.cluster.servers)
        inst = _fixed_split(instance, mode, fleet, prefill_servers)
        budget = token_budget or sarathi_token_budget(inst)
        policy = SarathiFCFS(token_budget=budget)
        router: Any
        decode_router: Any = None
        if kind == "random":
            router = RandomRouter()
            decode_router = RandomRouter() if mode == "disaggregated" else None
        elif kind == "minimal":
            router = MinimalCycleRouter(budget)
            decode_router = MinimalCycleRouter(budget) if mode == "disaggregated" else None
        else:
            router = LeastLoaded()
        return Scheduler(policy, router, decode_router, instance=inst)

    make.__name__ = f"{kind}_scheduler"
    return make


def capacity_bound(
    instance: Instance, mode: str | None = None, servers: int | None = None
) -> float:
    """The tier-partition bound (req/s) of ``instance``'s mix on its servers: the largest
    arrival rate the steady-state fluid model serves in full (HiGHS, 60 s)."""
    from slolab.models.tier_partition import TierPartition
    from slolab.solvers import solve

    mode = _mode_of(mode, instance)
    model = TierPartition(instance, mode=mode, servers=int(servers or instance.cluster.servers))
    res = solve(model, solver="highs", time_limit=60.0)
    if res.bound is None:
        raise RuntimeError(f"the tier-partition bound was not found ({res.status.value})")
    return float(res.bound)


register_policy(
    "polyserve",
    PolyServePolicy,
    "PolyServe: TPOT tiers, highest-load feasible server, lazy promotion, autoscaling from a "
    "best-effort pool (routes and scales itself; --mode colocated or disaggregated)",
    setup=polyserve_scheduler,
    capacity_bound=capacity_bound,
)


def _always_tpot_scheduler(instance: Instance, **options: Any) -> Scheduler:
    """PolyServe with every co-located iteration within the tier's TPOT, a prompt alone on a
    server too (``tpot_bound="always"``)."""
    return polyserve_scheduler(instance, params=PolyServeParams(tpot_bound="always"), **options)


register_policy(
    "polyserve-always-tpot",
    PolyServePolicy,
    "PolyServe with every co-located iteration within the tier's TPOT, a prompt alone on an "
    "idle server too (Sec. 4.7 read literally; the default bounds it only while a request "
    "decodes, Sec. 3.4)",
    setup=_always_tpot_scheduler,
    capacity_bound=capacity_bound,
)
_RANDOM, _MINIMAL, _CHUNK = _baseline("random"), _baseline("minimal"), _baseline("chunk")

register_policy(
    "random",
    _RANDOM,
    "PolyServe's PD-/CO-Random baseline: a random server, Sarathi token budget (its own "
    "router; not the 'random' router)",
    setup=_RANDOM,
    capacity_bound=capacity_bound,
    token_budget=True,
)
register_policy(
    "minimal",
    _MINIMAL,
    "PolyServe's PD-/CO-Minimal baseline: the server with the lowest predicted cycle time, "
    "Sarathi token budget",
    setup=_MINIMAL,
    capacity_bound=capacity_bound,
    token_budget=True,
)
register_policy(
    "chunk",
    _CHUNK,
    "PolyServe's CO-Chunk baseline: a static token budget (--token-budget; the studies sweep "
    "it), least-loaded routing; co-located only",
    setup=_CHUNK,
    capacity_bound=capacity_bound,
    token_budget=True,
)

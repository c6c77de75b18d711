"""PolyServe's profile math: the (token batch, KV) -> iteration time table and the searches on
it, the chunk attention bound, and the KV peak of a server's requests as they grow.

Everything here is a pure function of its arguments (the memos only remember answers), so the
admission (:mod:`slolab.heuristics.polyserve.admission`), the batch former and the tests share
it.

References
----------
PolyServe, Sec. 4.5 (profile-based admission), 4.7 (chunked prefill within the TPOT).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.timing.base import F_PREFILL_ATTN
from slolab.timing.forms import ProfiledTiming, timing_lines

if TYPE_CHECKING:
    from slolab.timing.base import TimingModel

#: Entries a memo of the profile's answers (tokens, chunks) holds before it starts afresh.
MEMO_ENTRIES = 1 << 16


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
        return self.table.scalar_time(float(tokens), float(kv_tokens))

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
            lo = last - 1 if fits(last) else last_fitting(0, last, fits)
        else:
            lo = last_fitting_near(0, last, guess, fits)
            lo = last - 1 if lo == last else lo  # extrapolate the last segment
        if near is not None:
            remember(self._segment_guess, near, lo, MEMO_ENTRIES)
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
            remember(self._max_tokens, key, most, MEMO_ENTRIES)
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

        # the table's reading at this KV (ProfiledTiming.scalar_time): on the segment's own
        # span the batch grid index is lo, else it is looked up
        read = self.table.scalar_time
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
            x = last_fitting(x_lo, x_hi, on_line)
        else:  # from where the line crosses for a chunk within the longest prompt
            x = last_fitting_near(
                x_lo,
                x_hi,
                batch + _line_crossing(t0, slope, x_lo, batch, attention_s, longest, budget_s),
                on_line,
            )
        if within(x) and not within(x + 1):
            return x - batch
        while x_lo > 0 and not within(x_lo):  # the grid's rounding put the crossing lower
            x_lo -= 1
        return last_fitting(x_lo, x_hi, within) - batch


def remember(memo: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Store ``value`` under ``key`` in ``memo``, started afresh once it holds ``limit``."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value


def last_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
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


def last_fitting_near(lo: int, hi: int, guess: int, fits: Callable[[int], bool]) -> int:
    """:func:`last_fitting` for a monotone ``fits`` (true up to a point, then false), given
    ``fits(lo)``: steps of 1, 2, 4, ... outwards from ``guess`` (clamped to ``[lo, hi]``)
    bracket the last true point, then bisection. The same answer as :func:`last_fitting`,
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
    # integer products and one division each, not timing.base.prefill_chunk_attention(chunk,
    # longest - chunk) (the same value, formed in another order): the admission's inlined
    # cost in Profile.max_chunk repeats these operations to read the same floats
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

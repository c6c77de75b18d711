"""Inverse of a timing model: how many tokens fit in a time budget.

Budget-based schedulers ask the opposite question to :meth:`TimingModel.times`: given a
latency budget for the next iteration, how large may it be? :func:`time_to_tokens` answers for
a prefill chunk added to a batch of decoding sequences (Sarathi-Serve's token budget,
ProServe's per-iteration budget); :func:`time2bs` answers SLOs-Serve's ``time2bs(t0)``.

Both grow a batch shape along a ray ``features(n) = base + n * linear + n^2 * quadratic +
[n > 0] * step`` and return the largest integer ``n`` whose time is within the budget,
checked with the model's own :meth:`~slolab.timing.TimingModel.times` so that the answer is
exact for the model as evaluated in floating point:

- affine models (and rooflines of affine lines, taking the smallest per-line answer) give a
  closed-form candidate ``n``: the root of ``A n^2 + B n + C = budget`` (prefill attention
  makes the time quadratic in the chunk), accepted when the model puts ``n`` within and
  ``n + 1`` over the budget (one ``times`` call on three rows);
- other forms get a candidate from the quadratic through ``T(1), T(2), T(3)`` (exact for
  phase sums, decode-count thresholds and mean-length terms over affine parts), checked the
  same way;
- when no candidate passes the check (tables, non-monotone models), a vectorised search runs:
  doubling until the budget is exceeded, then 64-way bisection, each step one ``times`` call
  on many rows.

The search keeps ``n = lo`` within budget and ``n = hi`` over it, so the answer ``n`` always
satisfies ``T(n) <= budget < T(n + 1)``; it is the largest such ``n`` whenever the time is
non-decreasing in ``n`` along the ray, which holds for every form with non-negative
coefficients and for tables non-decreasing along both axes.
"""

from __future__ import annotations

import math

import numpy as np
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    F_SPEC,
    N_FEATURES,
    TimingModel,
)
from slolab.timing.forms import RooflineTiming

__all__ = ["DEFAULT_MAX_TOKENS", "time2bs", "time_to_tokens"]

#: Default cap on the answer, for models whose time does not grow along the ray.
DEFAULT_MAX_TOKENS = 1 << 24

_SEARCH_WIDTH = 64


class _Ray:
    """Feature rows ``base + n * linear + n^2 * quadratic + [n > 0] * step``.

    Each direction is sparse, ``{feature column: value}``.
    """

    __slots__ = ("base", "linear", "quadratic", "step")

    def __init__(
        self,
        base: dict[int, float],
        linear: dict[int, float],
        quadratic: dict[int, float],
        step: dict[int, float],
    ) -> None:
        self.base = base
        self.linear = linear
        self.quadratic = quadratic
        self.step = step

    def row(self, n: int) -> list[float]:
        """One feature row, in Python floats (cheap for the few rows of a check)."""
        out = [0.0] * N_FEATURES
        for column, value in self.base.items():
            out[column] += value
        for column, value in self.linear.items():
            out[column] += n * value
        for column, value in self.quadratic.items():
            out[column] += n * n * value
        if n > 0:
            for column, value in self.step.items():
                out[column] += value
        return out

    def rows(self, n: np.ndarray) -> np.ndarray:
        """Feature rows for many ``n`` at once."""
        nf = n.astype(float)
        out = np.zeros((len(nf), N_FEATURES))
        for column, value in self.base.items():
            out[:, column] += value
        for column, value in self.linear.items():
            out[:, column] += nf * value
        for column, value in self.quadratic.items():
            out[:, column] += nf * nf * value
        for column, value in self.step.items():
            out[:, column] += (nf > 0) * value
        return out


def time_to_tokens(
    model: TimingModel,
    budget_s: float,
    decode_seqs: int = 0,
    decode_kv_tokens: int = 0,
    prefill_prefix: int = 0,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    batch_prefill_tokens: int = 0,
    batch_prefill_attention_work: float = 0.0,
    batch_prefill_seqs: int = 0,
) -> int:
    """Largest prefill chunk that keeps an iteration within a time budget.

    The iteration holds ``decode_seqs`` decoding sequences (one decode token each) reading
    ``decode_kv_tokens`` KV tokens, plus one prefill chunk of ``n`` tokens whose sequence
    already has ``prefill_prefix`` tokens cached (``prefill_tokens = n``,
    ``num_prefill_seqs = 1``, ``prefill_attention_work = n * (prefix + (n + 1) / 2)``). Returns
    the largest ``n`` in ``[0, max_tokens]`` with time ``<= budget_s``; 0 when the decode part
    alone (``n = 0``) or any chunk exceeds the budget; ``max_tokens`` when even that chunk fits.

    Parameters
    ----------
    model : TimingModel
        The iteration-time model.
    budget_s : float
        Latency budget of the iteration (s).
    decode_seqs : int
        Decoding sequences already in the batch.
    decode_kv_tokens : int
        KV tokens they read (sum of their contexts).
    prefill_prefix : int
        Tokens of the chunk's sequence already in the KV cache.
    max_tokens : int
        Cap on the answer.
    batch_prefill_tokens, batch_prefill_attention_work, batch_prefill_seqs : number
        Prefill chunks already in the batch (their tokens, attention work and sequences): the
        answer is the chunk that fits beside them.

    Returns
    -------
    int
        Prefill tokens ``n`` with ``T(n) <= budget_s < T(n + 1)`` (or ``n = max_tokens``).

    References
    ----------
    Sarathi-Serve's token budget, SLOs-Serve's prefill budget per batch (Sec. 3.2) and
    ProServe's per-iteration latency budget all turn a time budget into tokens.
    """
    _check_counts(decode_seqs=decode_seqs, decode_kv_tokens=decode_kv_tokens)
    _check_counts(prefill_prefix=prefill_prefix, max_tokens=max_tokens)
    _check_counts(batch_prefill_tokens=batch_prefill_tokens, batch_prefill_seqs=batch_prefill_seqs)
    if not batch_prefill_attention_work >= 0:
        raise ValueError(
            f"batch_prefill_attention_work must be >= 0, got {batch_prefill_attention_work}"
        )
    ray = _Ray(
        base={
            F_DECODE_TOKENS: decode_seqs,
            F_NUM_DECODE: decode_seqs,
            F_DECODE_KV: decode_kv_tokens,
            F_PREFILL_TOKENS: batch_prefill_tokens,
            F_PREFILL_ATTN: batch_prefill_attention_work,
            F_NUM_PREFILL: batch_prefill_seqs,
        },
        linear={F_PREFILL_TOKENS: 1.0, F_PREFILL_ATTN: prefill_prefix + 0.5},
        quadratic={F_PREFILL_ATTN: 0.5},
        step={F_NUM_PREFILL: 1.0},
    )
    return _largest_within(model, float(budget_s), ray, max_tokens)


def time2bs(
    model: TimingModel,
    t0_s: float,
    spec_steps: int = 0,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> int:
    """Tokens a batch of duration ``t0_s`` can carry (SLOs-Serve's ``time2bs``).

    SLOs-Serve's performance model sees a batch only through its tokens (prefill plus decode
    tokens) and speculative steps. The batch is evaluated here as ``prefill_tokens = n`` with
    ``spec_steps`` and every other feature zero, so attention and per-sequence terms of the
    model, if it has any, are not charged: the answer is the token-parallel capacity of the
    batch. For the SLOs-Serve rooflines (tokens and spec steps only) this is exactly their
    ``time2bs``; for a model with attention terms, use :func:`time_to_tokens` with the batch's
    decode sequences and contexts instead.

    Parameters
    ----------
    model : TimingModel
        The iteration-time model.
    t0_s : float
        Batch duration (s).
    spec_steps : int
        Speculative steps in the batch.
    max_tokens : int
        Cap on the answer.

    Returns
    -------
    int
        Largest ``n <= max_tokens`` with ``T(n tokens) <= t0_s``, 0 when none fits.

    References
    ----------
    SLOs-Serve, Algorithm 2 (line 7: ``Batch(prefillBgt = M.time2bs(t0))``) and Sec. 3.2.3.
    """
    _check_counts(spec_steps=spec_steps, max_tokens=max_tokens)
    ray = _Ray(base={F_SPEC: spec_steps}, linear={F_PREFILL_TOKENS: 1.0}, quadratic={}, step={})
    return _largest_within(model, float(t0_s), ray, max_tokens)


def _check_counts(**counts: int) -> None:
    for label, value in counts.items():
        if not value >= 0:
            raise ValueError(f"{label} must be >= 0, got {value}")


def _largest_within(model: TimingModel, budget_s: float, ray: _Ray, max_tokens: int) -> int:
    if not np.isfinite(budget_s):
        raise ValueError(f"budget must be finite, got {budget_s}")
    max_tokens = int(max_tokens)
    candidate = _closed_form(model, budget_s, ray, max_tokens)
    if candidate is None:
        first = model.times(np.array([ray.row(n) for n in range(4)]))
        if first[0] > budget_s:
            return 0
        candidate = _quadratic_root(first[1], first[2], first[3], budget_s, max_tokens)
        if candidate is None:
            return _search(model, budget_s, ray, max_tokens)
    probes = [0, candidate, candidate + 1] if candidate < max_tokens else [0, candidate]
    within = model.times(np.array([ray.row(n) for n in probes])) <= budget_s
    if not within[0]:
        return 0
    if within[1] and (candidate == max_tokens or not within[2]):
        return candidate
    return _search(model, budget_s, ray, max_tokens)


def _quadratic_root(
    t1: float, t2: float, t3: float, budget_s: float, max_tokens: int
) -> int | None:
    """Candidate from the quadratic through ``T(1), T(2), T(3)``.

    Exact for forms that are quadratic along the ray from ``n = 1`` on (phase sums, thresholds
    on decode counts and mean-length terms over affine parts); for others the check rejects
    it and the search runs.
    """
    a = (t3 - 2.0 * t2 + t1) / 2.0
    if abs(a) <= 1e-12 * abs(t3):
        a = 0.0
    b = (t2 - t1) - 3.0 * a
    c = t1 - a - b
    return _root(a, b, c, budget_s, max_tokens)


def _closed_form(model: TimingModel, budget_s: float, ray: _Ray, max_tokens: int) -> int | None:
    """Root of ``A n^2 + B n + C = budget`` for affine models, or None."""
    if isinstance(model, RooflineTiming) and len(model.lines) > 1:
        answers = [_closed_form(line, budget_s, ray, max_tokens) for line in model.lines]
        if any(a is None for a in answers):
            return None
        return min(a for a in answers if a is not None)
    view = model.affine()
    if view is None:
        return None
    intercept, coef_array = view
    coef = coef_array.tolist()
    a = _dot(ray.quadratic, coef)
    b = _dot(ray.linear, coef)
    c = intercept + _dot(ray.base, coef) + _dot(ray.step, coef)
    return _root(a, b, c, budget_s, max_tokens)


def _root(a: float, b: float, c: float, budget_s: float, max_tokens: int) -> int | None:
    """Largest integer ``n`` with ``a n^2 + b n + c <= budget`` for ``a, b >= 0``, else None."""
    if a < 0 or b < 0:
        return None
    room = budget_s - c
    if room < 0:
        return 0
    if a == 0 and b == 0:
        return max_tokens
    if a == 0:
        root = room / b
    else:
        root = 2.0 * room / (b + math.sqrt(b * b + 4.0 * a * room))
    return int(min(math.floor(root), max_tokens))


def _dot(direction: dict[int, float], coef: list[float]) -> float:
    return sum(value * coef[column] for column, value in direction.items())


def _search(model: TimingModel, budget_s: float, ray: _Ray, max_tokens: int) -> int:
    """Doubling then 64-way bisection, keeping ``T(lo) <= budget < T(hi)``."""
    if max_tokens == 0:
        return 0
    probes = [1 << k for k in range(max_tokens.bit_length()) if (1 << k) < max_tokens]
    probes.append(max_tokens)
    n = np.array(probes, dtype=np.int64)
    within = model.times(ray.rows(n)) <= budget_s
    over = np.flatnonzero(~within)
    if over.size == 0:
        return max_tokens
    hi = int(n[over[0]])
    lo = int(n[over[0] - 1]) if over[0] > 0 else 0
    while hi - lo > 1:
        inner = np.unique(np.linspace(lo, hi, _SEARCH_WIDTH + 2).astype(np.int64)[1:-1])
        inner = inner[(inner > lo) & (inner < hi)]
        within = model.times(ray.rows(inner)) <= budget_s
        over = np.flatnonzero(~within)
        if over.size == 0:
            lo = int(inner[-1])
        else:
            hi = int(inner[over[0]])
            if over[0] > 0:
                lo = int(inner[over[0] - 1])
    return lo

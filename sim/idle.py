"""The idle-cluster oracle: what each request gets alone on an empty server.

From the timing model alone (no policy): each request arrives at an empty server of the
instance's cluster, its prompt is prefilled in the chunking that minimises its first-token
time, then it decodes one token per iteration. The token times of that schedule are judged by
the one evaluator (:func:`slolab.sim.metrics.request_table_from_times`), so "an idle server
could meet it" means what "met" means everywhere else. A policy run on requests so sparse that
they never overlap meets at most these requests; one that meets fewer is slower than it needs
to be when it is alone.

Co-located mode only: the disaggregated path (prefill server, KV transfer, decode server) is
not modelled here. With prefix caching on, each request's shared leading blocks are taken as
cached at its arrival (:func:`cached_prefix_bound`), so the oracle stays an upper bound.

The fastest prefill
-------------------
A lone prefill chunk of ``c`` tokens after ``s`` prompt tokens already in the KV cache has the
features ``prefill_tokens = c``, ``num_prefill_seqs = 1`` and ``prefill_attention_work =
c (s + (c + 1) / 2)``, every other feature 0. A chunking ``c_1 + ... + c_k = P`` (each
``1 <= c_i <= B``, ``B`` the cluster's ``max_batch_tokens``; no cap when 0) takes
``sum_i t(c_i, s_i)``, and the first token comes out of the last chunk's iteration.

For a model that is a maximum of affine lines whose attention coefficients are all the same
``w`` (linear models; the shipped rooflines), ``t(c, s) = w c s + w c (c + 1) / 2 + g(c)``
with ``g(c) = max_l (a_l + n_l + b_l c)`` (``a_l`` the line's intercept, ``n_l`` and ``b_l``
its coefficients on ``num_prefill_seqs`` and ``prefill_tokens``). The attention terms of a
chunking add up to ``w P (P + 1) / 2`` whatever the chunking (token ``j`` attends to ``j``
keys), so the prefill takes ``w P (P + 1) / 2 + sum_i g(c_i)``. ``g`` is convex (a maximum of
affine functions), so for ``k`` chunks the balanced split (``P mod k`` chunks of
``ceil(P / k)``, the rest ``floor(P / k)``) is optimal: if two chunks differ by two or more,
moving a token from the larger to the smaller does not increase the sum
(``g(a - 1) + g(b + 1) <= g(a) + g(b)`` for ``a >= b + 2``, convexity). The balanced split
respects the cap whenever ``k >= ceil(P / B)``. The fastest prefill is the minimum of the
balanced sums over ``k = ceil(P / B), ..., P``, all evaluated.

Maximal chunks (``B, B, ..., P mod B``) are *not* always optimal: with the llama2-7b-h100
roofline a last chunk of a few tokens costs the floor line's 5.8 ms, while splitting the
prompt evenly keeps both chunks on the slope line (``P = 2049``, ``B = 2048``: 1.5 ms faster).

For any other form (profiled tables, phase sums, thresholds, rooflines whose lines weigh
attention differently) :func:`fastest_prefill_s` solves the exact shortest path over prefix
lengths, ``T(s) = min_c T(s - c) + t(c, s - c)``, in ``O(P B)`` evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from slolab.instances.records import cached_prompt_tokens
from slolab.sim.metrics import check_definition, request_table_from_times
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    accumulate_from,
    prefill_attention_work,
)
from slolab.timing.forms import timing_lines

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.timing.base import TimingModel


def prefill_chunk_s(timing: TimingModel, chunk: np.ndarray, prefix: np.ndarray | int) -> np.ndarray:
    """Seconds of lone prefill iterations: chunks of ``chunk`` tokens after ``prefix`` tokens."""
    c = np.atleast_1d(np.asarray(chunk, dtype=float))
    f = np.zeros((len(c), N_FEATURES))
    f[:, F_PREFILL_TOKENS] = c
    f[:, F_NUM_PREFILL] = 1.0
    f[:, F_PREFILL_ATTN] = prefill_attention_work(c, np.broadcast_to(prefix, c.shape))
    return timing.times(f)


def chunking_s(
    timing: TimingModel, chunks: np.ndarray, start_s: float = 0.0, cached: int = 0
) -> float:
    """End of a prompt prefilled alone from ``start_s`` in ``chunks`` (tokens per iteration,
    in order), iteration after iteration as the engine adds them, after ``cached`` prompt
    tokens a prefix cache held (attended to, not computed)."""
    c = np.asarray(chunks, dtype=np.int64)
    prefix = cached + np.concatenate(([0], np.cumsum(c)[:-1]))
    return float(accumulate_from(start_s, prefill_chunk_s(timing, c, prefix))[-1])


def balanced_chunks(prompt_tokens: int, k: int) -> np.ndarray:
    """``prompt_tokens`` split into ``k`` chunks that differ by at most one (larger first)."""
    q, r = divmod(prompt_tokens, k)
    return np.array([q + 1] * r + [q] * (k - r), dtype=np.int64)


def _shared_attention(timing: TimingModel) -> bool:
    """Whether ``timing`` is a maximum of affine lines with one attention coefficient."""
    try:
        _, coef = timing_lines(timing)
    except ValueError:
        return False
    return bool(np.all(coef[:, F_PREFILL_ATTN] == coef[0, F_PREFILL_ATTN]))


def fastest_chunks(
    timing: TimingModel, prompt_tokens: int, max_chunk_tokens: int, cached: int = 0
) -> np.ndarray:
    """The chunking of a lone prompt that minimises its prefill time (module docstring).

    Parameters
    ----------
    timing : TimingModel
        The iteration-time model.
    prompt_tokens : int
        Prompt length ``P`` >= 1.
    max_chunk_tokens : int
        Most tokens per iteration ``B`` (0: no cap).
    cached : int
        Prompt tokens a prefix cache holds (``0 <= cached < P``): the chunks cover the other
        ``P - cached``, each attending to the cached prefix too. The attention terms still
        add up to the same whatever the chunking (token ``j`` attends to ``j`` keys), so the
        balanced split stays optimal for a shared attention coefficient.

    Returns
    -------
    int array
        Chunk sizes in order, summing to ``P - cached``, each at most ``B``.
    """
    p = int(prompt_tokens)
    if p < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    if max_chunk_tokens < 0:
        raise ValueError(f"max_chunk_tokens must be >= 0 (0: no cap), got {max_chunk_tokens}")
    if not 0 <= cached < p:
        raise ValueError(f"cached must be in [0, prompt_tokens), got {cached} of {p}")
    left = p - int(cached)
    cap = min(int(max_chunk_tokens) or left, left)
    if _shared_attention(timing):
        return _balanced_fastest(timing, left, cap)
    return _shortest_path(timing, left, cap, int(cached))


def _balanced_fastest(timing: TimingModel, p: int, cap: int) -> np.ndarray:
    """Best balanced split over every chunk count (exact for a shared attention coefficient)."""
    k = np.arange(-(-p // cap), p + 1, dtype=np.int64)
    q, r = np.divmod(p, k)
    g = prefill_chunk_s(timing, np.arange(p + 1), 0) - _attention_s(timing, np.arange(p + 1))
    total = r * g[np.minimum(q + 1, p)] + (k - r) * g[q]
    return balanced_chunks(p, int(k[int(np.argmin(total))]))


def _attention_s(timing: TimingModel, chunk: np.ndarray) -> np.ndarray:
    """The shared attention term ``w c (c + 1) / 2`` of lone chunks after an empty prefix."""
    _, coef = timing_lines(timing)
    return coef[0, F_PREFILL_ATTN] * prefill_attention_work(chunk, 0)


def _shortest_path(timing: TimingModel, p: int, cap: int, cached: int = 0) -> np.ndarray:
    """Exact shortest path over prefix lengths: ``T(s) = min_c T(s - c) + t(c, s - c)``
    (``s`` counting the ``p`` tokens computed after ``cached`` cached ones)."""
    best = np.full(p + 1, np.inf)
    best[0] = 0.0
    last = np.zeros(p + 1, dtype=np.int64)
    for s in range(1, p + 1):
        c = np.arange(1, min(cap, s) + 1)
        total = best[s - c] + prefill_chunk_s(timing, c, cached + s - c)
        i = int(np.argmin(total))
        best[s] = total[i]
        last[s] = c[i]
    chunks = []
    s = p
    while s > 0:
        chunks.append(int(last[s]))
        s -= int(last[s])
    return np.array(chunks[::-1], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class IdleSchedule:
    """Every request of an instance served alone on an empty server, as fast as it can be.

    Attributes
    ----------
    chunks : int array (n,)
        Prefill iterations of each request's fastest chunking (0 for a request that does not
        fit).
    fits : bool array (n,)
        The request's ``prompt + output`` KV tokens fit a server's KV capacity (the engine
        rejects the others).
    token_offsets : int array (n + 1,), token_times : float array
        Time of every output token (inf for a request that does not fit).
    cached : int array (n,)
        Prompt tokens taken as cached at arrival (:func:`cached_prefix_bound`; zeros without
        prefix caching).
    """

    chunks: np.ndarray
    fits: np.ndarray
    token_offsets: np.ndarray
    token_times: np.ndarray
    cached: np.ndarray | None = None

    @property
    def first_token_s(self) -> np.ndarray:
        """First token of each request."""
        return self.token_times[self.token_offsets[:-1]]

    @property
    def last_token_s(self) -> np.ndarray:
        """Last token of each request."""
        return self.token_times[self.token_offsets[1:] - 1]

    def met(self, instance: Instance, definition: str = "deadline") -> np.ndarray:
        """Boolean per request: it meets its SLO alone (the metrics' own ``met``)."""
        check_definition(definition)
        table = request_table_from_times(instance, self.token_times, self.token_offsets, ~self.fits)
        return table[f"met_{definition}"].to_numpy()

    def longest_service_s(self, instance: Instance) -> float:
        """Longest time from arrival to last token among the requests that fit (0 if none)."""
        spans = self.last_token_s - instance.workload.arrival_s
        return float(spans[self.fits].max()) if self.fits.any() else 0.0


def cached_prefix_bound(instance: Instance) -> np.ndarray:
    """Most prompt tokens of each request a prefix cache could hold when it is admitted: its
    longest run of leading cache blocks (within its first ``prompt - 1`` tokens, the engine's
    hit limit) each of which some other request's prompt also holds. Zeros when the cluster
    keeps no prefix cache. With a snapshot's given cache (the workload's ``cached_tokens``),
    those: every start of a request's prefill skips exactly them.

    Why this bounds every schedule: a block is resident only once some request computed it,
    and a request computes only its own prompt's blocks; a request's own blocks, found again
    after a preemption, were computed by it after its admission, so they never shorten its
    first prefill below this. Taking every such block as cached at the arrival, whoever
    computes it and whenever, can only be faster than any real schedule.
    """
    from slolab.sim.prefix_cache import PrefixCaching

    n = instance.n_requests
    out = cached_prompt_tokens(instance.workload)
    if not instance.cluster.prefix_block_tokens:
        return out
    caching = PrefixCaching(instance)
    keys = [caching.keys(r) for r in range(n)]
    holders: dict[int, int] = {}
    for ks in keys:
        for key in set(ks):
            holders[key] = holders.get(key, 0) + 1
    for r, ks in enumerate(keys):
        k = 0
        for key in ks[: caching.hit_limit(r)]:
            if holders[key] < 2:
                break
            k += 1
        out[r] = k * caching.block_tokens
    return out


def idle_schedule(
    instance: Instance, max_chunk_tokens: int | np.ndarray | None = None
) -> IdleSchedule:
    """Each request of ``instance`` alone on an empty server, prefilled in its fastest chunking.

    The request starts at its arrival; its first token ends the last prefill iteration; token
    ``j + 1`` ends the ``j``-th decode iteration, one decode sequence reading ``P + j`` KV
    tokens (the engine's convention). ``max_chunk_tokens`` caps the chunks, one cap for all
    or one per request (default: the cluster's ``max_batch_tokens``, 0 meaning no cap), to ask
    what a policy's token budget allows. With prefix caching on
    (``Cluster.prefix_block_tokens``), the server's cache holds at the arrival every block of
    the request's prompt that another request shares (:func:`cached_prefix_bound`), so the
    oracle stays an upper bound. With a snapshot's given cache (the workload's
    ``cached_tokens``), the request prefills the rest of its prompt. Co-located mode only.
    """
    cluster = instance.cluster
    if cluster.mode != "colocated":
        raise ValueError(
            f"the idle oracle models the colocated mode only, got mode {cluster.mode!r}"
        )
    wl = instance.workload
    given = cluster.max_batch_tokens if max_chunk_tokens is None else max_chunk_tokens
    caps = np.broadcast_to(np.asarray(given, dtype=np.int64), (len(wl),))
    prompt = wl.prompt_tokens
    out = wl.output_tokens
    n = len(wl)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(out, out=offsets[1:])
    times = np.full(int(offsets[-1]), np.inf)
    # a given cache's tokens are held outside the capacity
    fits = prompt + out - cached_prompt_tokens(wl) <= cluster.kv_capacity_tokens
    chunks = np.zeros(n, dtype=np.int64)
    timing = instance.timing
    cached = cached_prefix_bound(instance)
    for r in np.flatnonzero(fits):
        p, o, h = int(prompt[r]), int(out[r]), int(cached[r])
        plan = fastest_chunks(timing, p, int(caps[r]), h)
        chunks[r] = len(plan)
        first = chunking_s(timing, plan, float(wl.arrival_s[r]), h)
        f = np.zeros((o - 1, N_FEATURES))
        f[:, F_DECODE_TOKENS] = 1.0
        f[:, F_NUM_DECODE] = 1.0
        f[:, F_DECODE_KV] = p + np.arange(1, o)
        times[offsets[r] : offsets[r + 1]] = accumulate_from(first, timing.times(f))
    return IdleSchedule(chunks, fits, offsets, times, cached)


def idle_met(
    instance: Instance,
    definition: str = "deadline",
    max_chunk_tokens: int | np.ndarray | None = None,
) -> np.ndarray:
    """Boolean per request: an idle server could meet its SLO (see :func:`idle_schedule`)."""
    return idle_schedule(instance, max_chunk_tokens).met(instance, definition)

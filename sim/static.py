"""Per-member timelines of a static batch, from the shared timing model.

Static batching (the SA-ordering paper, FasterTransformer): a batch of ``s`` requests starts
together and holds the server until its longest member finishes. Following the paper's latency
predictor (Sec. 4.2: prefill time linear in input length and batch size; per-token decode time
linear in accumulated length and batch size; decode time the sum of per-token times), each
member ``r`` of a batch of size ``s`` runs in a padded batch shaped like itself:

- its prefill iteration has ``s`` sequences of ``p_r`` prompt tokens:
  ``P(s, p) = T(prefill_tokens = s p, num_prefill_seqs = s, prefill_attention_work = s p (p+1)/2)``
  and its first token is emitted at ``start + P(s, p_r)``;
- its ``j``-th decode step (``j = 1 .. o_r - 1``, producing token ``j + 1``) reads ``p_r + j``
  KV tokens per sequence:
  ``D_j(s, p) = T(decode_tokens = s, num_decode_seqs = s, decode_kv_tokens = s (p + j))``;
- token ``k`` is emitted at ``start + P(s, p_r) + sum_{j < k} D_j(s, p_r)``, and the member's
  execution time is ``e_r(s) = P(s, p_r) + sum_{j=1}^{o_r - 1} D_j(s, p_r)``.

With a snapshot's given cache (the workload's ``cached_tokens``), member ``r``'s ``k_r`` cached
prompt tokens are not computed: its prefill iteration has ``s`` sequences of ``p_r - k_r``
tokens whose attention runs over the cached prefix, while its decode steps still read
``p_r + j`` tokens each; the batch holds ``p_r + o_r - k_r`` KV tokens per member against the
capacity (the cached blocks stay resident outside it).

The batch's duration is ``max_r e_r(s)``. The engine's static mode and the SA-ordering model
both use :func:`member_token_offsets`, so a replayed order reproduces the model's numbers
exactly.
"""

from __future__ import annotations

import numpy as np
from slolab.timing.base import (
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    TimingModel,
    padded_decode_features,
    padded_prefill_features,
    prefill_chunk_attention,
)


def prefill_features(batch_size: int, prompt_tokens: int, cached_tokens: int = 0) -> np.ndarray:
    """Feature vector of the padded prefill iteration of a member (see module docstring).

    With a snapshot's given cache (``cached_tokens = k > 0``, docs/engine.md, "A snapshot's
    given cache"), each of the ``s`` sequences computes the ``p - k`` uncached tokens over the
    cached prefix: ``prefill_tokens = s (p - k)`` and ``prefill_attention_work = s (p - k)
    (k + (p - k + 1) / 2)``.
    """
    f = padded_prefill_features(batch_size, prompt_tokens)[0]
    if cached_tokens:
        c = prompt_tokens - cached_tokens
        f[F_PREFILL_TOKENS] = batch_size * c
        f[F_PREFILL_ATTN] = batch_size * prefill_chunk_attention(c, cached_tokens)
    return f


def decode_features(batch_size: int, prompt_tokens: int, output_tokens: int) -> np.ndarray:
    """Feature matrix ``(output_tokens - 1, 7)`` of a member's decode steps (step ``j`` reads
    ``prompt_tokens + j`` KV tokens per sequence)."""
    return padded_decode_features(batch_size, prompt_tokens + np.arange(1, output_tokens))


def member_token_offsets(
    timing: TimingModel,
    batch_size: int,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
) -> np.ndarray:
    """Times of a member's output tokens relative to its batch's start (s), length ``o``;
    ``cached_tokens``: its prompt tokens in a snapshot's given cache (the prefill computes the
    rest, the decode steps read the whole context)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError(
            f"prompt_tokens and output_tokens must be >= 1, got {prompt_tokens}, {output_tokens}"
        )
    if not 0 <= cached_tokens < prompt_tokens:
        raise ValueError(
            f"cached_tokens must be in 0..prompt_tokens - 1 = {prompt_tokens - 1}, "
            f"got {cached_tokens}"
        )
    feats = prefill_features(batch_size, prompt_tokens, cached_tokens)
    first = float(timing.times(feats[None, :])[0])
    steps = timing.times(decode_features(batch_size, prompt_tokens, output_tokens))
    out = np.empty(output_tokens)
    out[0] = first
    out[1:] = first + np.cumsum(steps)
    return out


def member_times(
    timing: TimingModel,
    batch_size: int,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
) -> tuple[float, float]:
    """``(ttft_offset_s, exec_s)`` of a member of a static batch of ``batch_size`` (with
    ``cached_tokens`` of its prompt in a snapshot's given cache)."""
    offs = member_token_offsets(timing, batch_size, prompt_tokens, output_tokens, cached_tokens)
    return float(offs[0]), float(offs[-1])

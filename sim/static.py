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

The batch's duration is ``max_r e_r(s)``. The engine's static mode and the SA-ordering model
both use :func:`member_token_offsets`, so a replayed order reproduces the model's numbers
exactly.
"""

from __future__ import annotations

import numpy as np
from slolab.timing.base import (
    TimingModel,
    padded_decode_features,
    padded_prefill_features,
)


def prefill_features(batch_size: int, prompt_tokens: int) -> np.ndarray:
    """Feature vector of the padded prefill iteration of a member (see module docstring)."""
    return padded_prefill_features(batch_size, prompt_tokens)[0]


def decode_features(batch_size: int, prompt_tokens: int, output_tokens: int) -> np.ndarray:
    """Feature matrix ``(output_tokens - 1, 7)`` of a member's decode steps (step ``j`` reads
    ``prompt_tokens + j`` KV tokens per sequence)."""
    return padded_decode_features(batch_size, prompt_tokens + np.arange(1, output_tokens))


def member_token_offsets(
    timing: TimingModel, batch_size: int, prompt_tokens: int, output_tokens: int
) -> np.ndarray:
    """Times of a member's output tokens relative to its batch's start (s), length ``o``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError(
            f"prompt_tokens and output_tokens must be >= 1, got {prompt_tokens}, {output_tokens}"
        )
    first = float(timing.times(prefill_features(batch_size, prompt_tokens)[None, :])[0])
    steps = timing.times(decode_features(batch_size, prompt_tokens, output_tokens))
    out = np.empty(output_tokens)
    out[0] = first
    out[1:] = first + np.cumsum(steps)
    return out


def member_times(
    timing: TimingModel, batch_size: int, prompt_tokens: int, output_tokens: int
) -> tuple[float, float]:
    """``(ttft_offset_s, exec_s)`` of a member of a static batch of ``batch_size``."""
    offs = member_token_offsets(timing, batch_size, prompt_tokens, output_tokens)
    return float(offs[0]), float(offs[-1])

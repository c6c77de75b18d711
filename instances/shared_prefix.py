"""A synthetic shared-prefix workload: prompt block ids for a trace that has none.

Prefix caching (``Cluster.prefix_block_tokens``) reads a workload's ``hash_ids`` column: the
id of each 512-token block of a prompt, equal ids meaning equal content up to that block's end
(Mooncake's convention). Most traces carry lengths only; :func:`shared_prefix_workload` gives
one the two kinds of reuse real serving sees:

- **a shared system prompt**: a fraction of the conversations start with the same
  ``system_prompt_tokens`` tokens (their whole 512-token blocks get the same ids);
- **multi-turn conversations**: a conversation's next turn is the next request (in arrival
  order) that joins it, and its prompt is the previous turn's prompt, the previous answer and
  the request's own prompt as new text, so it extends the previous turn's prompt and reuses
  its whole blocks.

A turn's prompt grows with the conversation (the request's own ``prompt_tokens`` become its new
text); the output lengths and arrival times stay. Turns are not held back until the previous
turn ends: a turn may arrive while the one before it still runs (then it finds less cached).
"""

from __future__ import annotations

import numpy as np
from slolab.instances.records import HASH_ID_TOKENS, Workload


def shared_prefix_workload(
    workload: Workload,
    *,
    seed: int,
    system_prompt_tokens: int = 2048,
    system_fraction: float = 0.5,
    conversation_fraction: float = 0.5,
    turns: int = 4,
    max_prompt_tokens: int = 32_768,
) -> Workload:
    """``workload`` with prompt block ids (``hash_ids``) for shared prefixes.

    Parameters
    ----------
    workload : Workload
        Requests in arrival order; their output lengths and arrivals are kept.
    seed : int
        Seed of the draws (which conversations share the system prompt, which requests are
        follow-up turns).
    system_prompt_tokens : int
        Length of the shared system prompt, >= 0.
    system_fraction : float
        Probability that a new conversation starts with the system prompt, in [0, 1].
    conversation_fraction : float
        Probability that a request is the next turn of an open conversation (when one is
        open), in [0, 1].
    turns : int
        Most turns of a conversation, >= 1.
    max_prompt_tokens : int
        A turn whose prompt would exceed this starts a new conversation instead.

    Returns
    -------
    Workload
        With ``prompt_tokens`` of follow-up turns grown and the ``hash_ids`` column.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if system_prompt_tokens < 0:
        raise ValueError(f"system_prompt_tokens must be >= 0, got {system_prompt_tokens}")
    fractions = (
        ("system_fraction", system_fraction),
        ("conversation_fraction", conversation_fraction),
    )
    for name, p in fractions:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {p}")
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    if max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
    rng = np.random.default_rng(int(seed))
    n = len(workload)
    own = workload.prompt_tokens.astype(np.int64)
    output = workload.output_tokens.astype(np.int64)
    system_ids = list(range(system_prompt_tokens // HASH_ID_TOKENS))
    next_id = len(system_ids)
    prompt = own.copy()
    ids_column = np.empty(n, dtype=object)
    # open conversations, oldest first: (prompt tokens, output tokens, block ids, turns so far)
    open_: list[tuple[int, int, list[int], int]] = []
    follow = rng.random(n) < conversation_fraction
    system = rng.random(n) < system_fraction
    for r in range(n):
        ids: list[int] | None = None
        if follow[r] and open_:
            prev_prompt, prev_output, prev_ids, done = open_.pop(0)
            length = prev_prompt + prev_output + int(own[r])
            if length <= max_prompt_tokens:
                kept = prev_ids[: prev_prompt // HASH_ID_TOKENS]
                ids = kept
                turn = done + 1
        if ids is None:
            length = int(own[r])
            if system[r] and system_ids:
                length += system_prompt_tokens
                length = min(length, max(max_prompt_tokens, system_prompt_tokens + 1))
                ids = list(system_ids)
            else:
                ids = []
            turn = 1
        blocks = -(-length // HASH_ID_TOKENS)
        fresh = blocks - len(ids)
        ids = ids + list(range(next_id, next_id + fresh))
        next_id += fresh
        prompt[r] = length
        ids_column[r] = ids
        if turn < turns:
            open_.append((length, int(output[r]), ids, turn))
    columns = {name: workload[name] for name in workload.columns}
    columns.update(prompt_tokens=prompt, hash_ids=ids_column)
    return workload.derived(
        columns,
        source=(
            f"{workload.source} + shared prefixes (seed {seed}, system prompt "
            f"{system_prompt_tokens} tokens for {system_fraction:g}, follow-up turns "
            f"{conversation_fraction:g}, up to {turns} turns)"
        ),
    )

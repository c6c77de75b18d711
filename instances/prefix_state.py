"""A snapshot's given prefix cache: the cache state at a snapshot, replayed from the requests
before it, as each request's cached prompt tokens (the workload column ``cached_tokens``).

The exact models take the cache as given (docs/engine.md, "A snapshot's given cache"): request
``r``'s first ``cached_tokens[r]`` prompt tokens are in the KV cache whenever it starts its
prefill, so it computes only the rest, and the engine, the checker and every model charge the
same (:func:`slolab.instances.records.cached_prompt_tokens`).

The state is replayed as a prefix cache sees a trace: every request before the snapshot, in
arrival order, touches its prompt's full blocks (keyed by the workload's ``hash_ids``, Mooncake's
512-token block ids, as :mod:`slolab.sim.prefix_cache` keys them); with a capacity, the least
recently touched blocks leave first. A request of the snapshot then finds its longest prefix of
resident blocks, at most the blocks inside its first ``prompt - 1`` tokens (one prompt token is
always computed). Blocks the snapshot's own requests compute are not shared among them: the
cache is the snapshot's, held fixed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from slolab.instances.records import CACHED_COLUMN, HASH_ID_TOKENS, Workload


def prompt_block_keys(hash_ids: Sequence[int], prompt_tokens: int, block_tokens: int) -> list[int]:
    """Keys of a prompt's full ``block_tokens``-token blocks from its 512-token ids: block ``k``
    is piece ``k % m`` of id ``hash_ids[k // m]`` (``m = 512 / block_tokens``), keyed
    ``id * m + k % m`` (one-to-one over the integers). The engine's prefix cache keys its
    blocks the same way (:mod:`slolab.sim.prefix_cache`)."""
    full = prompt_tokens // block_tokens
    per = HASH_ID_TOKENS // block_tokens
    if per == 1:
        return [int(h) for h in hash_ids[:full]]
    return [int(hash_ids[k // per]) * per + k % per for k in range(full)]


def _check_block_tokens(block_tokens: int) -> None:
    if (
        isinstance(block_tokens, bool)
        or not isinstance(block_tokens, int | np.integer)
        or block_tokens < 1
        or HASH_ID_TOKENS % block_tokens
    ):
        raise ValueError(
            f"block_tokens must divide {HASH_ID_TOKENS} (16, 32, ..., 512), got {block_tokens!r}"
        )


def replay_cache(
    history: Workload, *, block_tokens: int = HASH_ID_TOKENS, capacity_tokens: int | None = None
) -> OrderedDict[int, None]:
    """The resident blocks after ``history``'s requests, in arrival order, each touched its
    prompt's full blocks: block keys, least recently touched first. ``capacity_tokens`` (None:
    unbounded) keeps at most that many tokens of blocks, evicting the least recent."""
    _check_block_tokens(block_tokens)
    if capacity_tokens is not None and capacity_tokens < 0:
        raise ValueError(f"capacity_tokens must be >= 0 or None, got {capacity_tokens!r}")
    lru: OrderedDict[int, None] = OrderedDict()
    if not len(history):
        return lru
    ids = _block_ids(history)
    most = None if capacity_tokens is None else capacity_tokens // block_tokens
    for r, prompt in enumerate(history.prompt_tokens.tolist()):
        for key in prompt_block_keys(ids[r], prompt, block_tokens):
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
        if most is not None:
            while len(lru) > most:
                lru.popitem(last=False)
    return lru


def cached_prefix(
    window: Workload, resident: OrderedDict[int, None], *, block_tokens: int = HASH_ID_TOKENS
) -> np.ndarray:
    """Each of ``window``'s requests' longest prefix of ``resident`` blocks, in tokens (whole
    blocks inside the first ``prompt - 1`` tokens)."""
    _check_block_tokens(block_tokens)
    ids = _block_ids(window)
    out = np.zeros(len(window), dtype=np.int64)
    for r, prompt in enumerate(window.prompt_tokens.tolist()):
        keys = prompt_block_keys(ids[r], prompt, block_tokens)
        limit = (prompt - 1) // block_tokens
        k = 0
        while k < limit and keys[k] in resident:
            k += 1
        out[r] = k * block_tokens
    return out


def cached_before(
    workload: Workload,
    rows: Sequence[int] | np.ndarray,
    *,
    block_tokens: int = HASH_ID_TOKENS,
    capacity_tokens: int | None = None,
) -> np.ndarray:
    """The tokens each of ``workload``'s ``rows`` (in the order given) finds in the cache the
    requests before them left: those arriving before the earliest row, the rows excluded,
    replayed by :func:`replay_cache` with ``block_tokens`` and ``capacity_tokens``."""
    given = np.asarray(rows, dtype=np.int64)
    idx = np.unique(given)
    if not len(idx):
        raise ValueError("a given cache needs at least one row")
    if idx[0] < 0 or idx[-1] >= len(workload):
        raise ValueError(
            f"rows must be in 0..{len(workload) - 1}, got {int(idx[0])}..{int(idx[-1])}"
        )
    first = float(workload.arrival_s[idx].min())
    before = np.setdiff1d(np.flatnonzero(workload.arrival_s < first), idx)
    resident = replay_cache(
        workload.take(before), block_tokens=block_tokens, capacity_tokens=capacity_tokens
    )
    cached = cached_prefix(workload.take(idx), resident, block_tokens=block_tokens)
    return cached[np.searchsorted(idx, given)]


def given_cache(
    workload: Workload,
    rows: Sequence[int] | np.ndarray,
    *,
    block_tokens: int = HASH_ID_TOKENS,
    capacity_tokens: int | None = None,
) -> Workload:
    """The snapshot of ``workload``'s ``rows`` with its given cache: the rows (in arrival
    order), with the column ``cached_tokens`` (:func:`cached_before`). Arrivals are kept as
    they are: rezero them afterwards if the snapshot starts at 0."""
    idx = np.unique(np.asarray(rows, dtype=np.int64))
    cached = cached_before(
        workload, idx, block_tokens=block_tokens, capacity_tokens=capacity_tokens
    )
    return workload.take(idx).with_columns(**{CACHED_COLUMN: cached})


def pinned_tokens(window: Workload, *, block_tokens: int = HASH_ID_TOKENS) -> int:
    """Tokens of the distinct cached blocks ``window``'s requests use (their ``cached_tokens``
    prefixes, shared blocks once): the KV the given cache pins for the snapshot, which a
    builder that wants it inside the servers' capacity takes off that capacity."""
    _check_block_tokens(block_tokens)
    if CACHED_COLUMN not in window:
        return 0
    ids = _block_ids(window)
    keys: set[int] = set()
    cached = np.asarray(window[CACHED_COLUMN]).tolist()
    for r, k in enumerate(cached):
        keys.update(prompt_block_keys(ids[r], int(k), block_tokens))
    return len(keys) * block_tokens


def _block_ids(workload: Workload) -> np.ndarray:
    if "hash_ids" not in workload:
        raise ValueError(
            f"{workload.source}: a given cache needs the workload's hash_ids column (Mooncake's "
            "prompt block ids; read the trace with keep_hash_ids=True)"
        )
    return workload["hash_ids"]

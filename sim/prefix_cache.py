"""Prefix caching: the KV blocks of a shared prompt prefix reused across requests on a server.

A workload describes its prompts' content by the column ``hash_ids`` (Mooncake's convention:
the id of each 512-token block of the prompt, equal ids meaning equal content up to the end
of that block, so an id names its whole prefix). A server with a prefix cache
(``Cluster.prefix_block_tokens = b``, a divisor of 512) keeps KV blocks of ``b`` tokens keyed
by those ids (block ``k`` of a prompt is the ``k % (512 / b)``-th piece of its id
``hash_ids[k * b // 512]``). Only full blocks are cached, as in vLLM.

- **A hit.** When a request is admitted (its first prefill chunk starts), its longest prefix
  of blocks resident on the server is taken over: the request skips those tokens and prefills
  the rest, whose attention over the cached prefix the timing model still charges. At least
  one prompt token is always computed (the first output token needs its logits), so the hit
  covers at most the blocks inside the first ``prompt - 1`` tokens.
- **Sharing.** A resident block is held once, whatever number of running requests use it; a
  block a request computes becomes resident (and visible to later requests) when the
  iteration computing its last token ends.
- **Eviction.** A block no running request uses stays resident, unreferenced, until memory is
  needed: then unreferenced blocks leave, least recently released first (a request releases
  its blocks from the last to the first, so a prompt's tail leaves before its head).
- **Memory.** Resident blocks count against the server's KV capacity. Policies see the KV the
  running requests hold, each shared block counted once, as used memory, and unreferenced
  blocks as free memory (taken back when needed), as vLLM reports its free blocks.

This module holds the data structures (one :class:`ServerCache` per server, the run's
:class:`PrefixCaching`) and the record an Outcome carries (:class:`PrefixCacheLog`); the
engine makes the moves (:mod:`slolab.sim.engine.iterations`) and the checker verifies them
independently (:func:`slolab.sim.check`).
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.instances.prefix_state import prompt_block_keys
from slolab.instances.records import HASH_ID_TOKENS

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Workload
    from slolab.sim.outcome import Outcome


#: A prefilled count no request reaches (PrefixCaching.edge of a prompt with no block to come).
NEVER = 1 << 62

#: Keys of a prompt's full blocks from its 512-token ids (``block_keys(hash_ids, prompt_tokens,
#: block_tokens)``; the snapshot builder keys them the same way).
block_keys = prompt_block_keys


def hash_ids_error(ids: Any, prompt_tokens: int, *, items: bool = True) -> str:
    """Why ``ids`` is not the ``hash_ids`` of a prompt of ``prompt_tokens`` tokens ("" if it
    is): a list of integers (each item checked unless ``items`` is False), one per started
    512-token block."""
    if not isinstance(ids, list | tuple | np.ndarray) or (
        items
        # every item a plain int (the trace's lists) passes without a look at each
        and not set(map(type, ids)) <= {int}
        and not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in ids)
    ):
        return f"hash_ids must be a list of integers, got {ids!r}"
    blocks = -(-int(prompt_tokens) // HASH_ID_TOKENS)
    if len(ids) != blocks:
        return (
            f"hash_ids must hold one id per {HASH_ID_TOKENS}-token block of the prompt "
            f"({prompt_tokens} tokens: {blocks}), got {len(ids)}"
        )
    return ""


def workload_block_ids(workload: Workload) -> tuple[np.ndarray, bool]:
    """The ``hash_ids`` column, checked (ValueError naming the first bad row otherwise): a
    list of integers per row with one id per started 512-token block; and whether every row
    is a list of plain ``int`` (:func:`plain_block_ids`)."""
    if "hash_ids" not in workload:
        raise ValueError(
            "prefix caching needs the workload's hash_ids column (Mooncake's prompt block ids, "
            "or slolab.instances.scenarios.shared_prefix_workload's)"
        )
    ids = workload["hash_ids"]
    prompt = workload.prompt_tokens
    if plain_block_ids(ids, prompt):
        return ids, True
    for r in range(len(workload)):
        why = hash_ids_error(ids[r], int(prompt[r]))
        if why:
            raise ValueError(f"{why} (row {r})")
    return ids, False


def plain_block_ids(ids: Any, prompt_tokens: np.ndarray) -> bool:
    """True if every row of ``ids`` is a list of plain ``int`` with one id per started
    512-token block of its prompt (the trace's lists: checked at C speed, a pass over every
    id at once); False says nothing (a row may still pass :func:`hash_ids_error`)."""
    if not all(type(x) is list for x in ids):
        return False
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    blocks = -(-np.asarray(prompt_tokens, dtype=np.int64) // HASH_ID_TOKENS)
    return bool(np.array_equal(lengths, blocks)) and set(
        map(type, itertools.chain.from_iterable(ids))
    ) <= {int}


class ServerCache:
    """One server's block cache: resident blocks with their reference counts, and the
    unreferenced ones in the order they were released (least recent first)."""

    __slots__ = (
        "block_tokens",
        "server",
        "evicted_keys",
        "evict_runs",
        "ref",
        "lru",
        "shared",
        "memo",
        "lookups",
        "queried_tokens",
        "hit_tokens",
        "hit_blocks",
        "miss_blocks",
        "evictions",
        "unswept",
    )

    def __init__(
        self,
        block_tokens: int,
        server: int = -1,
        evict_runs: array.array | None = None,
    ) -> None:
        self.block_tokens = block_tokens
        # the server it belongs to, the keys of its evicted blocks in order, and the run's log
        # of evictions it appends to (shared by the servers' caches: PrefixCaching.evict_runs)
        self.server = server
        self.evicted_keys: list[int] = []
        self.evict_runs = array.array("d") if evict_runs is None else evict_runs
        # resident blocks: key -> number of running requests using it (0: unreferenced)
        self.ref: dict[int, int] = {}
        # unreferenced resident blocks, least recently released first: a plain dict keeps its
        # keys in insertion order, a key deleted and set again goes last. Its head is read
        # only by a sweep, which takes every evicted block at once (the holes deletions leave
        # at a dict's head are scanned once per sweep, not once per block); an OrderedDict
        # allocates a node per key, and the run ran slower beside those (benchmarks/
        # prefix_cache.py)
        self.lru: dict[int, None] = {}
        # KV tokens counted more than once in the requests' holdings: (users - 1) * b per block
        self.shared = 0
        # request -> its cached tokens (PrefixCaching.cached_tokens), emptied whenever a block
        # becomes resident or leaves. Under memory pressure the engine adds and evicts blocks
        # nearly every iteration while policies look a request up only until it is admitted,
        # so the memo is mostly empty: the engine checks that before clearing it.
        self.memo: dict[int, int] = {}
        self.lookups = 0
        self.queried_tokens = 0
        self.hit_tokens = 0
        self.hit_blocks = 0
        self.miss_blocks = 0
        self.evictions = 0
        # blocks evicted (logged, counted, no longer resident) still at the head of ``lru`` and
        # in ``ref``: an eviction only counts them, :meth:`sweep` takes them off before anything
        # reads the residency of a block (an iteration's start evicts a block or two nearly
        # every time under memory pressure; lookups come once per admission)
        self.unswept = 0

    @property
    def free_cached_tokens(self) -> int:
        """Tokens of unreferenced resident blocks (free to take back when memory is needed)."""
        return (len(self.lru) - self.unswept) * self.block_tokens

    def sweep(self) -> None:
        """Take the evicted blocks off the head of ``lru`` and out of ``ref``, their keys
        appended to ``evicted_keys`` in the order they were evicted."""
        lru, ref = self.lru, self.ref
        gone = list(itertools.islice(lru, self.unswept))
        self.unswept = 0
        for key in gone:
            del lru[key]
            del ref[key]
        self.evicted_keys += gone

    def cached_blocks(self, keys: list[int], limit: int, lru_budget: int | None = None) -> int:
        """How many of the first ``limit`` ``keys`` are resident, counted from the first; with
        ``lru_budget``, also stop at the first unreferenced block beyond that many."""
        if self.unswept:
            self.sweep()
        ref = self.ref
        k = 0
        for key in keys[:limit]:
            users = ref.get(key)
            if users is None:
                break
            if lru_budget is not None and users == 0:
                if lru_budget <= 0:
                    break
                lru_budget -= 1
            k += 1
        return k

    def pin(self, key: int) -> bool:
        """A running request uses resident block ``key`` (found by :meth:`cached_blocks`); True
        if it was unreferenced."""
        users = self.ref[key]
        self.ref[key] = users + 1
        if users:
            self.shared += self.block_tokens
            return False
        del self.lru[key]
        return True

    def release(self, keys: list[int], n: int) -> None:
        """A request stops using the first ``n`` of ``keys``: released from the last to the
        first."""
        ref, lru, b = self.ref, self.lru, self.block_tokens
        for i in range(n - 1, -1, -1):
            key = keys[i]
            users = ref[key] - 1
            ref[key] = users
            if users:
                self.shared -= b
            else:
                lru[key] = None

    def evict_over(self, held_tokens: int, capacity: int, now: float) -> None:
        """Unreferenced blocks leave, least recently released first, until they and
        ``held_tokens`` (the running requests', each shared block once, and any to come) fit
        ``capacity`` (or none is left), logged at time ``now`` (one entry ``(server, now,
        blocks)`` in ``evict_runs``; their keys reach ``evicted_keys`` when swept)."""
        left = len(self.lru) - self.unswept
        b = self.block_tokens
        excess = held_tokens + left * b - capacity
        if excess <= 0 or not left:
            return
        # the blocks a block at a time would take: ceil(excess / b), as many as there are (a
        # conditional: the builtin min parses its keywords on every call)
        n = -(-excess // b)
        if n > left:
            n = left
        self.unswept += n
        self.evictions += n
        self.evict_runs.extend((self.server, now, n))
        if self.memo:
            self.memo.clear()


class PrefixCaching:
    """The prefix-cache state of one run: each request's block keys, the blocks it uses on its
    server and the next block it will add, and the logs of hits and evictions."""

    def __init__(self, instance: Instance) -> None:
        self.block_tokens = int(instance.cluster.prefix_block_tokens)
        wl = instance.workload
        self.ids, plain = workload_block_ids(wl)
        self.prompt: list[int] = wl.prompt_tokens.tolist()
        # every row a list of plain ints: a prompt's keys at 512-token blocks are the first
        # ids themselves, a slice of the row
        self._slice = plain and self.block_tokens == HASH_ID_TOKENS
        n = len(wl)
        self._keys: list[list[int] | None] = [None] * n
        # the index of each request's next block: it uses the blocks before it on its current
        # server (it takes over a cached prefix and adds its blocks in order; 0 once it
        # releases them)
        self.next_block = [0] * n
        # prefilled tokens at which request r's next full prompt block is complete (past the
        # prompt's last full block: never), kept with next_block by edge_after
        self.edge = [self.edge_after(r, 0) for r in range(n)]
        # admitted with its hit applied (until a preemption): its remaining prefill is its own
        self.admitted = [False] * n
        self.hit_log: list[tuple[int, int, float, int, int]] = []
        # evictions: one entry (server, time, blocks) per batch of blocks a server evicted
        # together (record() repeats each over its blocks, whose keys each cache keeps)
        self.evict_runs = array.array("d")

    def new_cache(self, server: int) -> ServerCache:
        """The block cache of server ``server``, logging its evictions in this run's logs."""
        return ServerCache(self.block_tokens, server, self.evict_runs)

    def keys(self, r: int) -> list[int]:
        """Keys of request ``r``'s full prompt blocks."""
        k = self._keys[r]
        if k is None:
            if self._slice:
                k = self.ids[r][: self.prompt[r] // HASH_ID_TOKENS]
            else:
                k = block_keys(self.ids[r], self.prompt[r], self.block_tokens)
            self._keys[r] = k
        return k

    def pinned_keys(self, r: int) -> list[int]:
        """Keys of the blocks request ``r`` uses on its server (none once it released them)."""
        return self.keys(r)[: self.next_block[r]]

    def edge_after(self, r: int, blocks: int) -> int:
        """Prefilled tokens at which request ``r``, its first ``blocks`` prompt blocks
        resident, completes its next full block (past the prompt's full blocks: never)."""
        edge = (blocks + 1) * self.block_tokens
        return edge if edge <= self.prompt[r] else NEVER

    def hit_limit(self, r: int) -> int:
        """Most blocks a hit of request ``r`` covers: those inside its first ``prompt - 1``
        tokens."""
        return (self.prompt[r] - 1) // self.block_tokens

    def cached_tokens(self, cache: ServerCache, r: int) -> int:
        """Tokens of request ``r``'s prompt resident in ``cache`` (its longest cached prefix,
        at most ``prompt - 1`` tokens)."""
        hit = cache.memo.get(r)
        if hit is None:
            hit = cache.memo[r] = (
                cache.cached_blocks(self.keys(r), self.hit_limit(r)) * self.block_tokens
            )
        return hit

    def record(self, servers: int, caches: Sequence[ServerCache | None]) -> PrefixCacheLog:
        """The run's :class:`PrefixCacheLog`."""
        hits = self.hit_log
        # one row (server, time, blocks) per batch of blocks a server evicted together
        runs = np.frombuffer(self.evict_runs, dtype=float).reshape(-1, 3)
        counts = runs[:, 2].astype(np.int64)
        evict_server = np.repeat(runs[:, 0].astype(np.int64), counts)
        # each server's evicted keys, in its order, at its places in the run's order
        evict_block = np.zeros(len(evict_server), dtype=np.int64)
        stats = np.zeros((servers, 6), dtype=np.int64)
        for s, c in enumerate(caches):
            if c is not None:
                c.sweep()
                evict_block[evict_server == s] = c.evicted_keys
                stats[s] = (
                    c.lookups,
                    c.hit_blocks,
                    c.miss_blocks,
                    c.evictions,
                    c.hit_tokens,
                    c.queried_tokens,
                )
        return PrefixCacheLog(
            block_tokens=self.block_tokens,
            hit_request=np.array([h[0] for h in hits], dtype=np.int64),
            hit_server=np.array([h[1] for h in hits], dtype=np.int64),
            hit_s=np.array([h[2] for h in hits], dtype=float),
            hit_tokens=np.array([h[3] for h in hits], dtype=np.int64),
            queried_tokens=np.array([h[4] for h in hits], dtype=np.int64),
            evict_server=evict_server,
            evict_s=np.repeat(runs[:, 1].copy(), counts),
            evict_block=evict_block,
            server_stats=stats,
        )


def cache_log(outcome: Outcome) -> PrefixCacheLog | None:
    """What the prefix caches did in the run of ``outcome`` (``outcome.info["prefix_cache"]``),
    None when caching was off."""
    return outcome.info.get("prefix_cache")


@dataclass(frozen=True, eq=False)
class PrefixCacheLog:
    """What the prefix caches did in a run (``Outcome.info["prefix_cache"]``).

    Attributes
    ----------
    block_tokens : int
        Tokens per cached block.
    hit_request, hit_server, hit_s, hit_tokens, queried_tokens : arrays (admissions,)
        Every admission of a request to a caching server (its first prefill chunk, again after
        a preemption): the request, the server, the time, the prompt tokens it skipped (its
        cached prefix taken over) and the tokens it had to prefill without a cache.
    evict_server, evict_s, evict_block : arrays (evictions,)
        Every block evicted: the server, the time, the block's key.
    server_stats : int array (servers, 6)
        Per server: lookups, hit blocks, missed blocks (full prompt blocks a hit could have
        covered and did not), evicted blocks, tokens skipped, tokens queried.
    """

    block_tokens: int
    hit_request: np.ndarray
    hit_server: np.ndarray
    hit_s: np.ndarray
    hit_tokens: np.ndarray
    queried_tokens: np.ndarray
    evict_server: np.ndarray
    evict_s: np.ndarray
    evict_block: np.ndarray
    server_stats: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), dtype=np.int64))

    def summary(self) -> dict[str, Any]:
        """Per run: ``hits`` and ``misses`` (blocks), ``evictions`` (blocks), ``hit_rate``
        (tokens skipped over tokens queried, vLLM's prefix-cache hit rate), and
        ``prefill_tokens_saved``; ``by_server`` the same per server."""
        st = self.server_stats

        def row(x: np.ndarray) -> dict[str, Any]:
            lookups, hits, misses, evictions, saved, queried = (int(v) for v in x)
            return {
                "lookups": lookups,
                "hits": hits,
                "misses": misses,
                "evictions": evictions,
                "hit_rate": saved / queried if queried else 0.0,
                "prefill_tokens_saved": saved,
            }

        out = row(st.sum(axis=0) if len(st) else np.zeros(6, dtype=np.int64))
        out["block_tokens"] = self.block_tokens
        out["by_server"] = [row(x) for x in st]
        return out

"""Prefix caching in the engine: a request's cached prefix taken over when it is admitted, the
blocks it computes made resident, and its blocks released when it leaves (the cache itself, and
its evictions when memory is needed: :mod:`slolab.sim.prefix_cache`); and a snapshot's given
cache (the workload's ``cached_tokens``), taken at every start of a prefill.

Every move here runs only on a server with a cache (``ServerState.cache``); with caching off
the engine never calls them and its arithmetic is what it was.
"""

from __future__ import annotations

from slolab.sim.engine.servers import ServerState
from slolab.sim.engine.state import EngineCore
from slolab.sim.prefix_cache import PrefixCaching, ServerCache


class Caching(EngineCore):
    """Prefix-cache moves (a part of the engine, a base of its iterations)."""

    prefix: PrefixCaching

    def _cache_admit(self, server: ServerState, cache: ServerCache, r: int, budget: int) -> int:
        """Request ``r`` (waiting, nothing prefilled) is admitted on ``server``: it takes over
        its longest cached prefix, taking back at most ``budget`` tokens of unreferenced
        blocks (the memory its batch leaves), and holds those tokens. Returns the
        unreferenced tokens it took back."""
        pc = self.prefix
        b = cache.block_tokens
        keys = pc.keys(r)
        limit = pc.hit_limit(r)
        k = cache.cached_blocks(keys, limit, max(budget, 0) // b)
        taken = 0
        for key in keys[:k]:
            if cache.pin(key):
                taken += b
        skip = k * b
        target = int(self.prefill_target[r])
        cache.lookups += 1
        cache.hit_blocks += k
        cache.miss_blocks += max(limit, 0) - k
        cache.hit_tokens += skip
        cache.queried_tokens += target
        pc.next_block[r] = k
        pc.edge[r] = pc.edge_after(r, k)
        pc.admitted[r] = True
        pc.hit_log.append((r, server.id, self.now, skip, target))
        if skip:
            self.prefilled[r] = skip
            self.held[r] = skip
            server.kv += skip
            server.kv_shared = cache.shared
        return taken

    def _cache_add(self, server: ServerState, cache: ServerCache, r: int, done: int) -> None:
        """Request ``r``'s prompt blocks before block ``done``, completed by its prefill so far,
        become resident (those from its next block on)."""
        pc = self.prefix
        next_block = pc.next_block
        j = next_block[r]
        next_block[r] = done
        pc.edge[r] = pc.edge_after(r, done)
        keys = pc.keys(r)
        ref = cache.ref
        new = False
        for i in range(j, done):
            key = keys[i]
            # a new resident block, or ServerCache.pin of a resident one (inline: the hot path)
            users = ref.get(key)
            if users == 0 and cache.unswept:
                # unreferenced: perhaps evicted and not yet swept off the LRU's head
                cache.sweep()
                users = ref.get(key)
            if users is None:
                ref[key] = 1
                new = True
            elif users:
                ref[key] = users + 1
                cache.shared += cache.block_tokens
                server.kv_shared = cache.shared
            else:
                ref[key] = 1
                del cache.lru[key]
        if new and cache.memo:
            cache.memo.clear()

    def _cache_release(self, server: ServerState, cache: ServerCache, r: int) -> None:
        """Request ``r`` leaves ``server`` (finished, preempted, or its prefill handed on): its
        blocks stay resident, unreferenced unless another request uses them."""
        pc = self.prefix
        cache.release(pc.keys(r), pc.next_block[r])
        pc.next_block[r] = 0
        pc.edge[r] = pc.edge_after(r, 0)
        server.kv_shared = cache.shared

    def _given_admit(self, server: ServerState, r: int, c: int) -> int:
        """Request ``r`` (waiting, nothing prefilled) starts its prefill on ``server`` with
        the snapshot's given cache: its cached prompt tokens count as prefilled and held (the
        decode steps read them), outside the server's capacity (``kv_shared``). Returns the
        chunk ``c``, cut to what the cache leaves (a chunk sized for the whole prompt)."""
        k = int(self.given[r])  # type: ignore[index]
        self.prefilled[r] = k
        self.held[r] = k
        server.kv += k
        server.kv_shared += k
        self.given_on[r] = True
        return min(c, int(self.prefill_target[r]) - k)

    def _given_release(self, server: ServerState, r: int) -> None:
        """Request ``r`` leaves ``server`` (finished, preempted): its given cached tokens stay
        in the cache, outside the capacity; the caller takes its held KV off ``kv``."""
        server.kv_shared -= int(self.given[r])  # type: ignore[index]
        self.given_on[r] = False

"""The checker's own replay of the prefix caches (:func:`slolab.sim.check` calls it).

It rebuilds each server's resident blocks from the iteration log, the logged hits and the
logged evictions alone, sharing nothing with the engine: a block becomes resident on a server
when an iteration there completes its last prompt token, and leaves only by a logged eviction.
Rules:

- an admission skips a whole number of blocks, at most those inside the first
  ``prompt - 1`` tokens, each resident on that server when the admission's iteration starts
  (a request never skips more prefill than its cached prefix at the time it started);
- only an unreferenced resident block is evicted;
- the KV the running requests hold, each shared block counted once, equals the logged
  figure, and with the unreferenced resident blocks it fits the server's capacity (an
  eviction the log leaves out shows as memory over capacity);
- every logged hit belongs to an admission in the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from slolab.sim.prefix_cache import cache_log

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome

#: Tokens per id of a workload's ``hash_ids`` (Mooncake's blocks), as the workload defines them.
_ID_TOKENS = 512


class CacheReplay:
    """Resident blocks per server, each with its users, rebuilt from the log."""

    def __init__(self, instance: Instance, outcome: Outcome, n_servers: int) -> None:
        log = cache_log(outcome)
        assert log is not None
        self.b = int(instance.cluster.prefix_block_tokens)
        wl = instance.workload
        self.ids = wl["hash_ids"]
        self.prompt = wl.prompt_tokens.tolist()
        n = len(wl)
        self.users: list[dict[int, int]] = [{} for _ in range(n_servers)]
        self.shared = [0] * n_servers
        self.unreferenced = [0] * n_servers
        self._keys: dict[int, list[int]] = {}
        self.pins: list[list[int]] = [[] for _ in range(n)]
        self.next_block = [0] * n
        self.admitted = [False] * n
        self.hits: dict[int, deque[tuple[int, float, int]]] = {}
        for r, s, t, k in zip(
            log.hit_request.tolist(),
            log.hit_server.tolist(),
            log.hit_s.tolist(),
            log.hit_tokens.tolist(),
            strict=True,
        ):
            self.hits.setdefault(r, deque()).append((s, t, k))
        evictions = sorted(
            zip(
                log.evict_s.tolist(),
                log.evict_server.tolist(),
                log.evict_block.tolist(),
                strict=True,
            )
        )
        self.evictions: list[deque[tuple[float, int]]] = [deque() for _ in range(n_servers)]
        for t, s, key in evictions:
            if 0 <= s < n_servers:
                self.evictions[s].append((t, key))

    def keys(self, r: int) -> list[int]:
        """Keys of request ``r``'s full prompt blocks (block ``k``: piece ``k % m`` of id
        ``hash_ids[k // m]``, ``m = 512 / b``)."""
        keys = self._keys.get(r)
        if keys is None:
            per = _ID_TOKENS // self.b
            ids = self.ids[r]
            keys = [int(ids[k // per]) * per + k % per for k in range(self.prompt[r] // self.b)]
            self._keys[r] = keys
        return keys

    def evict_until(self, s: int, start: float, bad: Callable[[str], None]) -> None:
        """Apply server ``s``'s evictions logged up to ``start``."""
        queue = self.evictions[s]
        users = self.users[s]
        while queue and queue[0][0] <= start + 1e-12:
            t, key = queue.popleft()
            if key not in users:
                bad(f"server {s} at {t:.9g}s: evicts block {key}, which is not resident")
            elif users[key]:
                bad(
                    f"server {s} at {t:.9g}s: evicts block {key}, which {users[key]} request(s) use"
                )
            else:
                del users[key]
                self.unreferenced[s] -= self.b

    def admit(self, s: int, r: int, start: float, bad: Callable[[str], None]) -> int:
        """Request ``r`` starts prefilling on ``s`` at ``start``: the tokens its logged hit
        skips (checked against the blocks resident now), which it holds from then."""
        self.admitted[r] = True
        queue = self.hits.get(r)
        if not queue:
            bad(
                f"server {s} iteration at {start:.9g}s: admission of request {r} has no logged lookup"
            )
            return 0
        s_hit, t_hit, skip = queue.popleft()
        where = f"server {s} iteration at {start:.9g}s: request {r}"
        if s_hit != s or abs(t_hit - start) > 1e-9 * max(1.0, abs(start)):
            bad(f"{where}: its lookup is logged on server {s_hit} at {t_hit:.9g}s")
        keys = self.keys(r)
        limit = (self.prompt[r] - 1) // self.b
        users = self.users[s]
        cached = 0
        while cached < limit and keys[cached] in users:
            cached += 1
        if skip % self.b or skip > cached * self.b:
            bad(
                f"{where} skips {skip} prompt tokens but its cached prefix is {cached * self.b} "
                f"({cached} blocks of {self.b})"
            )
            return 0
        k = skip // self.b
        for key in keys[:k]:
            self._use(s, key)
        self.pins[r] = keys[:k]
        self.next_block[r] = k
        return skip

    def _use(self, s: int, key: int) -> None:
        users = self.users[s]
        u = users.get(key)
        if u is None:
            users[key] = 1
            return
        users[key] = u + 1
        if u:
            self.shared[s] += self.b
        else:
            self.unreferenced[s] -= self.b

    def computed(self, s: int, r: int, prefilled: int) -> None:
        """Request ``r`` has ``prefilled`` tokens processed on ``s``: its completed prompt
        blocks are resident and used by it."""
        done = min(prefilled, self.prompt[r]) // self.b
        j = self.next_block[r]
        if j >= done:
            return
        keys = self.keys(r)
        for key in keys[j:done]:
            self._use(s, key)
            self.pins[r].append(key)
        self.next_block[r] = done

    def release(self, s: int, r: int) -> None:
        """Request ``r`` leaves ``s``: its blocks stay resident."""
        users = self.users[s]
        for key in self.pins[r]:
            users[key] -= 1
            if users[key]:
                self.shared[s] -= self.b
            else:
                self.unreferenced[s] += self.b
        self.pins[r] = []

    def preempted(self, s: int, r: int) -> None:
        self.release(s, r)
        self.admitted[r] = False
        self.next_block[r] = 0

    def leftover(self, bad: Callable[[str], None]) -> None:
        """Every logged hit must have been met by an admission."""
        for r, queue in self.hits.items():
            if queue:
                s, t, _ = queue[0]
                bad(f"request {r}: a lookup logged on server {s} at {t:.9g}s matches no admission")
                return


def caching_servers(roles: Sequence[str]) -> np.ndarray:
    """Which servers keep a prefix cache (the mixed and prefill ones)."""
    return np.array([role in ("mixed", "prefill") for role in roles], dtype=bool)

"""Cache-aware routing: send a request where the longest prefix of its prompt is cached,
balanced against load, as production routers do.

The rule is SGLang's cache-aware router (its ``cache_threshold``, ``balance_abs_threshold``
and ``balance_rel_threshold``, at their defaults): when the cluster is imbalanced (the most
loaded server has more than ``balance_abs_threshold`` requests above the least loaded and
more than ``balance_rel_threshold`` times its load) the request goes to the least-loaded
server; otherwise to the server caching the largest fraction of its prompt when that
fraction exceeds ``cache_threshold``, else to the least-loaded server. SGLang's router keeps
an approximate tree of the prompts it routed; here the router reads each server's actual
cache (:func:`slolab.sim.engine.servers.cached_prefix_tokens`), as llm-d's precise prefix
scorer does from the servers' KV events. Without prefix caching every match is 0 and the
router is least-loaded.

References
----------
SGLang model gateway, cache-aware load balancing (``sgl-router``, ``CacheAwarePolicy``);
llm-d inference scheduler, prefix-cache scorer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slolab.heuristics.policies import register_router
from slolab.sim.engine.servers import cached_prefix_tokens

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim import Server


@dataclass(frozen=True, slots=True)
class CacheAwareParams:
    """The router's thresholds (SGLang's defaults).

    Parameters
    ----------
    cache_threshold : float
        Smallest fraction of the prompt cached on a server for the match to decide, in [0, 1].
    balance_abs_threshold : int
        Load gap (requests) above which the cluster counts as imbalanced, >= 0.
    balance_rel_threshold : float
        Load ratio above which the cluster counts as imbalanced, >= 1.
    """

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0:
            raise ValueError(
                f"balance_abs_threshold must be >= 0, got {self.balance_abs_threshold}"
            )
        if not self.balance_rel_threshold >= 1.0:
            raise ValueError(
                f"balance_rel_threshold must be >= 1, got {self.balance_rel_threshold}"
            )


class CacheAwareRouter:
    """Longest cached prefix, balanced against load (see the module docstring)."""

    name = "cache-aware"

    def __init__(self, params: CacheAwareParams | None = None) -> None:
        self.params = params or CacheAwareParams()

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        p = self.params
        loads = [s.load for s in servers]
        least = min(
            range(len(servers)),
            key=lambda j: (not servers[j].ready, loads[j], servers[j].kv_used_tokens, j),
        )
        high, low = max(loads), min(loads)
        if high - low > p.balance_abs_threshold and high > p.balance_rel_threshold * low:
            return least
        prompt = servers[least].prompt(request)
        best, best_match = least, 0
        for j, server in enumerate(servers):
            match = cached_prefix_tokens(server, request)
            if match > best_match or (match == best_match and match and loads[j] < loads[best]):
                best, best_match = j, match
        if best_match > p.cache_threshold * prompt:
            return best
        return least


register_router(
    "cache-aware",
    CacheAwareRouter,
    "longest cached prompt prefix (prefix caching), balanced against load (SGLang's rule)",
)

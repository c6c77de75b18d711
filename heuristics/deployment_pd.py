"""Heuristics for the disaggregated deployment problem (:mod:`slolab.models.deployment_pd`) and
the router that sends each request's KV cache to the decode pool the plan names.

- :func:`pd_greedy`: on each side, classes placed whole, largest first, on the configuration
  whose fleet price rises least (ties: price per unit of capacity); on the prefill side a
  configuration's servers cover both its compute load and its links' load.
- :func:`pd_best_pair`: one configuration per side, the cheapest carrying every class.
- :class:`PlanDecodeRouter`: a request of class ``k`` joins decode configuration ``d``'s pool
  with probability ``y_kd``, there the decode server with the fewest requests that can hold it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from slolab.models.deployment import DeploymentPlan
from slolab.models.deployment_pd import PDData, PDPlan, pd_plan_cost

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server

__all__ = ["PlanDecodeRouter", "pd_best_pair", "pd_greedy", "pd_single_pairs"]


def _servers(*loads: float) -> int:
    """Servers covering every load (a tolerance keeps 2.0000000001 at 2)."""
    need = max(loads)
    return max(0, math.ceil(need - 1e-9))


def _side_rows(data: PDData, side: str) -> list[list[list[float]]]:
    part = data.prefill if side == "prefill" else data.decode
    n_conf, n_class = len(part.configurations), len(part.classes)
    compute = [
        [part.servers_needed(c, k) if part.rates[k] > 0 else 0.0 for k in range(n_class)]
        for c in range(n_conf)
    ]
    if side == "decode":
        return [compute]
    return [compute, [[data.link_needed(c, k) for k in range(n_class)] for c in range(n_conf)]]


def _greedy_side(data: PDData, side: str) -> DeploymentPlan:
    part = data.prefill if side == "prefill" else data.decode
    rows = _side_rows(data, side)
    n_conf, n_class = len(part.configurations), len(part.classes)
    loads = [[0.0] * n_conf for _ in rows]
    fractions: list[tuple[float, ...]] = [()] * n_class
    order = sorted(range(n_class), key=lambda k: (-part.rates[k], k))
    for k in order:
        usable = [c for c in range(n_conf) if part.capacity[c][k] > 0]
        if not usable:
            raise ValueError(f"no {side} configuration serves class {part.classes[k]}")

        def added(c: int, k: int = k) -> tuple[float, float, int]:
            before = _servers(*(load[c] for load in loads))
            after = _servers(*(load[c] + row[c][k] for load, row in zip(loads, rows, strict=True)))
            return ((after - before) * part.prices[c], part.prices[c] / part.capacity[c][k], c)

        chosen = min(usable, key=added)
        for load, row in zip(loads, rows, strict=True):
            load[chosen] += row[chosen][k]
        fractions[k] = tuple(1.0 if c == chosen else 0.0 for c in range(n_conf))
    replicas = tuple(_servers(*(load[c] for load in loads)) for c in range(n_conf))
    return DeploymentPlan(replicas, tuple(fractions))


def pd_greedy(data: PDData) -> PDPlan:
    """Each side greedily: classes by rate, largest first, each wholly to the configuration
    whose servers' price rises least (ties: price per unit of capacity, then the earlier
    configuration); a configuration's servers are its largest load rounded up (compute and, on
    the prefill side, links), so a class with any load gets at least one server."""
    return PDPlan(_greedy_side(data, "prefill"), _greedy_side(data, "decode"))


def pd_single_pairs(data: PDData) -> dict[tuple[int, int], PDPlan]:
    """Per (prefill, decode) configuration pair that can serve every class: the plan sending
    everything to it, with the fewest servers covering its loads."""
    sides = {}
    for side in ("prefill", "decode"):
        part = data.prefill if side == "prefill" else data.decode
        rows = _side_rows(data, side)
        n_conf, n_class = len(part.configurations), len(part.classes)
        found = {}
        for c in range(n_conf):
            if any(part.capacity[c][k] == 0 and part.rates[k] > 0 for k in range(n_class)):
                continue
            replicas = [0] * n_conf
            replicas[c] = _servers(*(sum(row[c]) for row in rows))
            if replicas[c] == 0:
                replicas[c] = 1
            row = tuple(1.0 if j == c else 0.0 for j in range(n_conf))
            found[c] = DeploymentPlan(tuple(replicas), tuple(row for _ in range(n_class)))
        sides[side] = found
    return {
        (p, d): PDPlan(plan_p, plan_d)
        for p, plan_p in sides["prefill"].items()
        for d, plan_d in sides["decode"].items()
    }


def pd_best_pair(data: PDData) -> PDPlan | None:
    """The cheapest single-pair plan (:func:`pd_single_pairs`; ties: the earlier pair), None
    when no pair serves every class."""
    pairs = pd_single_pairs(data)
    if not pairs:
        return None
    return pairs[min(pairs, key=lambda pair: (pd_plan_cost(data, pairs[pair]), pair))]


class PlanDecodeRouter:
    """Routes a request whose KV cache reached the decode side by the plan's decode fractions:
    class ``k`` to decode configuration ``d``'s pool with probability ``y_kd`` (one seeded
    draw per request), there to the server with the fewest requests, then least KV in use,
    among those that can hold the request; a pool none of whose servers can hold it gives way
    to any decode server that can.

    Parameters
    ----------
    class_of : array of int
        The class index of every request.
    pools : sequence of str
        The decode pool name of each column of ``fractions``.
    fractions : sequence of sequence of float
        ``fractions[k][d]``, each row summing to 1.
    """

    name = "plan-decode"

    def __init__(
        self, class_of: np.ndarray, pools: Sequence[str], fractions: Sequence[Sequence[float]]
    ) -> None:
        self.class_of = np.asarray(class_of, dtype=np.int64)
        self.pools = tuple(pools)
        shares = np.asarray(fractions, dtype=float)
        if shares.shape[1:] != (len(self.pools),):
            raise ValueError(
                f"fractions must have one column per pool ({len(self.pools)}), got {shares.shape}"
            )
        rows = shares.sum(axis=1)
        if not np.allclose(rows, 1.0, atol=1e-6):
            raise ValueError(f"every row of fractions must sum to 1, got {rows.tolist()}")
        self._cumulative = np.cumsum(shares, axis=1)
        self._rng = np.random.default_rng(0)
        self._need = np.zeros(len(self.class_of), dtype=np.int64)

    def start(self, instance: Instance, seed: int) -> None:
        if len(self.class_of) != instance.n_requests:
            raise ValueError(
                f"class_of has {len(self.class_of)} entries, the instance "
                f"{instance.n_requests} requests"
            )
        # a stream of its own: the entry router draws from the run's seed too
        self._rng = np.random.default_rng([seed, 1])
        workload = instance.workload
        self._need = np.asarray(workload.prompt_tokens, dtype=np.int64) + np.asarray(
            workload.output_tokens, dtype=np.int64
        )

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        row = self._cumulative[self.class_of[request]]
        d = min(int(np.searchsorted(row, self._rng.random() * row[-1], side="right")), len(row) - 1)
        fits = [
            j for j in range(len(servers)) if servers[j].kv_capacity_tokens >= self._need[request]
        ]
        mine = [j for j in fits if servers[j].pool == self.pools[d]]
        candidates = mine or fits or list(range(len(servers)))
        return min(
            candidates,
            key=lambda j: (not servers[j].ready, servers[j].load, servers[j].kv_used_tokens, j),
        )

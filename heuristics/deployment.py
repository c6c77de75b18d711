"""Deployment heuristics beside the exact model, and the router and policy that run a plan.

- :func:`best_single`: the cheapest fleet of one configuration carrying all the traffic (what
  a planner that buys one GPU type at one TP degree gets).
- :func:`greedy_cost_per_capacity`: classes placed one at a time, each wholly on the
  configuration that adds the least cost, ties broken by cost per unit of capacity.
- :class:`PlanRouter`: sends each request of class ``k`` to the pool of configuration ``c``
  with probability ``x_kc`` (seeded), and to the least-loaded server of that pool.
- :class:`PoolPolicies`: one scheduler per pool, each built for its pool's timing (a
  token budget is the largest batch within the tightest TPOT *on that hardware*).

References
----------
Griggs et al., Mélange, 2024 (the single-GPU-type baselines); arXiv 2604.07472 (greedy
allocation against an exact MILP for mixed-scale fleets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from slolab.models.deployment import (
    LOAD_TOLERANCE,
    DeploymentData,
    DeploymentPlan,
    plan_cost,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.sim.policy import Batch, Policy

__all__ = [
    "PlanRouter",
    "PoolPolicies",
    "best_single",
    "greedy_cost_per_capacity",
    "single_configuration_plans",
]


def _servers(load: float) -> int:
    """Servers a load (in servers) needs: its ceiling, forgiving the solver tolerance, and at
    least one for any traffic (a pool sent requests needs a server to run them, however light
    the load: a class of 0.00003 servers of load is 1 server, not 0)."""
    if load <= 0:
        return 0
    return max(1, math.ceil(load - LOAD_TOLERANCE))


def single_configuration_plans(data: DeploymentData) -> dict[int, DeploymentPlan]:
    """For each configuration that can serve every arriving class, the plan that puts all the
    traffic on it: ``n_c = ceil(sum_k lambda_k / mu_kc)`` servers."""
    plans = {}
    n_conf = len(data.configurations)
    for c in range(n_conf):
        needs = [data.servers_needed(c, k) for k in range(len(data.classes))]
        if any(math.isinf(v) for v in needs):
            continue
        replicas = tuple(_servers(sum(needs)) if j == c else 0 for j in range(n_conf))
        fractions = tuple(
            tuple(1.0 if j == c else 0.0 for j in range(n_conf)) for _ in data.classes
        )
        plans[c] = DeploymentPlan(replicas, fractions)
    return plans


def best_single(data: DeploymentData) -> DeploymentPlan | None:
    """The cheapest single-configuration plan (ties: the earlier configuration), or None when
    no configuration serves every class."""
    plans = single_configuration_plans(data)
    if not plans:
        return None
    return min(plans.values(), key=lambda plan: plan_cost(data, plan))


def greedy_cost_per_capacity(data: DeploymentData) -> DeploymentPlan:
    """Classes placed greedily, each wholly on one configuration.

    Classes go in decreasing order of the servers they need on their cheapest configuration
    (the largest first, as first-fit decreasing bin packing). Each goes to the configuration
    whose fleet cost rises least when it is added (``p_c (ceil(load_c + lambda_k / mu_kc) -
    ceil(load_c))``: a class that fits in the spare of servers already bought costs nothing),
    ties broken by cost per unit of capacity ``p_c / mu_kc``, then by configuration order.
    """
    n_conf, n_class = len(data.configurations), len(data.classes)

    def cheapest_need(k: int) -> float:
        return min(data.prices[c] * data.servers_needed(c, k) for c in range(n_conf))

    loads = [0.0] * n_conf
    rows: list[tuple[float, ...]] = [()] * n_class
    for k in sorted(range(n_class), key=lambda k: (-cheapest_need(k), k)):

        def added(c: int, k: int = k) -> tuple[float, float, int]:
            need = data.servers_needed(c, k)
            if math.isinf(need):
                return (math.inf, math.inf, c)
            rise = data.prices[c] * (_servers(loads[c] + need) - _servers(loads[c]))
            return (rise, data.prices[c] / data.capacity[c][k], c)

        chosen = min(range(n_conf), key=added)
        loads[chosen] += data.servers_needed(chosen, k)
        rows[k] = tuple(1.0 if c == chosen else 0.0 for c in range(n_conf))
    return DeploymentPlan(tuple(_servers(load) for load in loads), tuple(rows))


class PlanRouter:
    """Routes by a deployment plan: a request of class ``k`` goes to the pool of
    configuration ``c`` with probability ``x_kc`` (one seeded draw per request, in arrival
    order), and there to the server with the fewest queued and running requests (then least
    KV in use, then index), a ready server before one still starting.

    Parameters
    ----------
    class_of : array of int
        The class index of every request of the instance.
    pools : sequence of str
        The pool name of each configuration (column of ``fractions``).
    fractions : sequence of sequence of float
        ``fractions[k][c]``, each row summing to 1.
    """

    name = "plan"

    def __init__(
        self,
        class_of: np.ndarray,
        pools: Sequence[str],
        fractions: Sequence[Sequence[float]],
    ) -> None:
        self.class_of = np.asarray(class_of, dtype=np.int64)
        self.pools = tuple(pools)
        self.fractions = np.asarray(fractions, dtype=float)
        if self.fractions.shape[1:] != (len(self.pools),):
            raise ValueError(
                f"fractions must have one column per pool ({len(self.pools)}), "
                f"got shape {self.fractions.shape}"
            )
        if self.class_of.size and not (
            0 <= self.class_of.min() and self.class_of.max() < len(self.fractions)
        ):
            raise ValueError("class_of names a class with no row of fractions")
        rows = self.fractions.sum(axis=1)
        if not np.allclose(rows, 1.0, atol=1e-6):
            raise ValueError(f"every row of fractions must sum to 1, got {rows.tolist()}")
        self._cumulative = np.cumsum(self.fractions, axis=1)
        self._rng = np.random.default_rng(0)
        #: the pool index drawn for each request (-1: not routed yet)
        self.chosen = np.full(len(self.class_of), -1, dtype=np.int64)

    def start(self, instance: Instance, seed: int) -> None:
        if len(self.class_of) != instance.n_requests:
            raise ValueError(
                f"class_of has {len(self.class_of)} entries, the instance "
                f"{instance.n_requests} requests"
            )
        self._rng = np.random.default_rng(seed)
        self.chosen[:] = -1

    def pool_for(self, request: int) -> str:
        """Draw the pool of ``request`` (one draw of the router's generator; recorded in
        :attr:`chosen`)."""
        row = self._cumulative[self.class_of[request]]
        c = min(int(np.searchsorted(row, self._rng.random() * row[-1], side="right")), len(row) - 1)
        self.chosen[request] = c
        return self.pools[c]

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        pool = self.pool_for(request)
        candidates = [j for j in range(len(servers)) if servers[j].pool == pool]
        if not candidates:
            candidates = list(range(len(servers)))
        return min(
            candidates,
            key=lambda j: (not servers[j].ready, servers[j].load, servers[j].kv_used_tokens, j),
        )


class PoolPolicies:
    """One policy per pool: the servers of pool ``name`` are scheduled by ``policies[name]``.

    Parameters
    ----------
    policies : mapping of str to Policy
        A fresh policy for each pool of the cluster.
    """

    def __init__(self, policies: Mapping[str, Policy]) -> None:
        if not policies:
            raise ValueError("give a policy for at least one pool")
        self.policies = dict(policies)

    def start(self, instance: Instance, seed: int) -> None:
        pools = {p.name for p in instance.cluster.resolved_pools()}
        missing = sorted(pools - set(self.policies))
        if missing:
            raise ValueError(f"no policy for pool(s) {', '.join(missing)}")
        for policy in self.policies.values():
            policy.start(instance, seed)

    def next_batch(self, server: Server) -> Batch:
        return self.policies[server.pool].next_batch(server)

    @classmethod
    def build(cls, names: Sequence[str], make: Callable[[str], Policy]) -> PoolPolicies:
        """``make(name)`` for each pool name."""
        return cls({name: make(name) for name in names})

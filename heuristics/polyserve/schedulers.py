"""PolyServe and the baselines of its evaluation as registered schedulers: ``polyserve``,
``polyserve-always-tpot``, ``random``, ``minimal`` and ``chunk``
(:func:`slolab.heuristics.policies.make_scheduler` builds each with its routers, scaler and
cluster layout), and the tier-partition bound ``slolab capacity`` prints beside them.

References
----------
PolyServe, Sec. 4 (the design), 5.1 (setup, baselines).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from slolab.heuristics.baselines import LeastLoaded, RandomRouter, SarathiFCFS
from slolab.heuristics.policies import Scheduler, register_policy
from slolab.heuristics.polyserve.batch_former import PolyServePolicy
from slolab.heuristics.polyserve.controller import PolyServeController
from slolab.heuristics.polyserve.profile import Profile
from slolab.heuristics.polyserve.tiers import PolyServeParams, polyserve_cluster

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server


class MinimalCycleRouter:
    """Route to the server with the lowest predicted cycle (iteration) time: its decode tokens
    plus what its prompts would add up to the token budget, at its KV (the profile of the
    run's timing model); fewest requests on ties (PolyServe's PD-/CO-Minimal, Sec. 5.1)."""

    name = "minimal-cycle"

    def __init__(self, token_budget: int = 0) -> None:
        self.token_budget = token_budget

    def start(self, instance: Instance, seed: int) -> None:
        pool = instance.cluster.resolved_pools()[-1]
        self.profile = Profile(instance.timing, int(pool.kv_capacity_tokens))  # type: ignore[arg-type]
        self.budget = self.token_budget or int(instance.cluster.max_batch_tokens) or 2048

    def cycle_s(self, s: Server) -> float:
        prompts = sum(s.remaining_prefill(q) for q in s.prefilling) + sum(
            s.remaining_prefill(q) for q in s.waiting
        )
        tokens = len(s.decoding) + min(prompts, self.budget)
        return self.profile.time(max(tokens, 1), s.kv_used_tokens)

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return min(
            range(len(servers)), key=lambda k: (self.cycle_s(servers[k]), servers[k].load, k)
        )


def _fixed_split(instance: Instance, mode: str, servers: int, prefill_servers: int) -> Instance:
    """``instance`` on a fixed cluster of ``servers``: co-located one pool, disaggregated
    ``prefill_servers`` (0: the tier-partition bound's split, rounded) prefill servers."""
    from slolab.instances.records import Cluster

    cl = instance.cluster
    if mode == "disaggregated" and not prefill_servers:
        prefill_servers = bound_prefill_split(instance, servers)
    cluster = dataclasses.replace(
        cl,
        servers=servers,
        mode=mode,
        prefill_servers=prefill_servers if mode == "disaggregated" else 0,
        pools=(),
    )
    Cluster.__post_init__(cluster)
    settings = {**instance.settings, "servers": servers, "mode": mode}
    if mode == "disaggregated":
        settings["prefill_servers"] = prefill_servers
    return dataclasses.replace(instance, cluster=cluster, settings=settings)


def bound_prefill_split(instance: Instance, servers: int) -> int:
    """Prefill servers of the disaggregated tier-partition bound on ``servers`` servers (between
    1 and ``servers - 1``): the split the baselines run at."""
    from slolab.models.tier_partition import PartitionData, partition_pulp, pulp_value
    from slolab.solvers import get_backend
    from slolab.solvers.base import MilpFormulation

    if servers < 2:
        raise ValueError(f"disaggregated serving needs at least 2 servers, got {servers}")
    data = PartitionData.of(instance, mode="disaggregated", servers=servers)
    prob, v = partition_pulp(data, None, True)
    get_backend("highs")().solve_formulation(MilpFormulation(prob, to_schedule=lambda: None), 30.0)
    value = pulp_value(v["n_prefill"])
    split = int(round(value)) if math.isfinite(value) else servers // 2
    return min(max(split, 1), servers - 1)


def _mode_of(mode: str | None, instance: Instance) -> str:
    mode = mode or instance.cluster.mode
    if mode not in ("colocated", "disaggregated"):
        raise ValueError(f"PolyServe's policies run colocated or disaggregated, got {mode!r}")
    return mode


def polyserve_scheduler(
    instance: Instance,
    *,
    mode: str | None = None,
    servers: int | None = None,
    params: PolyServeParams | None = None,
    **_: Any,
) -> Scheduler:
    """PolyServe on ``instance`` (its cluster's servers are the fleet): its pools, controller
    (router, decode router, scaler) and policy."""
    mode = _mode_of(mode, instance)
    fleet = int(servers or instance.cluster.servers)
    if mode == "disaggregated" and fleet < 2:
        raise ValueError(
            "disaggregated PolyServe needs --servers >= 2 (a prefill server and a decode "
            f"server), got {fleet}"
        )
    inst = polyserve_cluster(instance, mode, fleet)
    controller = PolyServeController(params)
    controller.skip_held_ticks = True
    return Scheduler(
        PolyServePolicy(controller),
        controller,
        controller.decode_router if mode == "disaggregated" else None,
        controller,
        instance=inst,
    )


def _baseline(kind: str):
    def make(
        instance: Instance,
        *,
        mode: str | None = None,
        servers: int | None = None,
        token_budget: int | None = None,
        prefill_servers: int = 0,
        **_: Any,
    ) -> Scheduler:
        from slolab.heuristics.policies import sarathi_token_budget

        mode = _mode_of(mode, instance)
        if kind == "chunk" and mode != "colocated":
            raise ValueError("chunk (CO-Chunk) is co-located only, as in PolyServe's evaluation")
        fleet = int(servers or instance.cluster.servers)
        inst = _fixed_split(instance, mode, fleet, prefill_servers)
        budget = token_budget or sarathi_token_budget(inst)
        policy = SarathiFCFS(token_budget=budget)
        router: Any
        decode_router: Any = None
        if kind == "random":
            router = RandomRouter()
            decode_router = RandomRouter() if mode == "disaggregated" else None
        elif kind == "minimal":
            router = MinimalCycleRouter(budget)
            decode_router = MinimalCycleRouter(budget) if mode == "disaggregated" else None
        else:
            router = LeastLoaded()
        return Scheduler(policy, router, decode_router, instance=inst)

    make.__name__ = f"{kind}_scheduler"
    return make


def capacity_bound(
    instance: Instance, mode: str | None = None, servers: int | None = None
) -> float:
    """The tier-partition bound (req/s) of ``instance``'s mix on its servers: the largest
    arrival rate the steady-state fluid model serves in full (HiGHS, 60 s)."""
    from slolab.models.tier_partition import TierPartition
    from slolab.solvers import solve

    mode = _mode_of(mode, instance)
    model = TierPartition(instance, mode=mode, servers=int(servers or instance.cluster.servers))
    res = solve(model, solver="highs", time_limit=60.0)
    if res.bound is None:
        raise RuntimeError(f"the tier-partition bound was not found ({res.status.value})")
    return float(res.bound)


register_policy(
    "polyserve",
    PolyServePolicy,
    "PolyServe: TPOT tiers, highest-load feasible server, lazy promotion, autoscaling from a "
    "best-effort pool (routes and scales itself; --mode colocated or disaggregated)",
    setup=polyserve_scheduler,
    capacity_bound=capacity_bound,
)


def _always_tpot_scheduler(instance: Instance, **options: Any) -> Scheduler:
    """PolyServe with every co-located iteration within the tier's TPOT, a prompt alone on a
    server too (``tpot_bound="always"``)."""
    return polyserve_scheduler(instance, params=PolyServeParams(tpot_bound="always"), **options)


register_policy(
    "polyserve-always-tpot",
    PolyServePolicy,
    "PolyServe with every co-located iteration within the tier's TPOT, a prompt alone on an "
    "idle server too (Sec. 4.7 read literally; the default bounds it only while a request "
    "decodes, Sec. 3.4)",
    setup=_always_tpot_scheduler,
    capacity_bound=capacity_bound,
)
_RANDOM, _MINIMAL, _CHUNK = _baseline("random"), _baseline("minimal"), _baseline("chunk")

register_policy(
    "random",
    _RANDOM,
    "PolyServe's PD-/CO-Random baseline: a random server, Sarathi token budget (its own "
    "router; not the 'random' router)",
    setup=_RANDOM,
    capacity_bound=capacity_bound,
    token_budget=True,
)
register_policy(
    "minimal",
    _MINIMAL,
    "PolyServe's PD-/CO-Minimal baseline: the server with the lowest predicted cycle time, "
    "Sarathi token budget",
    setup=_MINIMAL,
    capacity_bound=capacity_bound,
    token_budget=True,
)
register_policy(
    "chunk",
    _CHUNK,
    "PolyServe's CO-Chunk baseline: a static token budget (--token-budget; the studies sweep "
    "it), least-loaded routing; co-located only",
    setup=_CHUNK,
    capacity_bound=capacity_bound,
    token_budget=True,
)

"""The serving capacity of SLOs-Serve's evaluation scenarios (built by
:mod:`slolab.instances.scenarios`).

:func:`capacity_of` measures a scheduler's serving capacity on a scenario: the largest arrival
rate (req/s, the trace rescaled by :func:`slolab.instances.scale_rate`) whose deadline
attainment stays at the target, searched by :func:`slolab.solvers.capacity.capacity`.

References
----------
Chen et al., "SLOs-Serve: Optimized Serving of Multi-SLO LLMs", 2025: Sec. 6 (Sarathi-Serve's
batch size set by the tightest decode SLO; capacity at 90% attainment).
"""

from __future__ import annotations

import logging
from typing import Any

from slolab.heuristics import policies
from slolab.heuristics.baselines import LeastLoaded
from slolab.instances import scale_rate
from slolab.instances.records import Instance
from slolab.instances.scenarios import SCENARIOS, TIMING_PRESET, check_name, scenario_instance
from slolab.sim import metrics, run
from slolab.solvers.capacity import CapacityResult, capacity
from slolab.timing import TimingModel

__all__ = ["POLICIES", "attainment_at", "capacity_of", "make_policy"]

logger = logging.getLogger("slolab")

#: Scheduler names accepted by :func:`make_policy` and :func:`capacity_of`.
POLICIES = ("slos-serve", "sarathi", "vllm")


def make_policy(policy_name: str, instance: Instance) -> Any:
    """A fresh scheduler by name: ``"slos-serve"``, ``"sarathi"`` or ``"vllm"``.

    Budgeted policies take :func:`slolab.heuristics.policies.sarathi_token_budget`, the rule
    ``simulate`` and ``compare`` use too.
    """
    check_name(policy_name, POLICIES, "policy")
    return policies.make_policy(policy_name, instance)


def _attainment(instance: Instance, policy_name: str, seed: int) -> float:
    router = LeastLoaded() if instance.cluster.servers > 1 else None
    policy = make_policy(policy_name, instance)
    outcome = run(instance, policy, router, seed=seed, record_iterations=False)
    return float(metrics.attainment(instance, outcome))


def attainment_at(
    name: str,
    policy_name: str,
    replicas: int,
    rate: float,
    *,
    seed: int,
    n: int,
    slack: str | None = "tight",
    timing: str | TimingModel = TIMING_PRESET,
) -> float:
    """Deadline attainment of a scheduler on a scenario rescaled to ``rate`` req/s."""
    check_name(policy_name, POLICIES, "policy")
    inst = scenario_instance(
        name, seed=seed, replicas=replicas, n=n, slack=slack, rate=rate, timing=timing
    )
    return _attainment(inst, policy_name, seed)


def capacity_of(
    name: str,
    policy_name: str,
    replicas: int,
    *,
    seed: int,
    n: int,
    slack: str | None = "tight",
    target: float = 0.9,
    timing: str | TimingModel = TIMING_PRESET,
    **kw: Any,
) -> CapacityResult:
    """Largest arrival rate (req/s) at which ``policy_name`` keeps deadline attainment >= target.

    Every probe rescales the scenario's ``n`` requests to the probed rate and simulates them
    on ``replicas`` replicas (first placement by :class:`LeastLoaded`). ``kw`` goes to
    :func:`slolab.solvers.capacity.capacity` (``rel_tol``, ``start_rate``, ``progress``, ...);
    ``start_rate`` defaults to ``2 * replicas`` and ``progress`` to False.

    References
    ----------
    SLOs-Serve, Sec. 6 ("Metric": the largest request load with less than 10% SLO violations).
    """
    check_name(name, SCENARIOS, "scenario")
    check_name(policy_name, POLICIES, "policy")
    base = scenario_instance(name, seed=seed, replicas=replicas, n=n, slack=slack, timing=timing)

    def probe(rate: float) -> float:
        inst = Instance(
            base.name,
            scale_rate(base.workload, rate),
            base.cluster,
            base.timing,
            problem="serving",
            settings={**base.settings, "rate": rate},
        )
        return _attainment(inst, policy_name, seed)

    options: dict[str, Any] = {"start_rate": 2.0 * replicas, "progress": False, **kw}
    found = capacity(probe, target=target, **options)
    logger.info("capacity %s %s x%d: %.3f req/s", name, policy_name, replicas, found.capacity)
    return found

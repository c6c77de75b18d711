"""The deployment problem (Mélange's cost-aware bin packing): the cheapest fleet of (GPU, TP)
configurations and the share of each request class sent to each, within the measured capacities.

An instance is a trace cut with SLOs, and in its settings the decision problem's data
(``deployment``: the configurations and their prices per hour, the request classes and their
rates, the capacity table measured by the engine's capacity search when the instance was built,
so solving it measures nothing again), each request's class (``class_of``), the classes'
attainment targets and the trace's ``target``. The exact model ``deployment`` (HiGHS: the MILP;
``brute``: the enumeration of replica vectors, each decided by an LP) and the heuristics
(``best-single``, ``greedy``) each give a plan; the plan is run in the engine as a mixed fleet
(one pool per configuration with its own timing, :class:`slolab.heuristics.deployment.PlanRouter`
sending each class where the plan puts it).

The objective is the fleet's price per hour, recomputed from the pools the engine ran and the
prices in the settings; a plan the capacity table does not carry (:func:`plan_violations` not
empty) costs ``inf``. The simulated attainment of the fleet is reported beside it (compare's
``attainment`` column) as information: the capacities decide feasibility, the optimum the MILP
proves is the optimum of that decision problem. See docs/deployment.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slolab.problems.registry import (
    READ_OPTIONS,
    Heuristic,
    Objective,
    Option,
    Problem,
    register_problem,
)

if TYPE_CHECKING:
    import pandas as pd
    from slolab.heuristics.policies import Scheduler
    from slolab.instances.records import Instance
    from slolab.models.deployment import DeploymentData, DeploymentPlan
    from slolab.sim.outcome import Outcome
    from slolab.solvers import Result

#: Configurations of a built instance unless given: Llama-2-7B on one H100 and on two A100s.
DEFAULT_CONFIGURATIONS = "llama2-7b/h100/tp1,llama2-7b/a100/tp2"


def fleet_instance(
    instance: Instance, configurations: Sequence[str], replicas: Sequence[int]
) -> Instance:
    """``instance`` on a mixed cluster: one pool per configuration with servers, named after
    it, running at its timing with its KV capacity."""
    from slolab.instances.records import Cluster, Pool
    from slolab.timing.generated import generated_preset

    pools = [
        Pool(
            name,
            "mixed",
            int(n),
            kv_capacity_tokens=generated_preset(name).kv_capacity_tokens,
            timing=name,
        )
        for name, n in zip(configurations, replicas, strict=True)
        if n > 0
    ]
    if not pools:
        raise ValueError("the fleet has no server")
    cluster = Cluster.from_pools(
        pools,
        kv_capacity_tokens=instance.cluster.kv_capacity_tokens,
        max_batch_size=instance.cluster.max_batch_size,
        max_batch_tokens=instance.cluster.max_batch_tokens,
    )
    return dataclasses.replace(instance, cluster=cluster)


def deployment_data(instance: Instance) -> DeploymentData:
    """The decision problem's data stored in a ``deployment`` instance."""
    from slolab.models.deployment import DeploymentData

    if "deployment" not in instance.settings:
        raise ValueError(f"instance {instance.name!r} holds no deployment data in its settings")
    return DeploymentData.from_dict(instance.settings["deployment"])


def plan_scheduler(instance: Instance, plan: DeploymentPlan) -> Scheduler:
    """The plan run online: its fleet (:func:`fleet_instance`, the plan in its settings under
    ``plan``), :class:`PlanRouter` on the instance's ``class_of`` and one policy per pool at
    the pool's timing (the instance's ``policy``, budgeted as the capacities were measured)."""
    from slolab.heuristics.deployment import PlanRouter, PoolPolicies
    from slolab.heuristics.policies import Scheduler, make_policy
    from slolab.timing.presets import preset

    data = deployment_data(instance)
    present = [c for c, n in enumerate(plan.replicas) if n > 0]
    names = [data.configurations[c] for c in present]
    fleet = fleet_instance(instance, names, [plan.replicas[c] for c in present])
    fleet = dataclasses.replace(fleet, settings={**instance.settings, "plan": plan.to_dict()})
    shares = [[row[c] for c in present] for row in plan.fractions]
    for k, row in enumerate(shares):
        if data.rates[k] > 0 and not sum(row) > 0:
            raise ValueError(
                f"the plan sends class {data.classes[k]} only to configurations it buys no "
                "server of"
            )
    shares = [[v / sum(row) if sum(row) > 0 else 1.0 / len(row) for v in row] for row in shares]
    router = PlanRouter(instance.settings["class_of"], names, shares)
    policy = str(instance.settings.get("policy", "sarathi"))
    policies = PoolPolicies.build(
        names,
        lambda name: make_policy(policy, dataclasses.replace(instance, timing=preset(name))),
    )
    return Scheduler(policies, router, instance=fleet)


def result_scheduler(instance: Instance, result: Result) -> Scheduler:
    """The plan of an exact model's Result (``details["plan"]``) run online."""
    from slolab.models.deployment import DeploymentPlan

    return plan_scheduler(instance, DeploymentPlan.from_dict(result.details["plan"]))


def best_single_online(instance: Instance) -> Scheduler:
    """The cheapest single-configuration plan on the stored capacities, run online."""
    from slolab.heuristics.deployment import best_single

    plan = best_single(deployment_data(instance))
    if plan is None:
        raise ValueError(f"no configuration of {instance.name!r} serves every request class")
    return plan_scheduler(instance, plan)


def greedy_online(instance: Instance) -> Scheduler:
    """The greedy by cost per unit of capacity on the stored capacities, run online."""
    from slolab.heuristics.deployment import greedy_cost_per_capacity

    return plan_scheduler(instance, greedy_cost_per_capacity(deployment_data(instance)))


def fleet_cost(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """Price per hour of the fleet the engine ran (``instance``: the plan's fleet, from
    :func:`plan_scheduler`): the servers of each pool times its configuration's price; ``inf``
    when the plan breaks the capacity table (:func:`plan_violations`)."""
    from slolab.models.deployment import DeploymentPlan, plan_violations

    if "plan" not in instance.settings:
        raise ValueError(
            f"instance {instance.name!r} ran no deployment plan: only the problem's exact "
            "models and its heuristics (best-single, greedy) run a plan's fleet"
        )
    data = deployment_data(instance)
    plan = DeploymentPlan.from_dict(instance.settings["plan"])
    ran = {p.name: p.servers for p in instance.cluster.resolved_pools()}
    planned = {name: n for name, n in zip(data.configurations, plan.replicas, strict=True) if n}
    if ran != planned:
        raise ValueError(f"the fleet ran {ran}, its plan names {planned}")
    if plan_violations(data, plan):
        return math.inf
    price = dict(zip(data.configurations, data.prices, strict=True))
    return float(sum(price[name] * n for name, n in ran.items()))


PROBLEM = register_problem(
    Problem(
        name="deployment",
        title="servers per (GPU, TP) configuration and class shares within measured "
        "capacities; minimize the price per hour",
        objective=Objective(
            "cost_per_hour",
            "min",
            fleet_cost,
            "price per hour of the fleet the engine ran (inf when the plan exceeds the "
            "measured capacities)",
        ),
        builder="slolab.problems.deployment_capacity:deployment_instance",
        options=(
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
            *READ_OPTIONS,
            Option(
                "configurations",
                str,
                DEFAULT_CONFIGURATIONS,
                "comma-separated configurations (timing presets MODEL/GPU/tpN, 'slolab presets')",
            ),
            Option("target", float, 0.9, "attainment the capacities are measured at"),
            Option(
                "limit", int, 200, "use the first N requests of the trace", flag="--n", minimum=1
            ),
            Option(
                "traffic", float, 1.0, "arrivals time-scaled to this multiple of the cut's rate"
            ),
            Option(
                "stream_requests",
                int,
                400,
                "requests of each capacity probe (a class's own, repeated)",
                minimum=1,
            ),
            Option("seed", int, 0, "seed of the SLO draws and of the capacity probes", minimum=0),
            Option(
                "prices",
                str,
                None,
                "CSV of GPU prices per GPU-hour, columns gpu,usd_per_gpu_hour (default: the "
                "presets' prices)",
            ),
        ),
        models=("deployment",),
        aliases={"enumeration": "deployment:brute"},
        heuristics=(
            Heuristic(
                "best-single",
                "the cheapest fleet of one configuration carrying every class",
                policy=best_single_online,
                baseline=True,
            ),
            Heuristic(
                "greedy",
                "classes placed whole, largest first, where the fleet's price rises least "
                "(ties: cost per unit of capacity)",
                policy=greedy_online,
            ),
        ),
        docs="deployment.md",
        settings=("deployment", "class_of"),
        run_result=result_scheduler,
    )
)

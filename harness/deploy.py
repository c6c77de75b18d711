"""Deployment planning: which (GPU, TP) configurations, how many servers, for a trace and its SLOs.

The inputs (classes, configurations, prices, class targets, measured capacities) come from
:mod:`slolab.problems.deployment_capacity`; here they are solved, simulated and tightened:

1. :func:`slolab.models.deployment.solve_milp`: the cheapest fleet and class assignment.
2. :func:`close_loop`: the chosen fleet simulated on the trace as a mixed cluster
   (:func:`fleet_instance`: one pool per configuration, each with its own timing and KV
   capacity) under :class:`slolab.heuristics.deployment.PlanRouter`; a miss adds one server
   where the misses concentrate and solves again, for at most ``max_rounds`` rounds.
3. :func:`trim_fleet`: a fleet that met the target loses servers while its simulation still
   meets it, so that the saving compares two fleets neither of which the capacities
   over-provisioned.

:func:`plan_deployment` runs them all; ``slolab plan TRACE --model ...`` prints it.
docs/deployment.md gives the formulation and what each step guarantees.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.heuristics.deployment import (
    PlanRouter,
    PoolPolicies,
    greedy_cost_per_capacity,
    single_configuration_plans,
)
from slolab.instances.records import Instance
from slolab.models.deployment import (
    DeploymentData,
    DeploymentPlan,
    DeploymentResult,
    plan_cost,
    plan_violations,
    solve_milp,
)
from slolab.problems.deployment import fleet_instance
from slolab.problems.deployment_capacity import (
    DEFAULT_TIER_GROUPS,
    CapacityCache,
    CapacityTable,
    RequestClasses,
    capacity_data,
    class_targets,
    configuration_names,
    configuration_price,
    deployment_instance,
    measure_capacities,
    pool_policy,
    read_prices,
    reference_configuration,
    request_classes,
    timing_of,
    trace_instance,
)
from slolab.solvers.base import Status

__all__ = [
    "DEFAULT_TIER_GROUPS",
    "CapacityCache",
    "CapacityTable",
    "ClosedLoop",
    "DeploymentReport",
    "FleetRun",
    "LoopRound",
    "RequestClasses",
    "capacity_data",
    "class_targets",
    "cheapest_single",
    "close_loop",
    "configuration_names",
    "configuration_price",
    "deployment_instance",
    "fleet_instance",
    "fleet_text",
    "measure_capacities",
    "plan_deployment",
    "pool_policy",
    "read_prices",
    "reference_configuration",
    "request_classes",
    "simulate_fleet",
    "simulate_plan",
    "timing_of",
    "trace_instance",
    "trim_fleet",
    "verified_mixed",
]


@dataclass(frozen=True, slots=True)
class FleetRun:
    """One simulation of a plan's fleet.

    Attributes
    ----------
    attainment : float
        Attainment of the whole trace.
    pool_requests, pool_missed : dict of str to int
        Requests the router sent to each pool, and how many of them missed their SLO.
    rejected_kv : int
        Requests rejected because they never fit a server's KV cache.
    wall_s : float
        Wall time of the simulation.
    violations : tuple of str or None
        With ``checked=True``: what the independent checker (:func:`slolab.sim.check`) finds
        wrong with the run (empty: nothing); None when it was not asked.
    """

    attainment: float
    pool_requests: dict[str, int]
    pool_missed: dict[str, int]
    rejected_kv: int
    wall_s: float
    violations: tuple[str, ...] | None = None


def simulate_plan(
    instance: Instance,
    classes: RequestClasses,
    data: DeploymentData,
    plan: DeploymentPlan,
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    checked: bool = False,
) -> FleetRun:
    """The plan's fleet simulated on ``instance`` (:func:`simulate_fleet`)."""
    present = [c for c, n in enumerate(plan.replicas) if n > 0]
    return simulate_fleet(
        instance,
        classes,
        [data.configurations[c] for c in present],
        [plan.replicas[c] for c in present],
        [[row[c] for c in present] for row in plan.fractions],
        definition=definition,
        policy=policy,
        seed=seed,
        checked=checked,
    )


def simulate_fleet(
    instance: Instance,
    classes: RequestClasses,
    names: Sequence[str],
    replicas: Sequence[int],
    fractions: Sequence[Sequence[float]],
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    checked: bool = False,
) -> FleetRun:
    """``replicas[i]`` servers of configuration ``names[i]`` (:func:`fleet_instance`)
    simulated on ``instance`` under :class:`PlanRouter` (``fractions[k][i]``, each row
    rescaled to sum to 1) and one ``policy`` per pool (:func:`pool_policy`); with ``checked``
    the run is also given to the independent checker (:attr:`FleetRun.violations`)."""
    from slolab.sim import check, metrics, run

    start = time.perf_counter()
    fleet = fleet_instance(instance, names, replicas)
    shares = np.asarray(fractions, dtype=float)
    router = PlanRouter(classes.class_of, names, shares / shares.sum(axis=1, keepdims=True))
    policies = PoolPolicies.build(names, lambda name: pool_policy(instance, name, policy))
    outcome = run(fleet, policies, router, seed=seed, record_iterations=checked)
    violations = tuple(check(fleet, outcome)) if checked else None
    table = metrics.request_table(fleet, outcome)
    met = table[f"met_{definition}"].to_numpy(dtype=bool)
    pool_requests = {name: 0 for name in names}
    pool_missed = {name: 0 for name in names}
    for r, c in enumerate(router.chosen.tolist()):
        pool_requests[names[c]] += 1
        pool_missed[names[c]] += int(not met[r])
    rejected_kv = 0 if outcome.rejected_kv is None else int(outcome.rejected_kv.sum())
    return FleetRun(
        metrics.attainment_from_table(table, definition),
        pool_requests,
        pool_missed,
        rejected_kv,
        time.perf_counter() - start,
        violations,
    )


@dataclass(frozen=True, slots=True)
class LoopRound:
    """One round of the closed loop: the plan solved, and its simulation.

    Attributes
    ----------
    lower : tuple of int
        Least servers per configuration the round's solve was held to.
    result : DeploymentResult
        The plan adopted: the solve's, or with ``how == "added"`` the previous round's plan
        with one server more (its cost recomputed, its status FEASIBLE: not re-optimised).
    run : FleetRun or None
        Its simulation (None when the solve found no plan).
    how : str
        ``"solved"`` or ``"added"`` (see :func:`close_loop`).
    """

    lower: tuple[int, ...]
    result: DeploymentResult
    run: FleetRun | None
    how: str = "solved"


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """What the closed loop found.

    Attributes
    ----------
    configurations : tuple of str
        The configurations the plans' replica counts refer to.
    prices : tuple of float
        Their prices per server-hour.
    target : float
    rounds : tuple of LoopRound
    met : bool
        The last round's simulated attainment meets the target.
    """

    configurations: tuple[str, ...]
    prices: tuple[float, ...]
    target: float
    rounds: tuple[LoopRound, ...]
    met: bool

    def fleet_text(self) -> str:
        """``2 x llama2-7b/a100/tp1 + 1 x ...`` of the last round's plan."""
        plan = self.final.result.plan
        return "none" if plan is None else fleet_text(self.configurations, plan.replicas)

    @property
    def final(self) -> LoopRound:
        return self.rounds[-1]

    def summary(self) -> str:
        """One line: the verified answer, or how far the last round missed."""
        return loop_summary(self.rounds, self.met, self.target)


def loop_summary(rounds: Sequence[Any], met: bool, target: float) -> str:
    """One line on a closed loop's ``rounds`` (each with ``run``, None when no plan was
    found): the verified answer, or how far the last round missed ``target``. Both planners'
    loops (co-located and disaggregated) say it so."""
    run = rounds[-1].run
    if run is None:
        return f"no plan within the bounds after {len(rounds)} rounds"
    if met:
        return f"met: attainment {run.attainment:.3f} >= {target} after {len(rounds)} round(s)"
    return (
        f"not met after {len(rounds)} rounds: attainment {run.attainment:.3f}, "
        f"{target - run.attainment:.3f} short of {target}"
    )


def close_loop(
    instance: Instance,
    classes: RequestClasses,
    data: DeploymentData,
    *,
    target: float = 0.9,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    max_rounds: int = 8,
    lower: Sequence[int] | None = None,
) -> ClosedLoop:
    """Solve, simulate, tighten, until the simulated fleet meets ``target``.

    The first round solves :func:`slolab.models.deployment.solve_milp` (with ``lower`` bounds
    on the servers per configuration, if given) and simulates the plan
    (:func:`simulate_plan`). While the simulated attainment misses the target, the
    configuration whose pool missed the largest share of the requests sent to it (ties: more
    misses, then the earlier configuration) gets a lower bound of one server more than the
    plan gave it, and the MILP is solved again. The re-solved plan may move traffic between
    configurations (the bound changes the optimum's fractions, not only one count); when its
    simulation falls below the last round's, the last plan with that one server added and its
    fractions kept (feasible for the model, at most as dear as the bound allows more) is
    simulated too, and the round adopts whichever of the two attains more (``how``). It stops
    when the target is met, when the solve finds no plan, or after ``max_rounds`` rounds.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    bound = list(lower) if lower is not None else [0] * len(data.configurations)
    rounds: list[LoopRound] = []

    def simulate(plan: DeploymentPlan) -> FleetRun:
        if plan_violations(data, plan):
            raise RuntimeError(f"the plan breaks the model: {plan_violations(data, plan)}")
        return simulate_plan(
            instance, classes, data, plan, definition=definition, policy=policy, seed=seed
        )

    for _ in range(max_rounds):
        result = solve_milp(data, lower=bound)
        if result.plan is None or result.status not in (Status.OPTIMAL, Status.FEASIBLE):
            rounds.append(LoopRound(tuple(bound), result, None))
            return ClosedLoop(data.configurations, data.prices, target, tuple(rounds), False)
        found = simulate(result.plan)
        adopted = LoopRound(tuple(bound), result, found)
        last = rounds[-1] if rounds else None
        if (
            found.attainment < target
            and last is not None
            and last.run is not None
            and last.result.plan is not None
            and found.attainment < last.run.attainment
        ):
            replicas = [max(n, b) for n, b in zip(last.result.plan.replicas, bound, strict=True)]
            added = DeploymentPlan(tuple(replicas), last.result.plan.fractions)
            added_run = simulate(added)
            if added_run.attainment > found.attainment:
                cost = plan_cost(data, added)
                adopted = LoopRound(
                    tuple(bound),
                    DeploymentResult(
                        Status.FEASIBLE, added, cost, result.bound, 0.0, "closed-loop"
                    ),
                    added_run,
                    "added",
                )
        rounds.append(adopted)
        plan, run = adopted.result.plan, adopted.run
        assert plan is not None and run is not None
        if run.attainment >= target:
            return ClosedLoop(data.configurations, data.prices, target, tuple(rounds), True)
        worst = max(
            (name for name in run.pool_requests if run.pool_requests[name]),
            key=lambda name: (
                run.pool_missed[name] / run.pool_requests[name],
                run.pool_missed[name],
                -data.configurations.index(name),
            ),
        )
        c = data.configurations.index(worst)
        bound[c] = max(bound[c], plan.replicas[c] + 1)
    return ClosedLoop(data.configurations, data.prices, target, tuple(rounds), False)


def cheapest_single(
    instance: Instance,
    classes: RequestClasses,
    data: DeploymentData,
    *,
    target: float = 0.9,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    max_rounds: int = 8,
) -> tuple[ClosedLoop | None, tuple[tuple[int, ...], FleetRun] | None, int]:
    """The cheapest verified fleet of one configuration: its closed loop (over that
    configuration alone), the loop's fleet trimmed (:func:`trim_fleet`, indexed as the loop),
    and how many configurations were verified.

    The configurations that can carry every class go in order of their plan's cost on the
    measured capacities (:func:`single_configuration_plans`; ties: the earlier one). Each is
    simulated, tightened (:func:`close_loop`) and trimmed (:func:`trim_fleet`: its fewest
    servers meeting the target, attainment assumed non-increasing as servers go) unless one
    of its servers alone costs at least the cheapest verified fleet so far, so that no fleet
    of it can be cheaper. A larger grid holds every configuration of a smaller one, so its
    single answer is never dearer. (The capacities only order the candidates: a
    configuration whose measured capacity asks for more servers than the simulation needs
    is still verified.) ``(None, None, n)`` when none met the target.
    """
    plans = single_configuration_plans(data)
    order = sorted(plans, key=lambda c: (plan_cost(data, plans[c]), c))
    best: tuple[ClosedLoop, tuple[tuple[int, ...], FleetRun]] | None = None
    verified = 0
    for c in order:
        if best is not None and data.prices[c] >= _trimmed_cost(*best):
            continue
        alone = DeploymentData(
            (data.configurations[c],),
            (data.prices[c],),
            data.classes,
            data.rates,
            (data.capacity[c],),
        )
        loop = close_loop(
            instance,
            classes,
            alone,
            target=target,
            definition=definition,
            policy=policy,
            seed=seed,
            max_rounds=max_rounds,
        )
        verified += 1
        if not loop.met:
            continue
        fleet = trim_fleet(instance, classes, loop, definition=definition, policy=policy, seed=seed)
        if best is None or _trimmed_cost(loop, fleet) < _trimmed_cost(*best):
            best = (loop, fleet)
    if best is None:
        return None, None, verified
    return best[0], best[1], verified


def trim_fleet(
    instance: Instance,
    classes: RequestClasses,
    loop: ClosedLoop,
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> tuple[tuple[int, ...], FleetRun]:
    """The met loop's last fleet with servers removed while the simulation still meets the
    target: one server at a time, from the dearest configuration that has more than one
    (the plan's fractions kept), the first removal that still meets is made and the search
    starts again; it ends when no single removal meets the target. For one configuration
    this is the fewest servers meeting the target (attainment assumed non-increasing as
    servers go).

    The loop only adds servers to what the capacities asked for, and the capacities'
    rounding can ask for more than the trace needs; both fleets the saving compares are
    trimmed the same way, so neither side is a fleet the capacities over-provisioned.
    """
    last = loop.final
    if not loop.met or last.run is None or last.result.plan is None:
        raise ValueError("trim_fleet needs a loop that met its target")
    plan = last.result.plan
    present = [c for c, n in enumerate(plan.replicas) if n > 0]
    names = [loop.configurations[c] for c in present]
    fractions = [[row[c] for c in present] for row in plan.fractions]
    prices = {name: price for name, price in zip(loop.configurations, loop.prices, strict=True)}
    replicas = [plan.replicas[c] for c in present]
    best = last.run
    while True:
        for i in sorted(range(len(names)), key=lambda i: (-prices[names[i]], i)):
            if replicas[i] <= 1:  # a pool the plan sends traffic to keeps a server
                continue
            fewer = [n - 1 if j == i else n for j, n in enumerate(replicas)]
            found = simulate_fleet(
                instance,
                classes,
                names,
                fewer,
                fractions,
                definition=definition,
                policy=policy,
                seed=seed,
            )
            if found.attainment >= loop.target:
                replicas, best = fewer, found
                break
        else:
            break
    full = [0] * len(loop.configurations)
    for c, n in zip(present, replicas, strict=True):
        full[c] = n
    return tuple(full), best


def _trimmed_cost(
    loop: ClosedLoop | None, trimmed: tuple[tuple[int, ...], FleetRun] | None
) -> float:
    if loop is None or not loop.met:
        return math.inf
    return _fleet_cost(loop.prices, trimmed)


def _fleet_cost(prices: Sequence[float], trimmed: tuple[tuple[int, ...], FleetRun] | None) -> float:
    """``sum_c p_c n_c`` of a verified fleet (inf: none)."""
    if trimmed is None:
        return math.inf
    return float(sum(n * p for n, p in zip(trimmed[0], prices, strict=True)))


def verified_mixed(
    configurations: Sequence[str],
    prices: Sequence[float],
    mixed: tuple[tuple[int, ...], FleetRun] | None,
    single: ClosedLoop | None,
    single_trimmed: tuple[tuple[int, ...], FleetRun] | None,
) -> tuple[tuple[tuple[int, ...], FleetRun] | None, str]:
    """The mixed answer: the cheaper of the mixed loop's verified fleet ``mixed`` and the
    best single configuration's (``single_trimmed``, of the loop ``single`` over one of
    ``configurations``), with where it came from (``"mixed"``, ``"single"``).

    A fleet of one configuration is a mixed fleet too; both were simulated and met the
    target, so the saving of the answer over the single fleet is never negative. Equal
    costs on the measured capacities can hide fleets that simulate apart (two H100s at TP 1
    or one at TP 2); the MILP cannot tell them apart, the simulations can. A tie keeps the
    mixed loop's fleet.
    """
    if single is None or not single.met or single_trimmed is None:
        return mixed, "mixed"
    alone = single_trimmed[0]
    full = [0] * len(configurations)
    for name, n in zip(single.configurations, alone, strict=True):
        full[list(configurations).index(name)] = n
    candidate = (tuple(full), single_trimmed[1])
    if _fleet_cost(prices, candidate) < _fleet_cost(prices, mixed):
        return candidate, "single"
    return mixed, "mixed"


def fleet_text(configurations: Sequence[str], replicas: Sequence[int]) -> str:
    """``2 x llama2-7b/a100/tp1 + 1 x ...``."""
    return " + ".join(
        f"{n} x {name}" for name, n in zip(configurations, replicas, strict=True) if n > 0
    )


@dataclass(frozen=True, slots=True)
class DeploymentReport:
    """The planner's answer for one model and configuration grid.

    Attributes
    ----------
    data : DeploymentData
        Classes, prices and measured capacities.
    capacities : CapacityTable
    refused : dict of str to str
        Configurations of the grid the data cannot support, and why.
    single : dict of str to int
        Per configuration that serves every class: the fewest servers carrying all the traffic.
    mixed : ClosedLoop
        The mixed optimum, closed-loop.
    best_single : ClosedLoop or None
        The closed loop (on its own) of the configuration whose verified fleet is the cheapest
        of one configuration (:func:`cheapest_single`).
    mixed_trimmed, single_trimmed : (tuple of int, FleetRun) or None
        The verified fleets: replicas per configuration of the loop and the run that met the
        target (None when none met it). ``single_trimmed`` is the best single loop's fleet
        trimmed (:func:`trim_fleet`); ``mixed_trimmed`` is the cheaper of the mixed loop's
        fleet trimmed and the best single one (a single configuration is a mixed fleet too),
        the mixed loop's on a tie (:attr:`mixed_from` says which).
    mixed_from : str
        ``"mixed"`` (the mixed loop's fleet) or ``"single"`` (the verified best single fleet,
        cheaper than the mixed loop's or the only one that met the target).
    mixed_loop_trimmed : (tuple of int, FleetRun) or None
        The mixed loop's own fleet trimmed (None when the loop did not meet the target).
    single_verified : int
        Configurations whose single fleet was simulated (:func:`cheapest_single`).
    greedy_cost : float
        Cost of :func:`greedy_cost_per_capacity` ($/h) on the measured capacities.
    best_single_cost : float
        Cost of the cheapest single-configuration plan on the measured capacities
        (:func:`slolab.heuristics.deployment.best_single`; inf: none).
    optimum_cost : float
        The MILP's cost on the measured capacities (first round).
    optimum_status : str
        Its status (``OPTIMAL`` when HiGHS proved it).
    wall_s : float
        Wall time of the whole plan.
    """

    data: DeploymentData
    capacities: CapacityTable
    refused: dict[str, str]
    single: dict[str, int]
    mixed: ClosedLoop
    best_single: ClosedLoop | None
    greedy_cost: float
    best_single_cost: float
    optimum_cost: float
    optimum_status: str
    wall_s: float
    mixed_trimmed: tuple[tuple[int, ...], FleetRun] | None = None
    single_trimmed: tuple[tuple[int, ...], FleetRun] | None = None
    mixed_from: str = "mixed"
    mixed_loop_trimmed: tuple[tuple[int, ...], FleetRun] | None = None
    single_verified: int = 0

    @property
    def mixed_cost(self) -> float:
        """The verified mixed fleet's cost ($/h), trimmed (inf when none met the target)."""
        return _fleet_cost(self.data.prices, self.mixed_trimmed)

    @property
    def mixed_plan(self) -> DeploymentPlan | None:
        """The verified mixed fleet with the fractions it was simulated with (None: none met
        the target): the mixed loop's last fractions, or, when the answer is the best single
        fleet (:attr:`mixed_from`), all of every class on its configuration."""
        if self.mixed_trimmed is None:
            return None
        replicas = self.mixed_trimmed[0]
        if self.mixed_from == "single":
            row = tuple(1.0 if n > 0 else 0.0 for n in replicas)
            return DeploymentPlan(replicas, tuple(row for _ in self.data.classes))
        plan = self.mixed.final.result.plan
        assert plan is not None
        return DeploymentPlan(replicas, plan.fractions)

    @property
    def single_cost(self) -> float:
        """The verified best single configuration's cost ($/h), trimmed (inf when not met)."""
        return _trimmed_cost(self.best_single, self.single_trimmed)

    @property
    def saving(self) -> float:
        """``1 - mixed / single`` of the verified, trimmed fleets (NaN unless both met the
        target)."""
        if math.isinf(self.mixed_cost) or math.isinf(self.single_cost):
            return math.nan
        return 1.0 - self.mixed_cost / self.single_cost

    def to_record(self) -> dict[str, Any]:
        """The plan's figures as one flat row (a sweep's ``deploy`` row, a benchmark's row).

        Keys: ``configurations`` (how many the model holds: those serving some class),
        ``classes`` (how many), ``refused`` (name -> why, for the grid's others);
        per side (``single_``: the best single configuration, ``mixed_``: the mixed optimum)
        ``*_loop_fleet`` (the closed loop's last fleet), ``*_met``, ``*_rounds``, ``*_fleet``
        (trimmed; ``"none"`` when the loop did not meet the target), ``*_cost`` ($/h, inf when
        not met) and ``*_attainment`` (of the trimmed fleet, NaN when not met), the mixed
        side's being the cheaper verified fleet (:func:`verified_mixed`); ``mixed_from``
        (``"mixed"`` or ``"single"``: which loop that fleet came from); ``saving``;
        on the measured capacities ``optimum_cost`` ($/h), ``optimum_status``,
        ``greedy_gap`` and ``best_single_gap`` (relative to the optimum); ``capacity_probes``
        and ``capacity_early`` (the capacity simulations run, and those stopped early);
        ``capacity_reused`` and ``capacity_saved`` (searches read from a
        :class:`CapacityCache`, and the simulations that saved).
        """
        optimum = self.optimum_cost

        def gap(cost: float) -> float:
            return cost / optimum - 1.0 if math.isfinite(cost) else math.nan

        record: dict[str, Any] = {
            "configurations": len(self.data.configurations),
            "classes": len(self.data.classes),
            "refused": dict(self.refused),
        }
        sides = (
            ("single", self.best_single, self.single_trimmed, self.single_cost),
            ("mixed", self.mixed, self.mixed_trimmed, self.mixed_cost),
        )
        for side, loop, trimmed, cost in sides:
            record[f"{side}_loop_fleet"] = "none" if loop is None else loop.fleet_text()
            record[f"{side}_met"] = loop is not None and loop.met
            record[f"{side}_rounds"] = 0 if loop is None else len(loop.rounds)
            found = None if loop is None else _trimmed_dict(loop, trimmed)
            record[f"{side}_fleet"] = "none" if found is None else found["fleet"]
            record[f"{side}_cost"] = cost
            record[f"{side}_attainment"] = math.nan if found is None else found["attainment"]
        record.update(
            mixed_from=self.mixed_from,
            saving=self.saving,
            optimum_cost=optimum,
            optimum_status=self.optimum_status,
            greedy_gap=gap(self.greedy_cost),
            best_single_gap=gap(self.best_single_cost),
            capacity_probes=self.capacities.probes,
            capacity_early=self.capacities.early,
            capacity_reused=self.capacities.reused,
            capacity_saved=self.capacities.saved,
        )
        return record

    def to_dict(self) -> dict[str, Any]:
        """What ``slolab plan --model ... --json`` prints."""

        def loop_dict(loop: ClosedLoop | None) -> dict[str, Any] | None:
            if loop is None:
                return None
            last = loop.final
            return {
                "met": loop.met,
                "summary": loop.summary(),
                "fleet": loop.fleet_text(),
                "cost_per_hour": last.result.cost if last.result.plan is not None else None,
                "attainment": None if last.run is None else last.run.attainment,
                "rounds": [
                    {
                        "lower": list(r.lower),
                        "status": r.result.status.value,
                        "how": r.how,
                        "cost_per_hour": r.result.cost if r.result.plan is not None else None,
                        "replicas": None if r.result.plan is None else list(r.result.plan.replicas),
                        "attainment": None if r.run is None else r.run.attainment,
                        "pool_requests": None if r.run is None else r.run.pool_requests,
                        "pool_missed": None if r.run is None else r.run.pool_missed,
                    }
                    for r in loop.rounds
                ],
            }

        saving = self.saving
        return {
            "configurations": [
                {
                    "name": name,
                    "price_per_hour": price,
                    "replicas": self.single.get(name),
                    "cost_per_hour": None if name not in self.single else self.single[name] * price,
                }
                for name, price in zip(self.data.configurations, self.data.prices, strict=True)
            ],
            "refused": self.refused,
            "classes": [
                {"name": name, "rate": rate, "requests": None}
                for name, rate in zip(self.data.classes, self.data.rates, strict=True)
            ],
            "data": self.data.to_dict(),
            "class_targets": list(self.capacities.class_targets),
            "capacity_probes": self.capacities.probes,
            "capacity_early": self.capacities.early,
            "capacity_searches": len(self.data.configurations) * len(self.data.classes),
            "capacity_reused": self.capacities.reused,
            "capacity_saved": self.capacities.saved,
            "capacity_wall_s": self.capacities.wall_s,
            "optimum_cost_per_hour": self.optimum_cost,
            "optimum_status": self.optimum_status,
            "best_single_cost_per_hour": None
            if math.isinf(self.best_single_cost)
            else self.best_single_cost,
            "greedy_cost_per_hour": self.greedy_cost,
            "mixed": loop_dict(self.mixed),
            "best_single": loop_dict(self.best_single),
            "mixed_trimmed": _trimmed_dict(self.mixed, self.mixed_trimmed),
            "mixed_from": self.mixed_from,
            "mixed_loop_trimmed": _trimmed_dict(self.mixed, self.mixed_loop_trimmed),
            "best_single_trimmed": _trimmed_dict(self.best_single, self.single_trimmed),
            "saving": None if math.isnan(saving) else saving,
            "wall_s": self.wall_s,
        }


def _trimmed_dict(
    loop: ClosedLoop | None, trimmed: tuple[tuple[int, ...], FleetRun] | None
) -> dict[str, Any] | None:
    if loop is None or trimmed is None:
        return None
    return {
        "fleet": fleet_text(loop.configurations, trimmed[0]),
        "replicas": list(trimmed[0]),
        "cost_per_hour": _fleet_cost(loop.prices, trimmed),
        "attainment": trimmed[1].attainment,
    }


def _feasible_cost(data: DeploymentData, plan: DeploymentPlan) -> float:
    """A heuristic's cost on the capacities: its fleet's price, or inf when the plan breaks
    them (a cost below the MILP's proved optimum is then never printed)."""
    return math.inf if plan_violations(data, plan) else plan_cost(data, plan)


def plan_deployment(
    instance: Instance,
    configurations: Sequence[str],
    *,
    target: float = 0.9,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    prices: dict[str, float] | None = None,
    refused: dict[str, str] | None = None,
    classes: RequestClasses | None = None,
    max_rounds: int = 8,
    progress: bool = False,
    cache: CapacityCache | None = None,
    arrivals: str = "poisson",
) -> DeploymentReport:
    """Classes, capacities, the mixed optimum and the best single configuration, each fleet
    simulated and tightened until it meets ``target`` (:func:`close_loop`); capacities already
    in ``cache`` are read, not measured again (:class:`CapacityCache`). ``arrivals``: how the
    capacity probes' arrivals are drawn (``"poisson"``, or ``"trace"``: the class's own
    arrival pattern thinned to one server's share,
    :func:`slolab.problems.deployment_capacity.probe_arrivals`)."""
    start = time.perf_counter()
    classes = classes or request_classes(instance)
    table = measure_capacities(
        instance,
        classes,
        configurations,
        target=target,
        definition=definition,
        policy=policy,
        seed=seed,
        progress=progress,
        cache=cache,
        arrivals=arrivals,
    )
    refused = dict(refused or {})
    data = capacity_data(table, classes, target, prices, refused)
    plans = single_configuration_plans(data)
    single = {data.configurations[c]: plan.replicas[c] for c, plan in plans.items()}
    optimum = solve_milp(data)
    mixed = close_loop(
        instance,
        classes,
        data,
        target=target,
        definition=definition,
        policy=policy,
        seed=seed,
        max_rounds=max_rounds,
    )
    mixed_trimmed = None
    if mixed.met:
        mixed_trimmed = trim_fleet(
            instance, classes, mixed, definition=definition, policy=policy, seed=seed
        )
    single_loop, single_trimmed, single_verified = cheapest_single(
        instance,
        classes,
        data,
        target=target,
        definition=definition,
        policy=policy,
        seed=seed,
        max_rounds=max_rounds,
    )
    answer, mixed_from = verified_mixed(
        data.configurations, data.prices, mixed_trimmed, single_loop, single_trimmed
    )
    return DeploymentReport(
        data=data,
        capacities=table,
        refused=refused,
        single=single,
        mixed=mixed,
        best_single=single_loop,
        greedy_cost=_feasible_cost(data, greedy_cost_per_capacity(data)),
        best_single_cost=min(
            (_feasible_cost(data, plan) for plan in plans.values()), default=math.inf
        ),
        optimum_cost=optimum.cost,
        optimum_status=optimum.status.value,
        wall_s=time.perf_counter() - start,
        mixed_trimmed=answer,
        single_trimmed=single_trimmed,
        mixed_from=mixed_from,
        mixed_loop_trimmed=mixed_trimmed,
        single_verified=single_verified,
    )

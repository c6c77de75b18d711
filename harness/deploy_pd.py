"""Deployment planning, disaggregated: prefill and decode pools sized apart, each of its own
(GPU, TP) configurations, checked by simulating the fleet on the trace and tightened until it
meets the target; beside it, or instead, the co-located answer (:mod:`slolab.harness.deploy`).

1. :func:`slolab.problems.deployment_pd.measure_pd_capacities`: both sides' capacities.
2. :func:`slolab.models.deployment_pd.solve_pd_milp`: the cheapest plan on them.
3. :func:`close_pd_loop`: the plan's fleet simulated on the trace (KV transfers queued per
   prefill server's link); a miss adds one server to the pool whose requests missed most
   (a TTFT miss is the prefill pool's, a later token's the decode pool's) and solves again.
4. :func:`trim_pd_fleet`: servers removed while the simulation still meets the target.

:func:`plan_pd_deployment` runs them all; :func:`plan_modes` runs the co-located planner, the
disaggregated one or both and names the cheaper verified answer. ``slolab plan TRACE --model
... --mode pd`` prints it. docs/deployment.md, "Disaggregated".
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.heuristics.deployment_pd import pd_best_pair, pd_greedy
from slolab.instances.records import Instance
from slolab.models.deployment import DeploymentPlan
from slolab.models.deployment_pd import (
    PDData,
    PDPlan,
    PDResult,
    pd_plan_cost,
    pd_plan_violations,
    solve_pd_milp,
)
from slolab.problems.deployment_capacity import (
    RequestClasses,
    check_probe_arrivals,
    request_classes,
)
from slolab.problems.deployment_pd import (
    DEFAULT_LINK,
    PDCapacityTable,
    measure_pd_capacities,
    pd_capacity_data,
    pd_scheduler,
)
from slolab.solvers.base import Status

__all__ = [
    "DEFAULT_LINK",
    "MODES",
    "check_link",
    "modes_dict",
    "print_modes",
    "ModesAnswer",
    "PDFleetRun",
    "PDLoop",
    "PDReport",
    "PDRound",
    "close_pd_loop",
    "modes_record",
    "pd_fleet_text",
    "plan_modes",
    "plan_pd_deployment",
    "simulate_pd_plan",
    "trim_pd_fleet",
]

#: ``--mode``: co-located only, disaggregated only, or both side by side.
MODES = ("co", "pd", "both")


@dataclass(frozen=True, slots=True)
class PDFleetRun:
    """One simulation of a disaggregated fleet.

    Attributes
    ----------
    attainment : float
        Attainment of the whole trace.
    ttft_attainment : float
        Share of the requests whose first token met its TTFT SLO.
    pool_requests, pool_missed : dict of str to int
        Per pool (``P:config``, ``D:config``): the requests it served, and the misses charged
        to it (a TTFT miss to the prefill pool, a later token's miss to the decode pool).
    wall_s : float
    violations : tuple of str or None
        The independent checker's findings with ``checked=True`` (empty: none).
    """

    attainment: float
    ttft_attainment: float
    pool_requests: dict[str, int]
    pool_missed: dict[str, int]
    wall_s: float
    violations: tuple[str, ...] | None = None


def simulate_pd_plan(
    instance: Instance,
    classes: RequestClasses,
    data: PDData,
    plan: PDPlan,
    *,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    checked: bool = False,
) -> PDFleetRun:
    """The plan's fleet (:func:`slolab.problems.deployment_pd.pd_scheduler`) simulated on
    ``instance``; with ``checked`` the run is also given to :func:`slolab.sim.check`."""
    from slolab.sim import check, metrics

    start = time.perf_counter()
    scheduler = pd_scheduler(instance, classes.class_of, data, plan, link=link, policy=policy)
    fleet = scheduler.on(instance)
    outcome = scheduler.run(instance, seed=seed, record_iterations=checked)
    violations = tuple(check(fleet, outcome)) if checked else None
    table = metrics.request_table(fleet, outcome)
    met = table[f"met_{definition}"].to_numpy(dtype=bool)
    ttft = table["ttft_s"].to_numpy(dtype=float)
    slo = np.asarray(fleet.workload["ttft_slo_s"], dtype=float)
    ttft_ok = ~(ttft > slo) & np.isfinite(ttft) | np.isnan(slo)
    names = [p.name for p in fleet.cluster.resolved_pools()]
    pool_of = np.asarray(outcome.server_pool, dtype=np.int64)
    requests = dict.fromkeys(names, 0)
    missed = dict.fromkeys(names, 0)
    for r in range(fleet.n_requests):
        p_server, d_server = int(outcome.prefill_server[r]), int(outcome.server[r])
        if p_server >= 0:
            requests[names[pool_of[p_server]]] += 1
        if d_server >= 0 and d_server != p_server:
            requests[names[pool_of[d_server]]] += 1
        if met[r]:
            continue
        if not ttft_ok[r] or d_server < 0 or d_server == p_server:
            if p_server >= 0:
                missed[names[pool_of[p_server]]] += 1
        else:
            missed[names[pool_of[d_server]]] += 1
    return PDFleetRun(
        metrics.attainment_from_table(table, definition),
        float(np.mean(ttft_ok)) if len(ttft_ok) else math.nan,
        requests,
        missed,
        time.perf_counter() - start,
        violations,
    )


@dataclass(frozen=True, slots=True)
class PDRound:
    """One round of the loop: the bounds it was solved under, the plan adopted (the solve's,
    or with ``how == "added"`` the last plan with one server more), its simulation."""

    lower_prefill: tuple[int, ...]
    lower_decode: tuple[int, ...]
    result: PDResult
    run: PDFleetRun | None
    how: str = "solved"


def pd_fleet_text(data: PDData, plan: PDPlan) -> str:
    """``prefill 2 x llama2-7b/h100/tp1 | decode 1 x ...``."""

    def side(names: Sequence[str], replicas: Sequence[int]) -> str:
        return " + ".join(f"{n} x {name}" for name, n in zip(names, replicas, strict=True) if n)

    return (
        f"prefill {side(data.prefill.configurations, plan.prefill.replicas)} | "
        f"decode {side(data.decode.configurations, plan.decode.replicas)}"
    )


@dataclass(frozen=True, slots=True)
class PDLoop:
    """What the closed loop found: its rounds and whether the last met the target."""

    data: PDData
    target: float
    rounds: tuple[PDRound, ...]
    met: bool

    @property
    def final(self) -> PDRound:
        return self.rounds[-1]

    def summary(self) -> str:
        """One line: the verified answer, or how far the last round missed."""
        from slolab.harness.deploy import loop_summary

        return loop_summary(self.rounds, self.met, self.target)


def _with_server(plan: PDPlan, side: str, c: int) -> PDPlan:
    part = plan.prefill if side == "prefill" else plan.decode
    replicas = list(part.replicas)
    replicas[c] += 1
    grown = DeploymentPlan(tuple(replicas), part.fractions)
    return PDPlan(grown, plan.decode) if side == "prefill" else PDPlan(plan.prefill, grown)


def close_pd_loop(
    instance: Instance,
    classes: RequestClasses,
    data: PDData,
    *,
    target: float = 0.9,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    max_rounds: int = 8,
) -> PDLoop:
    """Solve, simulate, tighten, until the simulated fleet meets ``target`` (at most
    ``max_rounds`` rounds).

    While the simulation misses, the pool whose requests missed the largest share (ties: more
    misses, then prefill before decode, then the earlier configuration) gets a lower bound of
    one server more than the plan gave it, and the MILP is solved again. When the re-solved
    plan simulates worse than the last round's, the last plan with that server added (its
    fractions kept) is simulated too and the better of the two is adopted (``how``).
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    lower = {
        "prefill": [0] * len(data.prefill.configurations),
        "decode": [0] * len(data.decode.configurations),
    }
    rounds: list[PDRound] = []

    def simulate(plan: PDPlan) -> PDFleetRun:
        broken = pd_plan_violations(data, plan)
        if broken:
            raise RuntimeError(f"the plan breaks the model: {broken}")
        return simulate_pd_plan(
            instance,
            classes,
            data,
            plan,
            link=link,
            definition=definition,
            policy=policy,
            seed=seed,
        )

    grown: tuple[str, int] | None = None
    for _ in range(max_rounds):
        result = solve_pd_milp(data, lower_prefill=lower["prefill"], lower_decode=lower["decode"])
        bounds = (tuple(lower["prefill"]), tuple(lower["decode"]))
        if result.plan is None or result.status not in (Status.OPTIMAL, Status.FEASIBLE):
            rounds.append(PDRound(*bounds, result, None))
            return PDLoop(data, target, tuple(rounds), False)
        found = simulate(result.plan)
        adopted = PDRound(*bounds, result, found)
        last = rounds[-1] if rounds else None
        if (
            grown is not None
            and found.attainment < target
            and last is not None
            and last.run is not None
            and last.result.plan is not None
            and found.attainment < last.run.attainment
        ):
            added = _with_server(last.result.plan, *grown)
            added_run = simulate(added)
            if added_run.attainment > found.attainment:
                cost = pd_plan_cost(data, added)
                adopted = PDRound(
                    *bounds,
                    PDResult(Status.FEASIBLE, added, cost, result.bound, 0.0, "closed-loop"),
                    added_run,
                    "added",
                )
        rounds.append(adopted)
        plan, run = adopted.result.plan, adopted.run
        assert plan is not None and run is not None
        if run.attainment >= target:
            return PDLoop(data, target, tuple(rounds), True)
        grown = _worst_pool(data, plan, run)
        side, c = grown
        part = plan.prefill if side == "prefill" else plan.decode
        lower[side][c] = max(lower[side][c], part.replicas[c] + 1)
    return PDLoop(data, target, tuple(rounds), False)


def _worst_pool(data: PDData, plan: PDPlan, run: PDFleetRun) -> tuple[str, int]:
    """The (side, configuration) whose pool missed the largest share of its requests."""
    candidates = []
    for order, (side, tag, part, sided) in enumerate(
        (
            ("prefill", "P", data.prefill, plan.prefill),
            ("decode", "D", data.decode, plan.decode),
        )
    ):
        for c, (name, n) in enumerate(zip(part.configurations, sided.replicas, strict=True)):
            pool = f"{tag}:{name}"
            if n and run.pool_requests.get(pool):
                share = run.pool_missed[pool] / run.pool_requests[pool]
                candidates.append(((share, run.pool_missed[pool], -order, -c), (side, c)))
    return max(candidates)[1]


def trim_pd_fleet(
    instance: Instance,
    classes: RequestClasses,
    loop: PDLoop,
    *,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> tuple[PDPlan, PDFleetRun] | None:
    """The loop's last fleet (when it met the target) with servers removed one at a time,
    from the dearest configuration of either side with more than one server, while the
    simulation still meets the target (a pool the plan sends traffic to keeps one server);
    None when the loop did not meet the target."""
    if not loop.met:
        return None
    data = loop.data
    plan, run = loop.final.result.plan, loop.final.run
    assert plan is not None and run is not None
    while True:
        options = []
        for side, part, sided in (
            ("prefill", data.prefill, plan.prefill),
            ("decode", data.decode, plan.decode),
        ):
            for c, n in enumerate(sided.replicas):
                if n > 1:
                    options.append((-part.prices[c], side, c))
        improved = False
        for _, side, c in sorted(options):
            sized = plan.prefill if side == "prefill" else plan.decode
            replicas = list(sized.replicas)
            replicas[c] -= 1
            smaller = DeploymentPlan(tuple(replicas), sized.fractions)
            candidate = (
                PDPlan(smaller, plan.decode) if side == "prefill" else PDPlan(plan.prefill, smaller)
            )
            found = simulate_pd_plan(
                instance,
                classes,
                data,
                candidate,
                link=link,
                definition=definition,
                policy=policy,
                seed=seed,
            )
            if found.attainment >= loop.target:
                plan, run, improved = candidate, found, True
                break
        if not improved:
            return plan, run


@dataclass(frozen=True, slots=True)
class PDReport:
    """The disaggregated planner's answer.

    Attributes
    ----------
    data : PDData
    capacities : PDCapacityTable
    refused : dict of str to str
    loop : PDLoop
    trimmed : (PDPlan, PDFleetRun) or None
        The verified fleet, trimmed (None when the loop did not meet the target).
    optimum : PDResult
        The MILP on the measured capacities (first round).
    greedy_cost, best_pair_cost : float
        :func:`pd_greedy` and :func:`pd_best_pair` on the measured capacities ($/h; inf: none).
    wall_s : float
    """

    data: PDData
    capacities: PDCapacityTable
    refused: dict[str, str]
    loop: PDLoop
    trimmed: tuple[PDPlan, PDFleetRun] | None
    optimum: PDResult
    greedy_cost: float
    best_pair_cost: float
    wall_s: float
    link: str = DEFAULT_LINK

    @property
    def cost(self) -> float:
        """The verified, trimmed fleet's price per hour (inf when not met)."""
        return math.inf if self.trimmed is None else pd_plan_cost(self.data, self.trimmed[0])

    @property
    def first_attainment(self) -> float:
        """Simulated attainment of the MILP's first fleet (NaN without one)."""
        run = self.loop.rounds[0].run
        return math.nan if run is None else run.attainment

    def to_record(self) -> dict[str, Any]:
        """One flat row: ``pd_*`` keys (fleet, cost, attainment, rounds, first-round
        attainment and cost, MILP status and cost, greedy and best-pair gaps, probes)."""
        optimum = self.optimum.cost

        def gap(cost: float) -> float:
            return cost / optimum - 1.0 if math.isfinite(cost) and optimum > 0 else math.nan

        first = self.loop.rounds[0]
        return {
            "pd_link": self.link,
            "pd_met": self.loop.met,
            "pd_rounds": len(self.loop.rounds),
            "pd_first_cost": first.result.cost,
            "pd_first_attainment": self.first_attainment,
            "pd_loop_fleet": "none"
            if self.loop.final.result.plan is None
            else pd_fleet_text(self.data, self.loop.final.result.plan),
            "pd_fleet": "none"
            if self.trimmed is None
            else pd_fleet_text(self.data, self.trimmed[0]),
            "pd_cost": self.cost,
            "pd_attainment": math.nan if self.trimmed is None else self.trimmed[1].attainment,
            "pd_optimum_cost": optimum,
            "pd_optimum_status": self.optimum.status.value,
            "pd_greedy_gap": gap(self.greedy_cost),
            "pd_best_pair_gap": gap(self.best_pair_cost),
            "pd_capacity_probes": self.capacities.probes,
            "pd_capacity_early": self.capacities.early,
            "pd_wall_s": self.wall_s,
        }

    def to_dict(self) -> dict[str, Any]:
        """What ``slolab plan --mode pd --json`` prints for the disaggregated side."""

        def plan_dict(plan: PDPlan | None) -> dict[str, Any] | None:
            if plan is None:
                return None
            return {
                "fleet": pd_fleet_text(self.data, plan),
                "prefill": dict(
                    zip(self.data.prefill.configurations, plan.prefill.replicas, strict=True)
                ),
                "decode": dict(
                    zip(self.data.decode.configurations, plan.decode.replicas, strict=True)
                ),
                "cost_per_hour": pd_plan_cost(self.data, plan),
            }

        targets = self.capacities.targets
        return {
            "link": self.link,
            "link_bytes_per_s": dict(
                zip(self.data.prefill.configurations, self.data.link_bandwidth, strict=True)
            ),
            "refused": self.refused,
            "prefill_targets": list(targets.prefill_target),
            "decode_targets": list(targets.decode_target),
            "data": self.data.to_dict(),
            "capacity_probes": self.capacities.probes,
            "capacity_early": self.capacities.early,
            "optimum_cost_per_hour": self.optimum.cost,
            "optimum_status": self.optimum.status.value,
            "greedy_cost_per_hour": None if math.isinf(self.greedy_cost) else self.greedy_cost,
            "best_pair_cost_per_hour": None
            if math.isinf(self.best_pair_cost)
            else self.best_pair_cost,
            "met": self.loop.met,
            "summary": self.loop.summary(),
            "rounds": [
                {
                    "lower_prefill": list(r.lower_prefill),
                    "lower_decode": list(r.lower_decode),
                    "status": r.result.status.value,
                    "how": r.how,
                    "plan": plan_dict(r.result.plan),
                    "attainment": None if r.run is None else r.run.attainment,
                    "ttft_attainment": None if r.run is None else r.run.ttft_attainment,
                    "pool_requests": None if r.run is None else r.run.pool_requests,
                    "pool_missed": None if r.run is None else r.run.pool_missed,
                }
                for r in self.loop.rounds
            ],
            "trimmed": None
            if self.trimmed is None
            else {
                **(plan_dict(self.trimmed[0]) or {}),
                "attainment": self.trimmed[1].attainment,
                "ttft_attainment": self.trimmed[1].ttft_attainment,
            },
            "wall_s": self.wall_s,
        }


def plan_pd_deployment(
    instance: Instance,
    configurations: Sequence[str],
    *,
    decode_configurations: Sequence[str] | None = None,
    target: float = 0.9,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    prices: dict[str, float] | None = None,
    classes: RequestClasses | None = None,
    max_rounds: int = 8,
    stream_requests: int = 400,
    arrivals: str = "trace",
    progress: bool = False,
) -> PDReport:
    """Capacities of both sides (``configurations`` the prefill candidates, and the decode
    ones unless ``decode_configurations``; probes of at least ``stream_requests`` requests
    arriving as ``arrivals`` says, :func:`slolab.problems.deployment_pd.measure_pd_capacities`),
    the MILP, the closed loop and the trimmed fleet."""
    start = time.perf_counter()
    classes = classes or request_classes(instance)
    decode = list(decode_configurations or configurations)
    table = measure_pd_capacities(
        instance,
        classes,
        configurations,
        decode,
        target=target,
        link=link,
        definition=definition,
        policy=policy,
        seed=seed,
        stream_requests=stream_requests,
        arrivals=arrivals,
        progress=progress,
    )
    refused: dict[str, str] = {}
    data = pd_capacity_data(table, instance, classes, link=link, prices=prices, refused=refused)
    optimum = solve_pd_milp(data)
    loop = close_pd_loop(
        instance,
        classes,
        data,
        target=target,
        link=link,
        definition=definition,
        policy=policy,
        seed=seed,
        max_rounds=max_rounds,
    )
    trimmed = trim_pd_fleet(
        instance, classes, loop, link=link, definition=definition, policy=policy, seed=seed
    )
    pair = pd_best_pair(data)
    return PDReport(
        data=data,
        capacities=table,
        refused=refused,
        loop=loop,
        trimmed=trimmed,
        optimum=optimum,
        greedy_cost=pd_plan_cost(data, pd_greedy(data)),
        best_pair_cost=math.inf if pair is None else pd_plan_cost(data, pair),
        wall_s=time.perf_counter() - start,
        link=str(link),
    )


@dataclass(frozen=True, slots=True)
class ModesAnswer:
    """Co-located and disaggregated answers side by side, and which is cheaper."""

    co: Any = None
    pd: PDReport | None = None
    wall_s: float = 0.0
    refusals: tuple[tuple[str, str], ...] = ()

    @property
    def answer(self) -> str:
        """``"co-locate"``, ``"disaggregate"`` or ``"none"`` (neither met the target); a tie
        keeps co-location (fewer links to run)."""
        co = math.inf if self.co is None else self.co.mixed_cost
        pd = math.inf if self.pd is None else self.pd.cost
        if math.isinf(co) and math.isinf(pd):
            return "none"
        return "disaggregate" if pd < co else "co-locate"


def plan_modes(
    instance: Instance,
    configurations: Sequence[str],
    *,
    mode: str = "both",
    target: float = 0.9,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    prices: dict[str, float] | None = None,
    refused: dict[str, str] | None = None,
    max_rounds: int = 8,
    progress: bool = False,
    cache: Any = None,
    pd_arrivals: str = "trace",
    co_arrivals: str = "poisson",
) -> ModesAnswer:
    """The co-located planner (:func:`slolab.harness.deploy.plan_deployment`), the
    disaggregated one (:func:`plan_pd_deployment`) or both (``mode`` in :data:`MODES`), on
    the same request classes (``pd_arrivals`` and ``co_arrivals``: how the disaggregated and
    the co-located capacity probes' arrivals are drawn,
    :data:`slolab.problems.deployment_capacity.PROBE_ARRIVALS`)."""
    from slolab.harness.deploy import plan_deployment

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    check_probe_arrivals(co_arrivals, "co_arrivals")
    check_probe_arrivals(pd_arrivals, "pd_arrivals")
    start = time.perf_counter()
    classes = request_classes(instance)
    co = pd = None
    refusals: list[tuple[str, str]] = []
    if mode in ("co", "both"):
        try:
            co = plan_deployment(
                instance,
                configurations,
                target=target,
                definition=definition,
                policy=policy,
                seed=seed,
                prices=prices,
                refused=refused,
                classes=classes,
                max_rounds=max_rounds,
                progress=progress,
                cache=cache,
                arrivals=co_arrivals,
            )
        except ValueError as error:
            refusals.append(("co", str(error)))
    if mode in ("pd", "both"):
        try:
            pd = plan_pd_deployment(
                instance,
                configurations,
                target=target,
                link=link,
                definition=definition,
                policy=policy,
                seed=seed,
                prices=prices,
                classes=classes,
                max_rounds=max_rounds,
                arrivals=pd_arrivals,
                progress=progress,
            )
        except ValueError as error:
            refusals.append(("pd", str(error)))
    if co is None and pd is None:
        raise ValueError(refusals[0][1])
    return ModesAnswer(co, pd, time.perf_counter() - start, tuple(refusals))


def modes_record(answer: ModesAnswer) -> dict[str, Any]:
    """One flat row of both answers: the co-located report's keys
    (:meth:`slolab.harness.deploy.DeploymentReport.to_record`), the disaggregated ones
    (``pd_*``, :meth:`PDReport.to_record`), ``answer`` and ``pd_saving`` (``1 - pd / co`` of
    the verified fleets; NaN unless both met the target)."""
    record: dict[str, Any] = {}
    if answer.co is not None:
        record.update(answer.co.to_record())
        record["co_first_attainment"] = _co_first_attainment(answer.co)
    if answer.pd is not None:
        record.update(answer.pd.to_record())
    co = math.inf if answer.co is None else answer.co.mixed_cost
    pd = math.inf if answer.pd is None else answer.pd.cost
    record["answer"] = answer.answer
    record["pd_saving"] = 1.0 - pd / co if math.isfinite(co) and math.isfinite(pd) else math.nan
    return record


def _co_first_attainment(report: Any) -> float:
    run = report.mixed.rounds[0].run
    return math.nan if run is None else run.attainment


def check_link(link: str, gpus: Sequence[str]) -> None:
    """ValueError in one line unless ``link`` joins the pools of every GPU type of ``gpus``:
    an unknown link or a bandwidth <= 0 (:func:`slolab.timing.links.gpu_link_bytes_per_s`),
    NVLink between GPU types (it joins the GPUs of one node)."""
    from slolab.timing.links import gpu_link_bytes_per_s

    for gpu in gpus:
        gpu_link_bytes_per_s(link, gpu)
    if link == "nvlink" and len(set(gpus)) > 1:
        raise ValueError(
            f"--kv-link nvlink joins the GPUs of one node: give one GPU type (got "
            f"{', '.join(gpus)}) or a link between nodes (infiniband-ndr, ethernet-100g, ...)"
        )


def modes_dict(answer: ModesAnswer, classes: RequestClasses) -> dict[str, Any]:
    """What ``slolab plan --model ... --mode pd|both --json`` prints: the co-located report
    (``co``, :meth:`slolab.harness.deploy.DeploymentReport.to_dict`), the disaggregated one
    (``pd``, :meth:`PDReport.to_dict`), the answer, the refusals and the flat row."""
    co = None
    if answer.co is not None:
        co = answer.co.to_dict()
        for entry, count in zip(co["classes"], classes.counts, strict=True):
            entry["requests"] = count
    return {
        "answer": answer.answer,
        "co": co,
        "pd": None if answer.pd is None else answer.pd.to_dict(),
        "refused_modes": {mode: why for mode, why in answer.refusals},
        "row": modes_record(answer),
        "wall_s": answer.wall_s,
    }


def print_modes(answer: ModesAnswer, classes: RequestClasses, heading: str) -> None:
    """The disaggregated answer (and the co-located one beside it) as text."""
    print(heading)
    pd = answer.pd
    for mode, why in answer.refusals:
        print(f"  {'co-located' if mode == 'co' else 'disaggregated'}: refused: {why}")
    if pd is not None:
        targets = pd.capacities.targets
        for k, name in enumerate(classes.names):
            print(
                f"  class {name}: {classes.counts[k]} requests, {classes.rates[k]:.4g} req/s, "
                f"prefill held to {targets.prefill_target[k]:.3f}, decode to "
                f"{targets.decode_target[k]:.3f}"
            )
        data = pd.data
        width = max(
            24, *(len(n) for n in (*data.prefill.configurations, *data.decode.configurations))
        )
        print(
            f"{'configuration':<{width}} {'$/h each':>9}  capacity req/s per class (prefill | decode)"
        )
        names = sorted(set(data.prefill.configurations) | set(data.decode.configurations))
        for name in names:
            cells = []
            for part in (data.prefill, data.decode):
                if name in part.configurations:
                    row = part.capacity[part.configurations.index(name)]
                    cells.append(" ".join(f"{v:8.3g}" for v in row))
                else:
                    cells.append("-")
            price = (data.prefill.prices + data.decode.prices)[
                (data.prefill.configurations + data.decode.configurations).index(name)
            ]
            print(f"{name:<{width}} {price:>9.2f}  {cells[0]} | {cells[1]}")
        for why in pd.refused.values():
            print(f"  refused: {why}")
        links = ", ".join(
            f"{name} {bw / 1e9:.4g} GB/s"
            for name, bw in zip(data.prefill.configurations, data.link_bandwidth, strict=True)
        )
        print(f"KV link {pd.link} per prefill server: {links} (transfers queued per link)")
        print(
            f"capacities (pd): {pd.capacities.probes} simulations ({pd.capacities.early} stopped "
            f"early) in {pd.capacities.wall_s:.1f} s"
        )
        pair = "none" if math.isinf(pd.best_pair_cost) else f"${pd.best_pair_cost:.2f}/h"
        print(
            f"on the measured capacities: optimum ${pd.optimum.cost:.2f}/h (MILP, "
            f"{pd.optimum.status.value}), greedy ${pd.greedy_cost:.2f}/h, best pair {pair}"
        )
        for number, found in enumerate(pd.loop.rounds, start=1):
            if found.run is None or found.result.plan is None:
                continue
            print(
                f"  round {number} ({found.how}): {pd_fleet_text(data, found.result.plan)} "
                f"${found.result.cost:.2f}/h, attainment {found.run.attainment:.3f} (TTFT "
                f"{found.run.ttft_attainment:.3f})"
            )
        print(f"disaggregated: {pd.loop.summary()}")
        if pd.trimmed is not None:
            plan, run = pd.trimmed
            print(
                f"disaggregated trimmed: {pd_fleet_text(data, plan)} ${pd.cost:.2f}/h, "
                f"attainment {run.attainment:.3f}"
            )
    if answer.co is not None:
        co = answer.co
        fleet = "none" if co.mixed_trimmed is None else co.to_record()["mixed_fleet"]
        cost = "-" if math.isinf(co.mixed_cost) else f"${co.mixed_cost:.2f}/h"
        print(f"co-located (verified, trimmed): {fleet} {cost}")
    saving = modes_record(answer)["pd_saving"]
    tail = "" if math.isnan(saving) else f" (disaggregated saves {saving:.1%} over co-located)"
    print(f"answer: {answer.answer}{tail}")
    print(f"wall time {answer.wall_s:.1f} s")

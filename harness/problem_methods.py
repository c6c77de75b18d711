"""Methods contributed by the paper problems (heuristics that output schedules)."""

from __future__ import annotations

from slolab.harness.methods import Method, schedule_method
from slolab.instances.records import Instance
from slolab.sim import Schedule


def _sa_methods() -> list[Method]:
    from slolab.heuristics import sa_ordering as sa

    def annealing(instance: Instance, *, seed: int) -> Schedule:
        batches, _ = sa.sa_order(instance, seed=seed)
        return sa.plan_schedule(batches)

    def rule(fn):
        def make(instance: Instance, *, seed: int) -> Schedule:
            return sa.plan_schedule(fn(instance))

        return make

    problems = ("sa-ordering",)
    return [
        schedule_method(
            "sa", problems, annealing, "the SA paper's simulated annealing (paper defaults)"
        ),
        schedule_method("fcfs", problems, rule(sa.fcfs_batches), "input order, full batches"),
        schedule_method(
            "edf", problems, rule(sa.edf_batches), "earliest SLO deadline first, full batches"
        ),
        schedule_method(
            "sjf",
            problems,
            rule(sa.shortest_first_batches),
            "shortest predicted execution first, full batches",
        ),
    ]


def _slos_methods() -> list[Method]:
    from slolab.heuristics.slos_serve_dp import slos_dp
    from slolab.models.slos_admission import AdmissionProblem

    def dp(instance: Instance, *, seed: int) -> Schedule:
        problem = AdmissionProblem.from_instance(instance)
        settings = instance.settings
        decision = slos_dp(
            problem,
            memory_unit=int(settings.get("dp_memory_unit", 1)),
            budget_unit=int(settings.get("dp_budget_unit", 1)),
        )
        return decision.to_schedule(problem)

    return [
        schedule_method(
            "dp", ("slos-admission",), dp, "SLOs-Serve's multi-SLO DP (Sec. 3.2.1, App. C)"
        )
    ]


def methods() -> list[Method]:
    """Every paper-problem heuristic, registered under ``problem/name``."""
    return _sa_methods() + _slos_methods()

"""SA ordering branch-and-price with a primal inside the tree: a better plan stops SCIP and
Dinkelbach restarts from it; bounds stay honest."""

from __future__ import annotations

import math

import pytest
from slolab import sim
from slolab.heuristics.sa_ordering import sa_order
from slolab.models.sa_bp import SAOrderingBranchPrice, branch_and_price
from slolab.models.sa_columns import Column
from slolab.solvers import Status
from slolab.solvers import solve as run
from test_sa_bp import every_plan, min_f, root_master

pytest.importorskip("pyscipopt")


@pytest.mark.parametrize("seed", [9, 15, 50])
def test_a_primal_plan_stops_scip_with_a_valid_bound(seed: int) -> None:
    """A primal that returns brute force's best plan at the first branching (period 0) stops
    SCIP: the step is unfinished, holds that plan, and its bound is still below min F."""
    problem, master, _ = root_master(seed, 0.97)
    exact = min_f(problem, master.ratio)
    best = min(
        every_plan(tuple(range(problem.n_requests)), 3),
        key=lambda p: (
            problem.evaluate(p).total_latency_s - master.reward * problem.evaluate(p).met_requests
        ),
    )
    calls: list[int] = []

    def primal(columns: list[Column]) -> tuple[tuple[int, ...], ...]:
        calls.append(len(columns))
        return best

    step = branch_and_price(
        master, list(master.columns), 1e20, 30.0, seed=0, primal=primal, primal_period=0.0
    )
    assert step.details["primal_stop"]
    assert not step.finished
    assert calls and calls[0] >= len(master.columns)
    assert best in step.plans
    assert step.details["tree_milps"] == 1
    assert step.f_lower <= exact + 1e-9


def test_a_primal_without_a_plan_leaves_the_search_exact() -> None:
    """A primal that never finds a plan (tried at every branching) changes nothing: the
    proved min F is brute force's."""
    problem, master, _ = root_master(15, 0.97)
    tries: list[int] = []

    def primal(columns: list[Column]) -> None:
        tries.append(len(columns))

    step = branch_and_price(
        master, list(master.columns), 1e20, 30.0, seed=0, primal=primal, primal_period=0.0
    )
    assert step.finished
    assert len(tries) == step.details["tree_milps"] >= 1
    assert step.f_lower == pytest.approx(min_f(problem, master.ratio), abs=1e-9)


def test_tree_milp_run_ends_with_an_honest_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the restricted MILP inside the tree every 0.3 s of a 6 s run (20 requests, no
    start-time bounds, so the gap is wide), it runs at least once and the run ends with the
    optimum bracketed and a plan that replays to its G."""
    import slolab.models.sa_bp as sa_bp
    from slolab.problems.sa_ordering import sa_snapshot

    monkeypatch.setattr(sa_bp, "WARM_START_SHARE", 0.1)
    monkeypatch.setattr(sa_bp, "TREE_MILP_PERIOD_SHARE", 0.05)
    instance = sa_snapshot(20, 4, seed=0)
    model = SAOrderingBranchPrice(instance, anneal=sa_order, bounds=False, tree_milp=True)
    result = run(model, "highs", time_limit=6)
    assert result.status in (Status.TIME_LIMIT, Status.FEASIBLE, Status.OPTIMAL)
    assert result.details["tree_milps"] >= 1
    lo, hi = result.optimum_interval
    assert 0 < lo <= hi < math.inf
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(lo, rel=1e-9)

"""The primal from the time-indexed network (``slolab.models.sa_ti_primal``): its plans are
plans, their G is the model's exact evaluation (checked by the engine's replay and checker),
never above brute force's G*, and the arc MILP finds G* when the optimum's arcs are priced."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sa_ordering_cases import random_ordering_instance
from slolab import sim
from slolab.models.sa_columns import latency_floor
from slolab.models.sa_ordering import SAOrderingModel, as_problem, batches_of
from slolab.models.sa_ti_primal import arc_plan, path_plan, time_indexed_primal
from slolab.models.sa_time_index import TimeIndexedMaster, time_indexed_bound
from slolab.sim.schedule import Schedule
from slolab.solvers import Status, solve


def _replayed_g(inst, plan):
    """The engine's G of ``plan`` replayed as static batches, after the checker found no
    violation."""
    outcome = sim.replay(inst, Schedule.static_batches(plan))
    assert sim.check(inst, outcome) == []
    return sim.metrics.g_ratio(inst, outcome)


@pytest.mark.parametrize(("seed", "n", "b"), [(s, 5, 2) for s in range(4)] + [(4, 6, 3)])
def test_primal_plan_is_a_plan_valued_exactly_and_at_most_g_star(seed, n, b):
    """Seeded 5- and 6-request snapshots: the primal of ``time_indexed_bound`` returns a plan
    (each request once, batches of 1..B), its G is the model's evaluation of that plan and the
    engine's replay of it, at least the starting plan's and at most brute force's G*; the
    interval [G, bound] holds G*."""
    inst = random_ordering_instance(seed, n, b)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    assert exact.status == Status.OPTIMAL
    plan, value = model.starting_plan()
    floor = latency_floor(problem, plan, time.perf_counter() + 10)
    got = time_indexed_bound(problem, plan, value.g, floor, 10, step_s=0.02, primal_s=4)
    primal = got.primal
    assert primal is not None and primal.plan is not None and primal.value is not None
    assert sorted(r for batch in primal.plan for r in batch) == list(range(n))
    assert all(1 <= len(batch) <= b for batch in primal.plan)
    assert problem.evaluate(primal.plan) == primal.value
    assert primal.g == pytest.approx(_replayed_g(inst, primal.plan), rel=1e-9)
    assert value.g <= primal.g <= exact.objective * (1 + 1e-12)
    assert primal.g <= exact.objective <= got.bound * (1 + 1e-9)
    assert primal.evaluated >= 1 and primal.arcs > 0 and primal.rows > n
    assert [r["status"] for r in primal.rounds if r["milp"] == "arc"][:1] == ["Optimal"]
    assert [r["milp"] for r in primal.rounds][-1] == "position"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_arc_milp_finds_g_star_from_the_optimums_arcs(seed):
    """The starting plan's path and the optimum's path given only as one-batch pieces (no
    piece is a plan): the path scan finds the starting plan's G, below G*; the arc MILP chains
    the pieces into a plan of G* (brute force's)."""
    inst = random_ordering_instance(seed, 5, 2)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    best = batches_of(exact.schedule)
    plan, value = model.starting_plan()
    master = TimeIndexedMaster(problem, value.g, step_s=0.02)
    pieces = [(col,) for col in master.plan_path(best)]
    assert all(path_plan(p, problem.n_requests) is None for p in pieces)
    paths = [master.plan_path(plan), *pieces]
    scanned = time_indexed_primal(problem, paths, 0.0, plan)
    primal = time_indexed_primal(problem, paths, 5.0, plan)
    # one plan scanned (the starting plan's path), no MILP within 0 s
    assert (scanned.from_paths, scanned.evaluated, scanned.arcs) == (1, 1, 0)
    assert scanned.g == pytest.approx(value.g, rel=1e-12)
    assert scanned.g < exact.objective * (1 - 1e-9)
    assert primal.g == pytest.approx(exact.objective, rel=1e-12)
    assert primal.arcs == len(set(paths[0]) | {p[0] for p in pieces})
    # the arc MILP's rounds alone reach G*, proved optimal at their last ratio
    arc_rounds = [r for r in primal.rounds if r["milp"] == "arc"]
    assert arc_rounds[-1]["status"] == "Optimal"
    assert arc_rounds[-1]["g"] == pytest.approx(exact.objective, rel=1e-12)


def test_arc_plan_refuses_what_is_no_plan():
    """Arcs that do not chain from (0, 0) or that repeat a request give no plan; the optimum's
    own arcs give its batches back."""
    inst = random_ordering_instance(1, 5, 2)
    problem = as_problem(inst)
    master = TimeIndexedMaster(problem, 1.0, step_s=0.02)
    plan = ((0, 1), (2, 3), (4,))
    arcs = list(master.plan_path(plan))
    assert arc_plan(arcs, np.ones(3), 5) == plan
    # the second batch missing: (4,) does not start where (0, 1) ends
    assert arc_plan(arcs, np.array([1.0, 0.0, 1.0]), 5) is None
    repeat = [*arcs[:2], master.column((0,), 4, arcs[1].end_tick)]
    assert arc_plan(repeat, np.ones(3), 5) is None


def test_position_milp_alone_chains_pieces_of_paths():
    """With no time for the arc MILP (``arc_share = 0``) the position MILP alone joins the
    optimum's one-batch pieces into G* (it holds no grid time, so the pieces chain too); a
    share outside [0, 1] is refused."""
    inst = random_ordering_instance(2, 5, 2)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    plan, value = model.starting_plan()
    master = TimeIndexedMaster(problem, value.g, step_s=0.02)
    paths = [
        master.plan_path(plan),
        *((col,) for col in master.plan_path(batches_of(exact.schedule))),
    ]
    primal = time_indexed_primal(problem, paths, 5.0, plan, arc_share=0.0)
    assert (primal.arcs, primal.rows) == (0, 0)
    assert {r["milp"] for r in primal.rounds} == {"position"}
    # the starting plan is below G* here (brute force's), so the position MILP found it
    assert value.g < exact.objective * (1 - 1e-9)
    assert primal.g == pytest.approx(exact.objective, rel=1e-12)
    with pytest.raises(ValueError, match="arc_share"):
        time_indexed_primal(problem, paths, 1.0, plan, arc_share=1.5)


def test_no_primal_without_primal_s():
    """``primal_s = 0`` (the default) runs no primal; a share not below the limit is refused."""
    inst = random_ordering_instance(0, 5, 2)
    problem = as_problem(inst)
    plan, value = SAOrderingModel(inst).starting_plan()
    got = time_indexed_bound(problem, plan, value.g, 1.0, 5, step_s=0.05)
    assert got.primal is None
    with pytest.raises(ValueError, match="primal_s"):
        time_indexed_bound(problem, plan, value.g, 1.0, 5, primal_s=5)

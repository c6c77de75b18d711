"""Subset-row cuts on the time-indexed network's paths (slolab.models.sa_ti_cuts)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from sa_ordering_cases import listed_paths, random_ordering_instance
from slolab.models.sa_ordering import SAOrderingModel, as_problem, batches_of
from slolab.models.sa_ti_cuts import path_counts, subset_row_lift, subset_row_violations
from slolab.models.sa_time_index import TimeIndexedMaster
from slolab.solvers import Status, solve


@pytest.mark.parametrize("seed", range(4))
def test_violations_are_those_of_a_loop_over_triples(seed):
    """Seeded visit counts and LP points (some paths at zero): the cuts reported are the most
    violated triples of a plain loop over every triple, in order, violations equal."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, size=(12, 6))
    x = rng.dirichlet(np.ones(12))
    x[rng.random(12) < 0.3] = 0.0
    expected = []
    for triple in itertools.combinations(range(6), 3):
        lhs = sum(x[p] * (counts[p, list(triple)].sum() // 2) for p in range(12))
        if lhs - 1.0 > 1e-6:
            expected.append((triple, lhs - 1.0))
    expected.sort(key=lambda item: (-item[1], item[0]))
    got = subset_row_violations(counts, x, most=7)
    assert [t for t, _ in got] == [t for t, _ in expected[:7]]
    assert [v for _, v in got] == pytest.approx([v for _, v in expected[:7]], abs=1e-12)
    assert len(subset_row_violations(counts, x, most=100)) == len(expected)


def test_a_plan_violates_no_cut():
    """Brute force's optimal plan and the starting plan of a 6-request snapshot: each is one
    path visiting every request once, so every triple's left side is exactly 1."""
    inst = random_ordering_instance(3, 6, 3)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    assert exact.status == Status.OPTIMAL
    start, value = model.starting_plan()
    master = TimeIndexedMaster(problem, value.g, step_s=0.02)
    plans = [start, batches_of(exact.schedule)]
    counts = path_counts([master.plan_path(p) for p in plans], problem.n_requests)
    assert (counts == 1).all()
    for i in range(len(plans)):
        x = np.zeros(len(plans))
        x[i] = 1.0
        assert subset_row_violations(counts, x, most=50) == []


def test_cuts_over_every_path_keep_every_plan():
    """Seeded 5-request snapshots (B = 2) at 0.9 times the starting plan's G: the LP over every
    path of the network with the cuts added is at least the LP without them and at most the
    least cost of a path that repeats no request (each plan's path, which the cuts must keep);
    on some of them the cuts raise it (so the check is not vacuous)."""
    lifted = []
    for seed in range(6):
        inst = random_ordering_instance(seed, 5, 2)
        problem = as_problem(inst)
        _, value = SAOrderingModel(inst).starting_plan()
        master = TimeIndexedMaster(problem, 0.9 * value.g, step_s=0.02)
        paths = list(listed_paths(master))
        counts = path_counts(paths, problem.n_requests)
        costs = np.array([sum(master.cost(c) for c in p) for p in paths])
        elementary = costs[(counts == 1).all(axis=1)].min()
        lift = subset_row_lift(costs, counts, rounds=20, most=10, time_limit=60)
        assert lift.values[0] <= elementary + 1e-9
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(lift.values))
        assert lift.values[-1] <= elementary + 1e-7
        assert (lift.violated >= 1) == bool(lift.cuts)
        lifted.append(lift.values[-1] - lift.values[0])
    assert max(lifted) > 1e-6


def test_lift_on_a_generated_master():
    """A converged master of a 6-request snapshot: the restricted LP without cuts is the
    master's LP, the cuts only raise it, and it stays at most the starting plan's path cost
    (a column of the master that repeats no request)."""
    inst = random_ordering_instance(5, 6, 3)
    problem = as_problem(inst)
    plan, value = SAOrderingModel(inst).starting_plan()
    master = TimeIndexedMaster(problem, value.g, step_s=0.02)
    lb, converged = master.generate(plan, time.perf_counter() + 30)
    assert converged
    counts = path_counts(master.paths, problem.n_requests)
    costs = np.array([sum(master.cost(c) for c in p) for p in master.paths])
    lift = subset_row_lift(costs, counts, rounds=5, most=5, time_limit=30)
    lp = master._highs.getInfo().objective_function_value
    assert lift.values[0] == pytest.approx(lp, abs=1e-7)
    assert lb <= lift.values[0] + 1e-6
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(lift.values))
    plan_cost = sum(master.cost(c) for c in master.plan_path(plan))
    assert lift.values[-1] <= plan_cost + 1e-7


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="paths but"):
        subset_row_violations(np.ones((3, 4), dtype=int), np.ones(2), most=1)
    with pytest.raises(ValueError, match="rounds must be"):
        subset_row_lift(np.ones(1), np.ones((1, 3), dtype=int), rounds=-1, most=1, time_limit=1)

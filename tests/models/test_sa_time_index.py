"""The time-indexed batch network for SA ordering (``slolab.models.sa_time_index``): pricing
against every column listed; a plan's path costs at most its F; on seeded snapshots the
bound is at least brute force's G*."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from sa_ordering_cases import random_ordering_instance
from slolab.models.sa_columns import latency_floor
from slolab.models.sa_ordering import SAOrderingModel, as_problem
from slolab.models.sa_time_index import TimeIndexedMaster, time_indexed_bound
from slolab.solvers import Status, solve


def test_pricing_is_the_least_reduced_cost_of_every_path():
    """Random duals on a 4-request snapshot (B = 2): the least reduced cost the pricing's
    programme reports equals the least over every path listed (every sequence of batches whose
    sizes add up to N, repeats allowed), and the best path it returns has that reduced cost."""
    problem = as_problem(random_ordering_instance(4, 4, 2))
    master = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05)
    rng = np.random.default_rng(0)
    n = problem.n_requests
    duals = rng.normal(0, 1.0, n + 1)
    paths, best = master.price(duals, most=5)

    def reduced(path):
        members = [r for c in path for r in c.members]
        return sum(master.cost(c) for c in path) - duals[members].sum() - duals[n]

    def listed(q, tick):
        if q == n:
            yield ()
            return
        for s in range(1, min(problem.batch_size, n - q) + 1):
            for members in itertools.combinations(range(n), s):
                col = master.column(members, q, tick)
                for rest in listed(q + s, col.end_tick):
                    yield (col, *rest)

    least = min(reduced(path) for path in listed(0, 0))
    assert best == pytest.approx(least, abs=1e-9)
    assert paths and reduced(paths[0]) == pytest.approx(least, abs=1e-9)


def test_plan_path_costs_at_most_its_f():
    """A plan's path on the grid claims at least its met members, and its LP cost is at most
    the plan's L - M / lambda (starts rounded down, claims checked at those starts)."""
    inst = random_ordering_instance(8, 6, 3)
    problem = as_problem(inst)
    plan, value = SAOrderingModel(inst).starting_plan()
    for step in (0.01, 0.2):
        master = TimeIndexedMaster(problem, ratio=value.g, step_s=step)
        cost = sum(master.cost(c) for c in master.plan_path(plan))
        # F of the plan at lambda = G is 0
        assert cost <= value.total_latency_s - value.met_requests / value.g + 1e-9


@pytest.mark.parametrize("seed", range(8))
def test_bound_is_at_least_brute_force(seed):
    """Seeded 6-request snapshots (B = 3): brute force's G* <= the time-indexed bound."""
    inst = random_ordering_instance(seed, 6, 3)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    assert exact.status == Status.OPTIMAL
    plan, value = model.starting_plan()
    floor = latency_floor(problem, plan, time.perf_counter() + 30)
    got = time_indexed_bound(problem, plan, value.g, floor, 30, step_s=0.02)
    assert exact.objective <= got.bound * (1 + 1e-9)

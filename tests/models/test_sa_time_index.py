"""The time-indexed batch network for SA ordering (``slolab.models.sa_time_index``): pricing
against every column listed; a plan's path costs at most its F; on seeded snapshots the
bound is at least brute force's G*."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from slolab.models.sa_columns import latency_floor
from slolab.models.sa_ordering import SAOrderingModel, as_problem
from slolab.models.sa_time_index import TimeIndexedMaster, time_indexed_bound
from slolab.solvers import Status, solve
from sa_ordering_cases import random_ordering_instance


def test_pricing_is_the_least_reduced_cost_of_every_column():
    """Random duals on a 5-request snapshot (B = 2): the least reduced cost the pricing
    reports equals the least over every (members, node) column, and each column it returns
    has the reduced cost it was priced at or better than the tolerance."""
    problem = as_problem(random_ordering_instance(4, 5, 2))
    master = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05)
    rng = np.random.default_rng(0)
    n = problem.n_requests
    duals = rng.normal(0, 1.0, n + n * (master.late + 1))
    cols, best = master.price(duals, most=50)

    def reduced(col):
        s = len(col.members)
        end = 0.0 if col.q + s >= n else duals[master.node(col.q + s, col.end_tick)]
        return master.cost(col) - duals[list(col.members)].sum() - duals[master.node(col.q, col.tick)] + end

    listed = math.inf
    for s in range(1, problem.batch_size + 1):
        for members in itertools.combinations(range(n), s):
            for q in range(n - s + 1):
                for tick in range(master.late + 1):
                    listed = min(listed, reduced(master.column(members, q, tick)))
    assert best == pytest.approx(listed, abs=1e-9)
    assert cols and min(reduced(c) for c in cols) == pytest.approx(listed, abs=1e-9)


def test_plan_path_costs_at_most_its_f():
    """A plan's path on the grid claims at least its met members, and its LP cost is at most
    the plan's L - M / lambda (starts rounded down, claims checked at those starts)."""
    inst = random_ordering_instance(8, 6, 3)
    problem = as_problem(inst)
    plan, value = SAOrderingModel(inst).starting_plan()
    for step in (0.01, 0.2):
        master = TimeIndexedMaster(problem, ratio=value.g, step_s=step)
        cost = sum(master.cost(c) for c in master.plan_columns(plan))
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

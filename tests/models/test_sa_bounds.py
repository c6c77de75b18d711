"""SA ordering start-time bounds: valid for every plan they claim to bound, tighter LP, same optima."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sa_ordering_cases import random_ordering_instance, tight_ordering_instance
from slolab import sim
from slolab.models.sa_bp import SAOrderingBranchPrice
from slolab.models.sa_columns import (
    ColumnMaster,
    SAOrderingColumns,
    claim_capacity_cuts,
    met_limit,
    restricted_milp,
    start_bounds,
)
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel, batches_of
from slolab.solvers import Status, solve
from test_sa_bp import every_plan
from test_sa_cuts import check_pricing

pytest.importorskip("pyscipopt")


def node_starts(
    problem: OrderingProblem, plan: tuple[tuple[int, ...], ...]
) -> list[tuple[int, float]]:
    """``(q, start)`` of every batch after the first: ``q`` requests precede it."""
    out = []
    position, start = 0, 0.0
    for batch in plan:
        if position:
            out.append((position, start))
        position += len(batch)
        start += max(float(problem.exec_s[r, len(batch)]) for r in batch)
    return out


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 6), b=st.integers(1, 3))
def test_bounds_hold_for_every_plan(seed: int, n: int, b: int) -> None:
    """Every plan of a random snapshot starts each batch no earlier than ``LB'_q``, and every
    plan with ``F = L - M / lambda <= 0`` no later than ``UB'_q`` (at lambda = G* and 0.8 G*,
    the met count bounded with the claim-capacity cuts; every plan listed)."""
    instance = tight_ordering_instance(seed, n, b)
    problem = OrderingProblem.from_instance(instance)
    optimum = solve(SAOrderingModel(instance), "brute", time_limit=30).objective
    limit = met_limit(problem, claim_capacity_cuts(problem))
    plans = [(p, problem.evaluate(p)) for p in every_plan(tuple(range(n)), b)]
    assert max(v.met_requests for _, v in plans) <= limit
    for lam in (optimum, 0.8 * optimum) if optimum else ():
        lower, upper = start_bounds(problem, lam, limit)
        plain_lower = problem.start_lower_bounds_s()
        assert np.all(lower >= plain_lower - 1e-12)
        assert np.all(upper <= problem.start_upper_bounds_s() + 1e-12)
        for plan, value in plans:
            bounded = value.total_latency_s - value.met_requests / lam <= 0.0
            for q, start in node_starts(problem, plan):
                assert start >= lower[q] - 1e-9, (plan, q)
                if bounded:
                    assert start <= upper[q] + 1e-9, (plan, q)


def test_grouped_floor_beats_the_shares_by_hand() -> None:
    """Random snapshot 15 (6 requests, B = 2): the plain floor ``LB_q`` sums the smallest
    ``min_s e_r(s) / s``; the grouped floor sees that batches last as long as their longest
    member, and is higher from q = 2 on."""
    problem = OrderingProblem.from_instance(random_ordering_instance(15, 6, 2))
    lower, _ = start_bounds(problem, None)
    plain = problem.start_lower_bounds_s()
    assert lower[1] == pytest.approx(float(np.min(problem.exec_s[:, 1:])))
    assert np.all(lower[2:] > plain[2:] + 1e-6)


def test_bounds_close_the_root_gap_where_the_plain_lp_is_fractional() -> None:
    """Random snapshot 15 (6 requests, B = 2) at lambda = G*: the plain column LP lies 0.385 s
    below every plan (fractional start times); with the start-time bounds its value is 0 (to
    rounding), so the root proves G*. The optimum's plan stays feasible in the bounded master."""
    instance = random_ordering_instance(15, 6, 2)
    problem = OrderingProblem.from_instance(instance)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    optimum = brute.objective
    plan = SAOrderingModel(problem).starting_plan()[0]
    values = {}
    for bounds in (False, True):
        master = ColumnMaster(problem, optimum, bounds=bounds)
        master.add_plan(plan)
        value, lower, _, converged = master.solve_lp(time.perf_counter() + 30)
        assert converged
        values[bounds] = (value, lower)
    # measured: plain -0.384991 s, with the bounds 0 (rounding)
    assert values[False][0] == pytest.approx(-0.384991, abs=1e-5)
    assert values[True][0] == pytest.approx(0.0, abs=1e-9)
    assert values[True][1] >= values[False][1]
    # the optimum's own plan: every column valid with its met set, F = 0 in the MILP
    best = batches_of(brute.schedule)
    bounded = ColumnMaster(problem, optimum, bounds=True)
    bounded.add_plan(best)
    assert sum(len(c.met) for c in bounded.columns) == problem.evaluate(best).met_requests
    import pulp

    prob, read_plan = restricted_milp(bounded, list(bounded.columns), pulp)
    prob.solve(pulp.HiGHS(msg=False))
    assert pulp.LpStatus[prob.status] == "Optimal"
    assert read_plan() == best
    assert pulp.value(prob.objective) == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(4, 6), b=st.integers(2, 3))
def test_methods_with_and_without_bounds_equal_brute_force(seed: int, n: int, b: int) -> None:
    """With and without the start-time bounds, the column method and branch-and-price (SCIP
    alone) prove brute force's G*; each plan replays to it with no violation."""
    instance = tight_ordering_instance(seed, n, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    assert brute.status == Status.OPTIMAL
    for bounds in (True, False):
        for model in (
            SAOrderingColumns(instance, bounds=bounds),
            SAOrderingBranchPrice(instance, warm_start=False, bounds=bounds),
        ):
            result = solve(model, "highs", time_limit=30)
            assert result.status == Status.OPTIMAL, (model.name, bounds)
            assert result.objective == pytest.approx(brute.objective, rel=1e-9), model.name
            outcome = sim.replay(instance, result.schedule)
            assert sim.check(instance, outcome) == []
            assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(
                brute.objective, rel=1e-9
            )


@pytest.mark.parametrize(("seed", "b"), [(15, 2), (48, 2), (50, 3)])
def test_pricing_with_bounds_finds_the_most_negative_column(seed: int, b: int) -> None:
    """With the start-time bounds (and the cuts) in the master, pricing's smallest reduced cost
    equals the minimum over every column, and each column's reduced cost equals HiGHS's."""
    problem = OrderingProblem.from_instance(random_ordering_instance(seed, 6, b))
    optimum = solve(SAOrderingModel(problem), "brute", time_limit=30).objective
    cuts = claim_capacity_cuts(problem)
    master = ColumnMaster(
        problem, 0.9 * optimum, cuts=cuts, bounds=True, met_limit=met_limit(problem, cuts)
    )
    assert np.any(master.ub < problem.start_upper_bounds_s() - 1e-6)
    master.add_plan(SAOrderingModel(problem).starting_plan()[0])
    _, converged = check_pricing(master, 60)
    assert converged

"""Contract battery: every available backend on the same small models."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.solvers import Status, available_solvers, solve
from solver_models import (
    BestRatioSubset,
    JobsData,
    Knapsack,
    KnapsackData,
    RatioData,
    WeightedCompletion,
    hard_knapsack,
    schedule_items,
)

SOLVERS = available_solvers()
RECORD_KEYS = {
    "model",
    "backend",
    "status",
    "objective",
    "bound",
    "gap",
    "optimum_lo",
    "optimum_hi",
    "runtime_s",
}


def small_knapsack() -> Knapsack:
    """values (10, 13, 7, 8), weights (5, 6, 3, 4), capacity 10."""
    return Knapsack(KnapsackData((10, 13, 7, 8), ((5, 6, 3, 4),), (10,)))


def four_jobs() -> WeightedCompletion:
    """processing (3, 1, 2, 4), weights (2, 3, 1, 2)."""
    return WeightedCompletion(JobsData((3, 1, 2, 4), (2, 3, 1, 2)))


def test_every_required_backend_is_available():
    """HiGHS, CBC, CP-SAT and brute force all run here (all are required dependencies)."""
    assert SOLVERS == ["highs", "cbc", "cpsat", "brute"]


@pytest.mark.parametrize("solver", SOLVERS)
def test_knapsack_optimum(solver):
    """A four-item knapsack is solved to its hand-computed optimum with a proof."""
    result = solve(small_knapsack(), solver=solver, time_limit=10)
    # Feasible pairs (no triple fits: the lightest triple weighs 3 + 4 + 5 = 12 > 10):
    # {0,2}: w 8, v 17; {0,3}: w 9, v 18; {1,2}: w 9, v 20; {1,3}: w 10, v 21; {2,3}: w 7, v 15;
    # {0,1}: w 11 does not fit. Best: {1, 3} with 13 + 8 = 21.
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(21.0)
    assert result.bound == pytest.approx(21.0)
    assert result.gap == 0.0
    assert result.optimum_interval == (pytest.approx(21.0), pytest.approx(21.0))
    assert result.schedule is not None
    assert schedule_items(result.schedule) == [1, 3]
    assert result.backend == solver
    assert result.model == "test-knapsack"
    assert result.runtime_s >= 0.0


@pytest.mark.parametrize("solver", SOLVERS)
def test_weighted_completion_optimum(solver):
    """Four jobs on one machine reach Smith's-rule optimum 37 (minimization)."""
    result = solve(four_jobs(), solver=solver, time_limit=10)
    # Smith's rule (sort by w/p descending): job1 3/1, job0 2/3, then job2 1/2 = job3 2/4.
    # Completions: job1 1 (3*1 = 3), job0 4 (2*4 = 8), job2 6 (1*6 = 6), job3 10 (2*10 = 20):
    # 3 + 8 + 6 + 20 = 37 (job3 before job2 gives 3 + 8 + 16 + 10 = 37 as well).
    assert result.status == Status.OPTIMAL
    assert result.sense == "min"
    assert result.objective == pytest.approx(37.0)
    assert result.bound == pytest.approx(37.0, abs=1e-6)
    assert result.schedule is not None
    assert schedule_items(result.schedule)[:2] == [1, 0]
    assert result.runtime_s >= 0.0


@pytest.mark.parametrize("solver", SOLVERS)
def test_infeasible_is_a_status(solver):
    """An infeasible model returns INFEASIBLE with no objective, bound or schedule."""
    model = Knapsack(KnapsackData((10, 13, 7, 8), ((5, 6, 3, 4),), (10,), min_items=3))
    result = solve(model, solver=solver, time_limit=10)
    # Three items weigh at least 3 + 4 + 5 = 12 > 10: no feasible choice.
    assert result.status == Status.INFEASIBLE
    assert result.objective is None
    assert result.bound is None
    assert result.schedule is None
    assert result.gap is None
    assert result.optimum_interval == (-math.inf, math.inf)


@pytest.mark.parametrize("solver", SOLVERS)
def test_empty_model_optimum_is_its_constant(solver):
    """A knapsack with no items is OPTIMAL at its objective's constant, with an empty schedule."""
    result = solve(Knapsack(KnapsackData((), ((),), (0,), offset=5)), solver=solver, time_limit=10)
    # No decision to make: the objective is the offset 5 and the schedule serves nothing.
    assert result.status == Status.OPTIMAL
    assert (result.objective, result.bound) == (5.0, 5.0)
    assert result.schedule is not None
    assert schedule_items(result.schedule) == []


@pytest.mark.parametrize("solver", SOLVERS)
def test_time_limit_reports_interval(solver):
    """A hard knapsack cut at 1 s is TIME_LIMIT, never OPTIMAL, with a sound interval."""
    result = solve(hard_knapsack(), solver=solver, time_limit=1.0)
    assert result.status == Status.TIME_LIMIT
    # The run lasts at least most of its 1 s and stops well before 10 s.
    assert 0.9 <= result.runtime_s <= 10.0
    lo, hi = result.optimum_interval
    if solver == "brute":
        # 2^150 subsets: the search stops without an incumbent and proves nothing.
        assert result.objective is None and result.schedule is None
        assert (lo, hi) == (-math.inf, math.inf)
        return
    assert result.objective is not None and result.bound is not None
    # Maximization: incumbent <= optimum <= bound; the 10_000 offset is on both sides.
    assert lo == result.objective
    assert hi == result.bound
    assert result.objective <= result.bound
    assert result.objective > 10_000
    assert result.gap is not None and result.gap > 0
    assert result.schedule is not None
    chosen = schedule_items(result.schedule)
    data = hard_knapsack().data
    # The schedule is the incumbent: its items sum to the objective and fit every resource.
    assert sum(data.values[i] for i in chosen) + data.offset == pytest.approx(result.objective)
    for row, cap in zip(data.weights, data.capacities, strict=True):
        assert sum(row[i] for i in chosen) <= cap


@pytest.mark.parametrize("solver", SOLVERS)
def test_custom_loop_solves_a_ratio(solver):
    """A Dinkelbach loop written on the Backend API finds the best value/weight ratio."""
    model = BestRatioSubset(RatioData(values=(6, 5, 4), weights=(3, 2, 4), capacity=6, base=1))
    result = solve(model, solver=solver, time_limit=10)
    # Ratios v / (1 + w) of subsets with w <= 6: {0} 6/4, {1} 5/3, {2} 4/5, {0,1} 11/6,
    # {1,2} 9/7 ({0,2} and {0,1,2} weigh 7 and 9). Best: {0, 1} with 11/6.
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(11 / 6)
    assert result.schedule is not None
    assert schedule_items(result.schedule) == [0, 1]
    if solver != "brute":
        # lambda 0 picks the most value, {0, 1} (11); at lambda = 11/6 the best score is 0.
        assert result.details["dinkelbach_steps"] == 2


@pytest.mark.parametrize("solver", SOLVERS)
def test_record_has_documented_keys(solver):
    """to_record() holds exactly the documented keys and the run's numbers."""
    result = solve(small_knapsack(), solver=solver, time_limit=10)
    record = result.to_record()
    assert set(record) == RECORD_KEYS
    # Optimum 21 (see test_knapsack_optimum): point interval, gap 0.
    assert (record["objective"], record["optimum_lo"], record["optimum_hi"]) == (21.0, 21.0, 21.0)
    assert record["status"] == "OPTIMAL"
    assert record["gap"] == 0.0
    assert record["backend"] == solver
    assert record["runtime_s"] >= 0.0
    assert result.details["time_limit_s"] == 10.0
    assert result.details["threads"] == 1
    assert result.details["seed"] == 0


@st.composite
def tiny_knapsacks(draw):
    n = draw(st.integers(1, 6))
    values = tuple(draw(st.integers(0, 20)) for _ in range(n))
    weights = tuple(draw(st.integers(1, 10)) for _ in range(n))
    capacity = draw(st.integers(0, 30))
    return KnapsackData(values, (weights,), (capacity,))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(tiny_knapsacks())
def test_backends_agree_on_random_knapsacks(data):
    """HiGHS, CBC, CP-SAT and brute force find the same optimum on random tiny knapsacks."""
    optima = {}
    for solver in SOLVERS:
        result = solve(Knapsack(data), solver=solver, time_limit=10)
        assert result.status == Status.OPTIMAL
        optima[solver] = result.objective
    # Brute force enumerates every subset: its value is the optimum the others must match.
    expected = optima["brute"]
    for solver, value in optima.items():
        assert value == pytest.approx(expected, abs=1e-6), solver

"""solve(): input checks, backend options, logs, and the Backend API used by custom loops."""

from __future__ import annotations

import math

import pulp
import pytest
from slolab.solvers import ExactModel, Result, Status, get_backend, solve
from slolab.solvers.base import MilpFormulation
from solver_models import Knapsack, KnapsackData, MilpOnlyKnapsack, hard_knapsack, schedule_items


def small_knapsack() -> Knapsack:
    """values (10, 13, 7, 8), weights (5, 6, 3, 4), capacity 10: optimum 21 with items {1, 3}."""
    return Knapsack(KnapsackData((10, 13, 7, 8), ((5, 6, 3, 4),), (10,)))


def test_unknown_solver_lists_known_ones():
    """An unknown solver name raises ValueError naming every registered backend."""
    with pytest.raises(
        ValueError, match=r"unknown solver 'gurobi'; known solvers: highs, cbc, cpsat, brute"
    ):
        solve(small_knapsack(), solver="gurobi")


def test_missing_formulation_names_usable_solvers():
    """A model without a CP-SAT formulation says so and lists the backends it supports."""
    model = MilpOnlyKnapsack(KnapsackData((1,), ((1,),), (1,)))
    expected = (
        "model 'milp-only-knapsack' has no CP-SAT formulation; it supports: highs, cbc, brute"
    )
    with pytest.raises(ValueError, match=expected):
        solve(model, solver="cpsat")


@pytest.mark.parametrize("time_limit", [0, -1.0, math.nan, math.inf, "10", True])
def test_bad_time_limit_is_rejected(time_limit):
    """Time limits that are not finite positive numbers raise ValueError."""
    with pytest.raises(ValueError, match="time_limit"):
        solve(small_knapsack(), solver="highs", time_limit=time_limit)


@pytest.mark.parametrize("threads", [0, -2, 1.5])
def test_bad_thread_count_is_rejected(threads):
    """Thread counts below 1 or not integers raise ValueError."""
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        solve(small_knapsack(), solver="cbc", threads=threads)


def test_bad_seed_is_rejected():
    """A negative seed raises ValueError."""
    with pytest.raises(ValueError, match="seed must be an integer"):
        solve(small_knapsack(), solver="cpsat", seed=-1)


def test_non_model_is_rejected():
    """solve() on something that is not an ExactModel raises TypeError naming the type."""
    with pytest.raises(TypeError, match="needs an ExactModel .* got dict"):
        solve({"values": [1, 2]}, solver="highs")


@pytest.mark.parametrize(
    ("solver", "params", "message"),
    [
        ("highs", {"no_such_option": 1}, "HiGHS does not accept option no_such_option=1"),
        ("cpsat", {"no_such_parameter": 1}, "CP-SAT does not accept parameter no_such_parameter"),
        ("cbc", {"noSuchOption": 3}, r"CBC does not know the option\(s\): noSuchOption"),
        ("brute", {"depth": 3}, "backend 'brute' takes no options, got: depth"),
    ],
)
def test_unknown_backend_option_is_rejected(solver, params, message):
    """An option the backend does not know raises ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        solve(small_knapsack(), solver=solver, **params)


@pytest.mark.parametrize(
    ("solver", "params"),
    [
        ("highs", {"presolve": "off", "mip_feasibility_tolerance": 1e-7}),
        ("cbc", {"cuts": "off", "presolve": "off"}),
        ("cpsat", {"linearization_level": 2, "cp_model_presolve": False}),
    ],
)
def test_backend_options_reach_the_solver(solver, params):
    """Known backend options are accepted and the optimum is unchanged."""
    result = solve(small_knapsack(), solver=solver, **params)
    # Optimum 21 ({1, 3}: 13 + 8 with weight 6 + 4 = 10).
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(21.0)


@pytest.mark.parametrize("solver", ["highs", "cbc", "cpsat"])
def test_log_is_a_summary_unless_asked(solver):
    """Result.log is one summary line by default and carries the solver log with log=True."""
    short = solve(small_knapsack(), solver=solver, log=False)
    full = solve(small_knapsack(), solver=solver, log=True)
    assert short.log.count("\n") == 0
    assert short.log.startswith(f"{solver}: ")
    # The full log starts with the same summary line and adds the solver's own output.
    assert full.log.splitlines()[0].startswith(f"{solver}: ")
    assert full.log.count("\n") >= 5


def test_cbc_time_limit_is_not_reported_optimal():
    """CBC cut by its time limit is TIME_LIMIT although PuLP's status reads "Optimal"."""
    backend = get_backend("cbc")(threads=1, seed=0)
    form = hard_knapsack().milp()
    raw = backend.solve_milp(form, time_limit=1.0)
    # PuLP folds "Stopped on time" with an incumbent into LpStatusOptimal ...
    assert form.problem.status == pulp.LpStatusOptimal
    assert form.problem.sol_status == pulp.LpSolutionIntegerFeasible
    # ... which slolab reports as a time-limited run with a bound above the incumbent.
    assert raw.status == Status.TIME_LIMIT
    assert raw.objective is not None and raw.bound is not None
    assert raw.objective < raw.bound
    assert raw.details["solver_status"] == "Stopped on time limit"


def test_highs_survives_a_change_of_thread_count():
    """HiGHS solves after the thread count changes between calls (its pool is process-wide)."""
    results = [solve(small_knapsack(), solver="highs", threads=t) for t in (2, 1, 2)]
    # Optimum 21 each time.
    assert [r.objective for r in results] == [pytest.approx(21.0)] * 3
    assert [r.status for r in results] == [Status.OPTIMAL] * 3
    assert [r.details["threads"] for r in results] == [2, 1, 2]


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_objective_of_maps_objective_and_bound(solver):
    """A formulation's objective_of is applied to both the incumbent and the bound."""
    form = small_knapsack().milp()
    scaled = MilpFormulation(form.problem, form.to_schedule, objective_of=lambda v: v / 2)
    raw = get_backend(solver)().solve_formulation(scaled, time_limit=10)
    # PuLP optimum 21 mapped by v / 2: 10.5 for both.
    assert raw.status == Status.OPTIMAL
    assert raw.objective == pytest.approx(10.5)
    assert raw.bound == pytest.approx(10.5)
    assert raw.schedule is not None
    assert schedule_items(raw.schedule) == [1, 3]


def test_backend_rejects_the_wrong_formulation():
    """A MILP handed to CP-SAT, or a non-formulation, raises TypeError."""
    form = small_knapsack().milp()
    with pytest.raises(TypeError, match="backend 'cpsat' does not solve MILP formulations"):
        get_backend("cpsat")().solve_formulation(form, time_limit=1)
    with pytest.raises(TypeError, match="expected a MilpFormulation or CpFormulation, got str"):
        get_backend("highs")().solve_formulation("x", time_limit=1)


def test_solve_model_reports_build_time():
    """Backend.solve_model records the formulation's build time next to the solver counters."""
    raw = get_backend("highs")().solve_model(small_knapsack(), time_limit=10)
    # Optimum 21; build time is a non-negative duration.
    assert raw.objective == pytest.approx(21.0)
    assert raw.details["build_s"] >= 0.0
    assert raw.runtime_s >= 0.0
    assert raw.native is not None


class BadLoop(Knapsack):
    """A model whose custom loop returns something other than a Result."""

    name = "test-bad-loop"

    def solve_with(self, backend, time_limit, **params):
        return {"objective": 1.0}


def test_custom_loop_must_return_a_result():
    """solve_with returning a non-Result raises TypeError naming the class."""
    with pytest.raises(
        TypeError, match="BadLoop.solve_with must return a Result or None, got dict"
    ):
        solve(BadLoop(KnapsackData((1,), ((1,),), (1,))), solver="highs")


class FixedLoop(Knapsack):
    """A model whose custom loop returns a fixed Result with a made-up runtime."""

    name = "test-fixed-loop"

    def solve_with(self, backend, time_limit, **params):
        return Result(Status.FEASIBLE, 3.0, 5.0, 123.0, backend.name, self.name, details={"k": 1})


def test_custom_loop_result_is_used_with_measured_runtime():
    """solve() returns the custom loop's Result, with its own wall time and settings added."""
    result = solve(FixedLoop(KnapsackData((1,), ((1,),), (1,))), solver="cpsat", seed=4)
    assert (result.status, result.objective, result.bound) == (Status.FEASIBLE, 3.0, 5.0)
    # The loop claimed 123 s; the measured wall time of this instant loop is far below.
    assert 0.0 <= result.runtime_s < 123.0
    assert result.details == {"k": 1, "time_limit_s": 60.0, "threads": 1, "seed": 4}
    # Maximization: the optimum lies in [incumbent 3, bound 5], relative gap (5 - 3) / 3.
    assert result.optimum_interval == (3.0, 5.0)
    assert result.gap == pytest.approx(2 / 3)


def test_model_without_name_uses_class_name():
    """An unregistered model without a name is reported under its class name."""

    class Unnamed(ExactModel):
        def brute_force(self, time_limit):
            return None

    result = solve(Unnamed(None), solver="brute")
    assert result.model == "Unnamed"
    assert result.status == Status.INFEASIBLE


def test_seed_and_threads_reach_each_solver():
    """The seed and thread count are set on HiGHS, CP-SAT and CBC."""
    highs = get_backend("highs")(threads=2, seed=7).solve_model(small_knapsack(), time_limit=10)
    assert highs.native.getOptions().random_seed == 7
    assert highs.native.getOptions().threads == 2
    cpsat = get_backend("cpsat")(threads=2, seed=7).solve_model(small_knapsack(), time_limit=10)
    assert cpsat.native.parameters.random_seed == 7
    assert cpsat.native.parameters.num_workers == 2
    cbc = get_backend("cbc")(threads=2, seed=7, log=True).solve_model(
        small_knapsack(), time_limit=10
    )
    # CBC reads seed 0 as "time of day", so slolab passes seed + 1 = 8.
    assert "randomCbcSeed was changed from -1 to 8" in cbc.log
    assert "randomSeed was changed from 1234567 to 8" in cbc.log
    assert "threads was changed from 0 to 2" in cbc.log
    # Optimum 21 whatever the seed and threads.
    assert [highs.objective, cpsat.objective, cbc.objective] == [pytest.approx(21.0)] * 3

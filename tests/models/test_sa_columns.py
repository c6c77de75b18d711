"""SA ordering by batch columns: pricing is exact, the bound is valid, the optimum is brute force's."""

from __future__ import annotations

import itertools
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sa_ordering_cases import NAN, ordering_instance, random_ordering_instance, split_or_batch
from slolab import sim
from slolab.harness.compare import compare
from slolab.instances.io import load_manifest, load_shipped
from slolab.instances.records import Instance
from slolab.models.sa_columns import Column, ColumnMaster, SAOrderingColumns
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel, batches_of
from slolab.solvers import Status, available_models, build_model, solve
from test_sa_ordering import defer_the_strict


def known(name: str) -> dict:
    """The manifest's ``known`` record of a shipped instance."""
    return next(e["known"] for e in load_manifest() if e["name"] == name)


def random_snapshot(seed: int, n: int, b: int) -> Instance:
    """``n`` queued requests, each chat (TTFT + TPOT) or code (e2e) at random, B = ``b``."""
    return random_ordering_instance(seed, n, b)


def all_columns(master: ColumnMaster) -> list[Column]:
    """Every column the master allows: each set, position and claim set that is empty or
    maximal for one deadline setter."""
    n, b = master.n, master.b
    cols = set()
    for s in range(1, b + 1):
        for members in itertools.combinations(range(n), s):
            for p in range(s, n + 1):
                cols.add(Column(members, p, ()))
                if master.ratio is None:
                    continue
                for k in members:
                    late = master.latest[k, s]
                    met = tuple(r for r in members if master.latest[r, s] >= late > -math.inf)
                    col = Column(members, p, met)
                    if met and master.valid(col):
                        cols.add(col)
    return sorted(cols, key=lambda c: (c.end, c.members, c.met))


def test_costs_of_a_hand_made_column() -> None:
    """defer_the_strict (e = 5, 2.5, 2.5 s; B = 1) at lambda = 0.1: a column's cost is its
    duration times the requests after it, plus its members' execution, minus 10 per claim."""
    master = ColumnMaster(OrderingProblem.from_instance(defer_the_strict()), 0.1)
    # request 1 alone at position 1: 2.5 * 2 after + 2.5 own - 10 (claimed) = -2.5
    assert master.cost(Column((1,), 1, (1,))) == pytest.approx(-2.5)
    # request 0 last: 0 after + 5 own, no claim
    assert master.cost(Column((0,), 3, ())) == pytest.approx(5.0)
    # latest starts: request 1 meets by 3 - 2.5 = 0.5 s; request 2 by 5.5 - 2.5 = 3 s
    assert master.deadline(Column((2,), 2, (2,))) == pytest.approx(3.0 + 1e-9, abs=1e-8)
    # a claim the floor rules out: request 1 at position 3 starts after >= 2.5 + 2.5 s > 0.5
    assert not master.valid(Column((1,), 3, (1,)))


@pytest.mark.parametrize("ratio", [None, 0.05, 0.4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pricing_finds_the_most_negative_column(seed: int, ratio: float | None) -> None:
    """After each LP solve, pricing's smallest reduced cost equals the minimum over every column
    (enumerated by brute force), and the reduced cost computed from a column equals HiGHS's."""
    problem = OrderingProblem.from_instance(random_snapshot(seed, 5, 2))
    master = ColumnMaster(problem, ratio)
    plan, _ = SAOrderingModel(problem).starting_plan()
    master.add_plan(plan)
    every = all_columns(master)
    for _ in range(4):
        duals, _ = master._duals()
        found, rc_min = master.price(duals)
        brute = min(master.reduced_cost(c, duals) for c in every)
        assert rc_min == pytest.approx(brute, abs=1e-9)
        if found:
            assert min(master.reduced_cost(c, duals) for c in found) == pytest.approx(
                brute, abs=1e-9
            )
        col_duals = master.highs.getSolution().col_dual[master.n_aux :]
        for col, rc in zip(master.columns, col_duals, strict=True):
            assert master.reduced_cost(col, duals) == pytest.approx(rc, abs=1e-9)
        for col in found:
            master.add(col)


@pytest.mark.parametrize("seed", [4, 5])
def test_enumeration_is_exhaustive(seed: int) -> None:
    """Every column with reduced cost <= the threshold is enumerated, and no other."""
    problem = OrderingProblem.from_instance(random_snapshot(seed, 5, 3))
    master = ColumnMaster(problem, 0.3)
    master.add_plan(SAOrderingModel(problem).starting_plan()[0])
    _, lb, duals, converged = master.solve_lp(time.perf_counter() + 30)
    assert converged
    every = all_columns(master)
    threshold = 2.0
    listed = master.enumerate(duals, threshold, time.perf_counter() + 30)
    assert listed is not None
    expected = {c for c in every if master.reduced_cost(c, duals) <= threshold - 1e-9}
    assert expected <= set(listed)
    assert all(master.reduced_cost(c, duals) <= threshold + 1e-9 for c in listed)


def test_lp_bound_holds_for_every_plan() -> None:
    """F(x) = L - M / lambda >= the master's lower bound for every plan of a 5-request snapshot
    (each ordered partition evaluated exactly)."""
    problem = OrderingProblem.from_instance(random_snapshot(7, 5, 2))
    lam = 0.2
    master = ColumnMaster(problem, lam)
    master.add_plan(SAOrderingModel(problem).starting_plan()[0])
    _, lb, _, converged = master.solve_lp(time.perf_counter() + 30)
    assert converged
    worst = math.inf
    for order in itertools.permutations(range(5)):
        for cuts in itertools.product([False, True], repeat=4):
            plan, batch = [], [order[0]]
            for r, cut in zip(order[1:], cuts, strict=True):
                if cut or len(batch) == 2:
                    plan.append(tuple(batch))
                    batch = []
                batch.append(r)
            plan.append(tuple(batch))
            value = problem.evaluate(plan)
            worst = min(worst, value.total_latency_s - value.met_requests / lam)
    assert lb <= worst + 1e-9
    # the bound is not vacuous: within 1 s of the best plan on this instance
    assert worst - lb < 1.0


def test_unclaimable_requests_are_never_claimed() -> None:
    """defer_the_strict at lambda = 2 / 17.5 (8.75 s per met request). Unrestricted, the LP
    is integral at the optimum (1), (2), (0): latency 2.5 + 5 + 10 = 17.5, requests 1 and 2
    met, F = 17.5 - 2 * 8.75 = 0. With 1 and 2 unclaimable only request 0 can count: first,
    its latencies are 5 + 7.5 + 10 = 22.5 and F = 22.5 - 8.75 = 13.75 (no claim at all: 17.5)."""
    problem = OrderingProblem.from_instance(defer_the_strict())
    lam = 2 / 17.5
    values = {}
    for unclaimable in [(), (1,), (1, 2)]:
        master = ColumnMaster(problem, lam, unclaimable)
        master.add_plan(((1,), (2,), (0,)))
        value, _, _, converged = master.solve_lp(time.perf_counter() + 30)
        assert converged
        values[unclaimable] = (value, master.claimed().tolist())
    assert values[()][0] == pytest.approx(0.0, abs=1e-9)
    assert values[()][1] == pytest.approx([0.0, 1.0, 1.0])
    assert values[1, 2][0] == pytest.approx(13.75)
    assert values[1, 2][1] == pytest.approx([1.0, 0.0, 0.0])
    # only request 1 barred: the best plan is (2), (1), (0), 17.5 - 8.75 = 8.75; the LP is a
    # relaxation between the unrestricted value and that
    value, claimed = values[1,]
    assert claimed[1] == 0.0
    assert 0.0 - 1e-9 <= value <= 8.75 + 1e-9
    with pytest.raises(ValueError, match="unclaimable request 3"):
        ColumnMaster(problem, lam, [3])


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_hand_solved_instances(solver: str) -> None:
    """The two hand-solved instances of test_sa_ordering: G = 0.2 and 2 / 17.5."""
    result = solve(SAOrderingColumns(split_or_batch()), solver, time_limit=20)
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(0.2, rel=1e-12)
    assert batches_of(result.schedule) == ((1,), (0,))
    result = solve(SAOrderingColumns(defer_the_strict()), solver, time_limit=20)
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(2 / 17.5, rel=1e-12)
    assert batches_of(result.schedule) == ((1,), (2,), (0,))


def test_nobody_can_meet() -> None:
    """With e2e SLOs below every execution time, G* = 0 and the bound says so."""
    instance = ordering_instance([4, 2], [NAN, NAN], [NAN, NAN], [0.1, 0.1], batch_size=2)
    result = solve(SAOrderingColumns(instance), "highs", time_limit=20)
    assert result.status == Status.OPTIMAL
    assert result.objective == 0.0 and result.bound == 0.0


def test_arrivals_fall_back_to_position_arcs() -> None:
    """An instance with later arrivals is solved by the position-arc MILP (G = 1 / 4.25)."""
    instance = ordering_instance([2, 1], [NAN, NAN], [NAN, NAN], [3.0, 1.0], 2, arrival=[0.0, 2.0])
    result = solve(SAOrderingColumns(instance), "highs", time_limit=20)
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(1 / 4.25, rel=1e-12)
    assert "enumerated" not in result.details


def test_registered_and_reached_by_alias() -> None:
    """'sa-ordering-columns' is a registered model; 'columns' is a compare method on SA instances."""
    assert "sa-ordering-columns" in available_models()
    assert isinstance(build_model("sa-ordering-columns", split_or_batch()), SAOrderingColumns)
    table = compare(defer_the_strict(), ["columns", "brute"], seed=0, time_limit=20)
    rows = table.set_index("method")
    assert rows.loc["columns", "status"] == "OPTIMAL"
    # both recomputed from their replays: 2 / 17.5
    assert rows.loc["columns", "objective"] == pytest.approx(2 / 17.5, rel=1e-9)
    assert rows.loc["brute", "objective"] == pytest.approx(2 / 17.5, rel=1e-9)


def test_shipped_n20_is_proved_quickly() -> None:
    """The shipped 20-request snapshot is proved OPTIMAL at the manifest's optimum; the
    schedule replays to the same G with no violation."""
    instance = load_shipped("sa-azure-n20-b4")
    optimum = known("sa-azure-n20-b4")["optimum"]
    result = solve(SAOrderingColumns(instance), "highs", time_limit=60)
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(optimum, rel=1e-9)
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(optimum, rel=1e-9)


def test_time_limit_gives_an_interval_above_the_known_incumbent() -> None:
    """On the shipped 40-request snapshot a short run stops unproved (TIME_LIMIT, or FEASIBLE
    when it gives up early) with an incumbent at least the starting plan's, and its bound is above the best G known for the instance (a plan
    found by the position-arc MILP), and tighter than that MILP's own bound."""
    instance = load_shipped("sa-azure-n40-b4")
    record = known("sa-azure-n40-b4")
    model = SAOrderingColumns(instance)
    result = solve(model, "highs", time_limit=8)
    assert result.status in (Status.TIME_LIMIT, Status.FEASIBLE)
    lo, hi = result.optimum_interval
    assert lo >= model.starting_plan()[1].g
    assert record["incumbent"] <= hi < record["bound"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(3, 6),
    b=st.integers(1, 3),
)
def test_columns_agree_with_brute_force(seed: int, n: int, b: int) -> None:
    """On random snapshots the column method (HiGHS and CBC) proves brute force's G*."""
    instance = random_snapshot(seed, n, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    assert brute.status == Status.OPTIMAL
    for solver in ("highs", "cbc"):
        result = solve(SAOrderingColumns(instance), solver, time_limit=30)
        assert result.status == Status.OPTIMAL, solver
        assert result.objective == pytest.approx(brute.objective, rel=1e-9), solver
        assert result.bound >= result.objective

"""SA ordering by branch-and-price on SCIP: complete branching, the optima of the other methods."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sa_ordering_cases import random_ordering_instance, split_or_batch
from slolab import sim
from slolab.harness.compare import compare
from slolab.heuristics.sa_ordering import sa_order
from slolab.models.sa_bp import (
    Decisions,
    SAOrderingBranchPrice,
    best_columns,
    blind_split,
    branch_and_price,
    position_shares,
)
from slolab.models.sa_columns import Column, ColumnMaster, SAOrderingColumns
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel, batches_of
from slolab.solvers import Status, available_models, build_model, solve
from test_sa_columns import all_columns
from test_sa_ordering import defer_the_strict

pytest.importorskip("pyscipopt")


def every_plan(items: tuple[int, ...], b: int):
    """Every ordered split of ``items`` into batches of 1..``b`` requests."""
    if not items:
        yield ()
        return
    for s in range(1, min(b, len(items)) + 1):
        for batch in itertools.combinations(items, s):
            left = tuple(i for i in items if i not in batch)
            for tail in every_plan(left, b):
                yield (batch, *tail)


def min_f(problem: OrderingProblem, ratio: float) -> float:
    """``min_plan L - M / ratio`` (s) by listing every plan."""
    values = (problem.evaluate(p) for p in every_plan(tuple(range(problem.n_requests)), 3))
    return min(v.total_latency_s - v.met_requests / ratio for v in values)


def root_master(seed: int, ratio_share: float) -> tuple[OrderingProblem, ColumnMaster, float]:
    """The column LP of random snapshot ``seed`` (6 requests, B = 3) at ``ratio_share`` x G*,
    solved to convergence; returns the problem, the master and its LP value."""
    instance = random_ordering_instance(seed, 6, 3)
    problem = OrderingProblem.from_instance(instance)
    optimum = solve(SAOrderingModel(instance), "brute", time_limit=30).objective
    master = ColumnMaster(problem, ratio_share * optimum)
    master.add_plan(SAOrderingModel(problem).starting_plan()[0])
    value, _, _, converged = master.solve_lp(time.perf_counter() + 30)
    assert converged
    return problem, master, value


def test_branching_is_complete_where_the_root_lp_is_fractional() -> None:
    """Seed 15 at lambda = 0.97 G*: the root LP (-0.524 s) is below every plan; branch-and-price
    without an objective limit finds the exact minimum of F over all plans (brute force)."""
    problem, master, lp_value = root_master(15, 0.97)
    exact = min_f(problem, master.ratio)
    # the LP is fractional: its value is 0.399 s below the best plan's F
    assert lp_value < exact - 0.3
    step = branch_and_price(master, list(master.columns), 1e20, 30.0, seed=0)
    assert step.finished
    assert step.details["nodes"] > 1
    assert step.f_lower == pytest.approx(exact, abs=1e-9)
    best = min(
        problem.evaluate(p).total_latency_s - problem.evaluate(p).met_requests / master.ratio
        for p in step.plans
    )
    assert best == pytest.approx(exact, abs=1e-9)


@pytest.mark.parametrize("seed", [9, 18, 50, 55])
def test_branch_and_price_minimizes_f_like_brute_force(seed: int) -> None:
    """On four fractional roots (seeds found by listing), the proved min F equals brute force's."""
    problem, master, lp_value = root_master(seed, 0.97)
    exact = min_f(problem, master.ratio)
    assert lp_value < exact - 1e-6
    step = branch_and_price(master, list(master.columns), 1e20, 30.0, seed=0)
    assert step.finished
    assert step.f_lower == pytest.approx(exact, abs=1e-9)


def test_decisions_forbid_what_they_say() -> None:
    """A column at a forbidden arc, one missing a fixed request, one claiming an unclaimed one
    and one leaving a claimed one unclaimed are refused; the rest pass."""
    decisions = Decisions().with_forbidden({(2, 2)}).with_fixed(0, (1, 1))
    assert not decisions.allows(Column((1, 2), 2, ()))  # arc (2, 2) forbidden
    assert not decisions.allows(Column((0, 1), 3, ()))  # request 0 belongs to arc (1, 1)
    assert not decisions.allows(Column((1,), 1, ()))  # arc (1, 1) must hold request 0
    assert decisions.allows(Column((0,), 1, (0,)))
    claims = Decisions().with_unclaimed(3, (4, 2)).with_claimed(1, (2, 1))
    assert not claims.allows(Column((2, 3), 4, (2, 3)))
    assert claims.allows(Column((2, 3), 4, (2,)))
    assert not claims.allows(Column((1,), 2, ()))
    assert claims.allows(Column((1,), 2, (1,)))


def test_position_decisions_forbid_what_they_say() -> None:
    """Request 2 ending by position 3 keeps it out of every arc ending at 4 or later; request 1
    ending after position 2 keeps it out of every arc ending at 1 or 2."""
    decisions = Decisions().with_ends_by(2, 3).with_ends_after(1, 2)
    assert decisions.allows(Column((0, 2), 3, ()))  # positions 2..3
    assert not decisions.allows(Column((2,), 4, ()))
    assert not decisions.allows(Column((1, 3), 2, ()))  # positions 1..2
    assert decisions.allows(Column((1, 3), 4, (1,)))
    assert decisions.banned_at(2) == {1}
    assert decisions.banned_at(3) == frozenset()
    assert decisions.banned_at(4) == {2}


def test_blind_split_keeps_every_plan_and_ends() -> None:
    """The split for a node without an LP solution: down any path of its children every plan
    of a 4-request snapshot (B = 3) stays allowed at exactly one child of each split, and the
    path ends (None) with every request met or missed and every position decided."""
    n = 4
    plans = list(every_plan(tuple(range(n)), 3))
    rng = np.random.default_rng(0)
    for _ in range(5):
        decisions = Decisions()
        splits = 0
        while (split := blind_split(decisions, n)) is not None:
            splits += 1
            for plan in plans:
                ends = np.cumsum([len(b) for b in plan])
                for met in ((), tuple(range(n))):
                    cols = [
                        Column(tuple(b), int(e), tuple(r for r in b if r in met))
                        for b, e in zip(plan, ends, strict=True)
                    ]
                    if all(decisions.allows(c) for c in cols):
                        kept = [all(child.allows(c) for c in cols) for child in split]
                        assert sum(kept) == 1, (plan, met, decisions)
            decisions = split[int(rng.integers(2))]
        assert splits == n + n * (n - 1)
        assert decisions.met | decisions.missed == set(range(n))


def test_position_options_are_checked() -> None:
    """An unknown place or split of the position level is refused when the model is built."""
    with pytest.raises(ValueError, match="position must be one of"):
        SAOrderingBranchPrice(split_or_batch(), position="last")
    with pytest.raises(ValueError, match="position_pick must be one of"):
        SAOrderingBranchPrice(split_or_batch(), position_pick="random")


def test_position_shares_of_a_fractional_solution() -> None:
    """Request 0 two thirds in a batch ending at position 2, one third in one ending at 4:
    ``z_0p`` is 0, 2/3, 2/3 at p = 1, 2, 3; request 3, held by no column, has no share."""
    values = [(Column((0, 1), 2, ()), 2 / 3), (Column((0, 2), 4, ()), 1 / 3)]
    z = position_shares(values, 4)
    assert [z[0, p] for p in (1, 2, 3)] == pytest.approx([0.0, 2 / 3, 2 / 3])
    assert z[1, 2] == pytest.approx(2 / 3)
    assert (3, 1) not in z


def random_decisions(seed: int, n: int) -> Decisions:
    """One to three position decisions on random requests and positions, and on some seeds
    a met or missed request and a request fixed to an arc."""
    rng = np.random.default_rng(seed)
    decisions = Decisions()
    for _ in range(int(rng.integers(1, 4))):
        r, p = int(rng.integers(n)), int(rng.integers(1, n))
        if rng.random() < 0.5:
            decisions = decisions.with_ends_by(r, p)
        else:
            decisions = decisions.with_ends_after(r, p)
    if seed % 3 == 1:
        decisions = decisions.with_met(int(rng.integers(n)))
    if seed % 3 == 2:
        decisions = decisions.with_missed(int(rng.integers(n)))
        decisions = decisions.with_fixed(int(rng.integers(n)), (4, 2))
    return decisions


def allowed_columns(master: ColumnMaster, decisions: Decisions) -> list[Column]:
    """Every valid column the node's ``decisions`` allow: each set and position, with no claim
    or the claim set of one deadline setter among the members the node lets be claimed there
    (all but the missed and the unclaimed)."""
    n, b = master.n, master.b
    cols = set()
    for s in range(1, b + 1):
        for members in itertools.combinations(range(n), s):
            for p in range(s, n + 1):
                never = decisions.missed | {r for r, a in decisions.unclaimed if a == (p, s)}
                claimable = [r for r in members if r not in never]
                cols.add(Column(members, p, ()))
                for k in claimable:
                    late = master.latest[k, s]
                    met = tuple(r for r in claimable if master.latest[r, s] >= late > -math.inf)
                    cols.add(Column(members, p, met))
    return [c for c in cols if decisions.allows(c) and (not c.met or master.valid(c))]


@pytest.mark.parametrize("seed", range(8))
def test_pricing_under_position_decisions_is_exact(seed: int) -> None:
    """At the root LP's duals of a random snapshot, under random position decisions (with a
    met, missed or fixed request on some seeds), pricing's column at every arc is allowed
    and of the smallest reduced cost among the allowed columns of a brute-force listing."""
    problem, master, _ = root_master(seed, 0.97)
    duals, _ = master._duals()
    decisions = random_decisions(seed, problem.n_requests)
    every = allowed_columns(master, decisions)
    if not decisions.missed:
        # without a missed request the family is the column method's
        assert set(every) == {c for c in all_columns(master) if decisions.allows(c)}
    best = best_columns(master, duals, decisions)
    arcs = {(c.end, c.size) for c in every}
    assert arcs <= set(best)
    for arc in arcs:
        col, _ = best[arc]
        assert decisions.allows(col), (arc, col)
        brute = min(master.reduced_cost(c, duals) for c in every if (c.end, c.size) == arc)
        assert master.reduced_cost(col, duals) == pytest.approx(brute, abs=1e-6)


@pytest.mark.parametrize(
    ("position", "pick", "best_first"),
    [
        ("first", "fractional", True),
        ("after-met", "fractional", True),
        ("first", "spread", True),
        ("after-met", "spread", True),
        ("after-met", "fractional", False),
    ],
)
@pytest.mark.parametrize("seed", [9, 15, 18, 50, 55])
def test_position_branching_minimizes_f_like_brute_force(
    seed: int, position: str, pick: str, best_first: bool
) -> None:
    """On the fractional roots above, with the position level before or after the met-request
    level, splitting the most fractional ``z_rp`` or the most spread request's, and with SCIP's
    own node selection instead of the smallest bound first, the proved min F equals brute
    force's."""
    problem, master, _ = root_master(seed, 0.97)
    exact = min_f(problem, master.ratio)
    step = branch_and_price(
        master,
        list(master.columns),
        1e20,
        30.0,
        seed=0,
        position=position,
        position_pick=pick,
        best_first=best_first,
    )
    assert step.finished
    assert step.f_lower == pytest.approx(exact, abs=1e-9)


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_hand_solved_instances(solver: str) -> None:
    """The two hand-solved instances of test_sa_ordering: G = 0.2 and 2 / 17.5."""
    result = solve(SAOrderingBranchPrice(split_or_batch(), anneal=sa_order), solver, time_limit=20)
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(0.2, rel=1e-12)
    assert batches_of(result.schedule) == ((1,), (0,))
    result = solve(
        SAOrderingBranchPrice(defer_the_strict(), anneal=sa_order), solver, time_limit=20
    )
    assert result.status == Status.OPTIMAL
    assert result.objective == pytest.approx(2 / 17.5, rel=1e-12)


def test_registered_and_reached_by_alias() -> None:
    """'sa-ordering-bp' is a registered model; 'bp' is a compare method on SA instances."""
    assert "sa-ordering-bp" in available_models()
    assert isinstance(build_model("sa-ordering-bp", split_or_batch()), SAOrderingBranchPrice)
    table = compare(defer_the_strict(), ["bp", "brute"], seed=0, time_limit=20)
    rows = table.set_index("method")
    assert rows.loc["bp", "status"] == "OPTIMAL"
    # both recomputed from their replays: 2 / 17.5
    assert rows.loc["bp", "objective"] == pytest.approx(2 / 17.5, rel=1e-9)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(4, 6), b=st.integers(2, 3))
def test_bp_agrees_with_brute_force_arc_milp_and_columns(seed: int, n: int, b: int) -> None:
    """On random snapshots branch-and-price proves brute force's G*, as do the arc MILP and the
    column method; its plan replays to that G with no violation."""
    instance = random_ordering_instance(seed, n, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    assert brute.status == Status.OPTIMAL
    models = [
        SAOrderingBranchPrice(instance, anneal=sa_order),
        SAOrderingBranchPrice(instance, warm_start=False),
        SAOrderingBranchPrice(instance, warm_start=False, position="first"),
        SAOrderingBranchPrice(instance, warm_start=False, position=None),
        SAOrderingBranchPrice(instance, warm_start=False, best_first=False),
        SAOrderingColumns(instance),
        SAOrderingModel(instance),
    ]
    for model in models:
        result = solve(model, "highs", time_limit=30)
        assert result.status == Status.OPTIMAL, model.name
        assert result.objective == pytest.approx(brute.objective, rel=1e-9), model.name
        assert result.bound >= result.objective
    result = solve(SAOrderingBranchPrice(instance, warm_start=False), "highs", time_limit=30)
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(result.objective, rel=1e-9)


def test_time_limit_gives_an_honest_interval() -> None:
    """A 3 s run on a 20-request snapshot whose LP gap is wide (without the start-time bounds,
    which prove it in about 3 s) ends unproved, with the optimum bracketed: incumbent <= bound,
    and the incumbent replays to its G."""
    from slolab.problems.sa_ordering import sa_snapshot

    instance = sa_snapshot(20, 4, seed=0)
    model = SAOrderingBranchPrice(instance, anneal=sa_order, bounds=False)
    result = solve(model, "highs", time_limit=3)
    assert result.status in (Status.TIME_LIMIT, Status.FEASIBLE)
    lo, hi = result.optimum_interval
    assert 0 < lo < hi < math.inf
    # SCIP's own limit stops the search: far below the 60 s an unlimited run takes
    assert result.runtime_s < 30
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(lo, rel=1e-9)


def test_a_last_milp_follows_scip_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the warm start, SCIP stopping at its limit leaves a share of the limit (here 1.2 of
    6 s, the warm start cut to 0.6 s so that a loaded machine still reaches SCIP) to a
    restricted MILP over every column known; the run still ends with an honest interval.
    The position level and the smallest-bound-first node order are left out (the former
    search): with them, the SCIP run may find a better plan and start a second one, whose
    timing depends on the machine."""
    import slolab.models.sa_bp as sa_bp
    from slolab.problems.sa_ordering import sa_snapshot

    monkeypatch.setattr(sa_bp, "WARM_START_SHARE", 0.1)
    monkeypatch.setattr(sa_bp, "FINAL_MILP_SHARE", 0.2)
    instance = sa_snapshot(20, 4, seed=0)
    model = SAOrderingBranchPrice(
        instance, anneal=sa_order, bounds=False, position=None, best_first=False
    )
    result = solve(model, "highs", time_limit=6)
    assert result.status == Status.TIME_LIMIT
    assert result.details["scip_runs"] == 1
    assert result.details["final_milp"] in ("improved", "TIME_LIMIT", "OPTIMAL", "FEASIBLE")
    lo, hi = result.optimum_interval
    assert 0 < lo < hi < math.inf
    assert result.runtime_s < 30
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(lo, rel=1e-9)

"""SA ordering claim-capacity cuts: valid for every plan, violated by the LP, priced exactly."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sa_ordering_cases import random_ordering_instance, tight_ordering_instance
from slolab import sim
from slolab.models.sa_bp import SAOrderingBranchPrice
from slolab.models.sa_columns import (
    ClaimCut,
    ColumnMaster,
    SAOrderingColumns,
    claim_capacity_cuts,
    latency_floor,
    ratio_bound,
)
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel
from slolab.solvers import Status, solve
from test_sa_bp import every_plan
from test_sa_columns import all_columns

pytest.importorskip("pyscipopt")


def met_set(problem: OrderingProblem, plan: tuple[tuple[int, ...], ...]) -> set[int]:
    """The requests a plan meets (latest starts; the count is checked against the exact
    evaluator)."""
    met: set[int] = set()
    start = 0.0
    for batch in plan:
        s = len(batch)
        met.update(r for r in batch if problem.latest_start_s[r, s] >= start)
        start += max(float(problem.exec_s[r, s]) for r in batch)
    assert len(met) == problem.evaluate(plan).met_requests
    return met


def check_pricing(master: ColumnMaster, rounds: int) -> tuple[list[np.ndarray], bool]:
    """Column generation for at most ``rounds`` rounds, each checked: pricing's smallest
    reduced cost equals the minimum over every column, and each column's reduced cost equals
    HiGHS's. Returns the duals of each round and whether it converged."""
    every = all_columns(master)
    seen = []
    for _ in range(rounds):
        duals, _ = master._duals()
        seen.append(duals)
        found, rc_min = master.price(duals)
        assert rc_min == pytest.approx(min(master.reduced_cost(c, duals) for c in every), abs=1e-9)
        col_duals = master.highs.getSolution().col_dual[master.n_aux :]
        for col, rc in zip(master.columns, col_duals, strict=True):
            assert master.reduced_cost(col, duals) == pytest.approx(rc, abs=1e-9)
        if not found:
            return seen, True
        for col in found:
            master.add(col)
    return seen, False


def seed_48() -> OrderingProblem:
    """Random snapshot 48: 6 requests, B = 2 (requests 3, 4, 5 meet only in a batch starting
    by 0.42, 0.21 and 0.17 s, and each runs at least 0.51 s)."""
    return OrderingProblem.from_instance(random_ordering_instance(48, 6, 2))


def test_cuts_of_seed_48_by_hand() -> None:
    """Seed 48 has two cuts: at most 2 of {3, 4, 5} and at most 2 of {1, 3, 4, 5} meet."""
    problem = seed_48()
    # {3, 4, 5}: a second batch starts after >= 0.5057 s (request 3 alone, the shortest of the
    # set) > 0.4224 s (the latest start of any of them), so only the first batch (2 members)
    # can meet; adding request 1 (latest start 0.5417 s, shortest run 0.5121 s) changes nothing
    assert claim_capacity_cuts(problem) == [
        ClaimCut((3, 4, 5), 2),
        ClaimCut((1, 3, 4, 5), 2),
    ]


def test_the_lp_violates_a_cut_and_the_cut_closes_the_root_gap() -> None:
    """Seed 48 at lambda = G*: the plain column LP claims 2.41 of {3, 4, 5} (limit 2) and is
    1.838 s below every plan; with the cuts its value is 0 = min F, so the bound is G* itself."""
    problem = seed_48()
    optimum = solve(SAOrderingModel(problem), "brute", time_limit=30).objective
    master = ColumnMaster(problem, optimum)
    master.add_plan(SAOrderingModel(problem).starting_plan()[0])
    plain, _, _, converged = master.solve_lp(time.perf_counter() + 30)
    assert converged
    claimed = master.claimed()
    # 1 (request 3) + 0.704 + 0.704 (requests 4 and 5 half-claimed in overlapping batches)
    assert claimed[[3, 4, 5]].sum() == pytest.approx(2.408050, abs=1e-6)
    assert plain == pytest.approx(-1.837769, abs=1e-6)
    assert master.violated(claim_capacity_cuts(problem)) == claim_capacity_cuts(problem)
    value, lower, _, converged = master.separate(claim_capacity_cuts(problem), time.time() + 30)
    assert converged and len(master.cuts) == 2
    # at lambda = G*, min F over the plans is 0: the cut LP reaches it
    assert value == pytest.approx(0.0, abs=1e-9)
    assert lower == pytest.approx(0.0, abs=1e-9)
    floor = latency_floor(problem, SAOrderingModel(problem).starting_plan()[0], math.inf)
    assert ratio_bound(optimum, lower, floor) == pytest.approx(optimum, rel=1e-9)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 6), b=st.integers(1, 3))
def test_cuts_hold_for_every_plan(seed: int, n: int, b: int) -> None:
    """No plan of a random snapshot with binding SLOs meets more of a cut's requests than its
    limit (every plan listed)."""
    problem = OrderingProblem.from_instance(tight_ordering_instance(seed, n, b))
    cuts = claim_capacity_cuts(problem)
    most = {cut: 0 for cut in cuts}
    for plan in every_plan(tuple(range(n)), b):
        met = met_set(problem, plan)
        for cut in cuts:
            most[cut] = max(most[cut], len(met.intersection(cut.requests)))
    for cut in cuts:
        assert most[cut] <= cut.limit < len(cut.requests)


def test_cut_limits_are_mostly_reached() -> None:
    """Over the binding-SLO snapshots 0-9 (6 requests, B = 2): 27 cuts on 10 instances, and
    on 23 of them some plan meets exactly the limit (the others are valid but not tight)."""
    reached = total = instances = 0
    for seed in range(10):
        problem = OrderingProblem.from_instance(tight_ordering_instance(seed, 6, 2))
        cuts = claim_capacity_cuts(problem)
        instances += bool(cuts)
        if not cuts:
            continue
        plans = [met_set(problem, p) for p in every_plan(tuple(range(6)), 2)]
        for cut in cuts:
            total += 1
            most = max(len(m.intersection(cut.requests)) for m in plans)
            assert most <= cut.limit
            reached += most == cut.limit
    assert (reached, total, instances) == (23, 27, 10)


@pytest.mark.parametrize(("seed", "b"), [(48, 2), (65, 2), (85, 3)])
def test_pricing_with_cuts_finds_the_most_negative_column(seed: int, b: int) -> None:
    """With the cuts in the master (their duals nonzero), pricing's smallest reduced cost equals
    the minimum over every column, and each column's reduced cost equals HiGHS's."""
    problem = OrderingProblem.from_instance(random_ordering_instance(seed, 6, b))
    optimum = solve(SAOrderingModel(problem), "brute", time_limit=30).objective
    master = ColumnMaster(problem, optimum, cuts=claim_capacity_cuts(problem))
    master.add_plan(SAOrderingModel(problem).starting_plan()[0])
    rounds, _ = check_pricing(master, 6)
    assert any((master.claim_duals(duals) < -1e-9).any() for duals in rounds)


def test_lp_bound_with_cuts_holds_for_every_plan() -> None:
    """Seed 85 (6 requests, B = 3) at lambda = 0.97 G*: the cut LP's lower bound on F is at most
    every plan's F, and above the plain LP's."""
    problem = OrderingProblem.from_instance(random_ordering_instance(85, 6, 3))
    optimum = solve(SAOrderingModel(problem), "brute", time_limit=30).objective
    lam = 0.97 * optimum
    plan = SAOrderingModel(problem).starting_plan()[0]
    plain = ColumnMaster(problem, lam)
    plain.add_plan(plan)
    _, plain_lb, _, _ = plain.solve_lp(time.perf_counter() + 30)
    cut = ColumnMaster(problem, lam)
    cut.add_plan(plan)
    _, cut_lb, _, converged = cut.separate(claim_capacity_cuts(problem), time.perf_counter() + 30)
    assert converged and cut.cuts
    worst = min(
        v.total_latency_s - v.met_requests / lam
        for v in (problem.evaluate(p) for p in every_plan(tuple(range(6)), 3))
    )
    # measured: plain -1.4068 s, with the cut -1.1809 s, best plan above both
    assert plain_lb == pytest.approx(-1.406814, abs=1e-5)
    assert cut_lb == pytest.approx(-1.180926, abs=1e-5)
    assert cut_lb <= worst + 1e-9


def test_claim_cut_validates_itself() -> None:
    """A cut needs requests and a limit below their number."""
    with pytest.raises(ValueError, match="at least one request"):
        ClaimCut((), 0)
    with pytest.raises(ValueError, match="limit must be in 0..1"):
        ClaimCut((0, 1), 2)
    with pytest.raises(ValueError, match="need a ratio"):
        ColumnMaster(seed_48(), None, cuts=[ClaimCut((3, 4, 5), 2)])


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(4, 6), b=st.integers(2, 3))
def test_methods_with_cuts_equal_brute_force(seed: int, n: int, b: int) -> None:
    """With the cuts, the column method and branch-and-price (SCIP alone, no warm start) prove
    brute force's G* on snapshots with binding SLOs; each plan replays to its objective with no
    violation."""
    instance = tight_ordering_instance(seed, n, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    assert brute.status == Status.OPTIMAL
    for model in (
        SAOrderingColumns(instance, cuts=True),
        SAOrderingBranchPrice(instance, warm_start=False, cuts=True),
    ):
        result = solve(model, "highs", time_limit=30)
        assert result.status == Status.OPTIMAL, model.name
        assert result.objective == pytest.approx(brute.objective, rel=1e-9), model.name
        outcome = sim.replay(instance, result.schedule)
        assert sim.check(instance, outcome) == []
        assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(result.objective, rel=1e-9)


@pytest.mark.parametrize(("seed", "b", "cuts"), [(0, 2, 1), (7, 2, 2), (27, 2, 2)])
def test_methods_that_separate_cuts_equal_brute_force(seed: int, b: int, cuts: int) -> None:
    """Binding-SLO snapshots on which both methods add cuts: both still prove brute force's G*,
    and the plans replay to it checker-clean."""
    instance = tight_ordering_instance(seed, 6, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    for model in (
        SAOrderingColumns(instance, bounds=False),
        SAOrderingBranchPrice(instance, warm_start=False, bounds=False),
    ):
        result = solve(model, "highs", time_limit=30)
        assert result.details["cuts"] == cuts, model.name
        assert result.status == Status.OPTIMAL, model.name
        assert result.objective == pytest.approx(brute.objective, rel=1e-9), model.name
        outcome = sim.replay(instance, result.schedule)
        assert sim.check(instance, outcome) == []
        assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(brute.objective, rel=1e-9)


@pytest.mark.parametrize(("seed", "b"), [(1, 3), (11, 2), (26, 2), (27, 2)])
def test_cuts_prove_at_the_root_what_needs_a_tree_without(seed: int, b: int) -> None:
    """On these binding-SLO snapshots the LP with the cuts proves G* at the root (no SCIP run,
    no column listed); without them branch-and-price needs a SCIP tree (3-17 nodes measured).
    The start-time bounds are left out on both sides (they prove some of these alone)."""
    instance = tight_ordering_instance(seed, 6, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    model = SAOrderingBranchPrice(instance, warm_start=False, bounds=False)
    with_cuts = solve(model, "highs", time_limit=30)
    assert with_cuts.status == Status.OPTIMAL
    assert with_cuts.objective == pytest.approx(brute.objective, rel=1e-9)
    assert with_cuts.details["scip_runs"] == 0 and with_cuts.details["cuts"] >= 1
    plain = SAOrderingBranchPrice(instance, warm_start=False, cuts=False, bounds=False)
    without = solve(plain, "highs", time_limit=30)
    assert without.status == Status.OPTIMAL
    assert without.objective == pytest.approx(brute.objective, rel=1e-9)
    assert without.details["scip_runs"] == 1 and without.details["nodes"] >= 3
    assert without.details["cuts"] == 0

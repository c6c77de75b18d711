"""The column master with integral completed-iteration counts by branch-and-price on SCIP
(``tdg-horizon-columns-bp``): the hand windows of the column tests, windows where the integral
counts strictly tighten the bound, a seeded battery where optimum <= bp <= columns on the same
grid, determinism, and the ``columns-bp`` method of compare."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.instances.records import Instance
from slolab.models.proserve import TdgHorizon
from slolab.models.tdg_bp import TdgHorizonBranchPrice
from slolab.models.tdg_columns import TdgHorizonColumns
from slolab.problems import get_problem
from slolab.solvers import Status, solve
from tdg_horizon_cases import (
    horizon_instance,
    proved_optimum,
    small_window_rows,
    three_requests,
    two_prompts,
)

#: The grid of every comparison (as in the column tests: one fixed grid for both bounds).
SPACING_S = 0.005
#: Both bounds carry the LP margin (1e-6 relative and absolute) and the LP solvers' primal and
#: dual tolerances (1e-7 per row in HiGHS, 1e-6 / 1e-7 in SCIP), which may add up.
TOL = 1e-5


def bp_bound(inst: Instance, chain: bool = False, time_limit: float = 60):
    return solve(
        TdgHorizonBranchPrice(inst, spacing_s=SPACING_S, chain=chain),
        solver="highs",
        time_limit=time_limit,
    )


def columns_bound(inst: Instance, chain: bool = False) -> float:
    res = solve(
        TdgHorizonColumns(inst, spacing_s=SPACING_S, chain=chain), solver="highs", time_limit=60
    )
    assert res.status == Status.OPTIMAL and res.bound is not None
    return res.bound


def five_requests() -> Instance:
    """Five one- or two-token requests at 0, 0, 0, 12 and 20 ms (found by a seeded search of
    small windows, the column battery's distribution)."""
    rows = [
        (0.0, 4, 2, 0.02, 0.008, 1.0),
        (0.0, 6, 1, 0.05, 0.012, 1.0),
        (0.0, 11, 1, 0.03, 0.03, 1.0),
        (0.012, 2, 1, 0.02, 0.008, 1.0),
        (0.02, 3, 1, 0.012, 0.008, 1.0),
    ]
    return horizon_instance(*[list(c) for c in zip(*rows, strict=True)])


def test_two_prompts_without_chain_stay_at_the_columns_bound():
    """Two prompts at 0 (TTFT 25 ms): 7.5 as the columns; each needs one completed iteration."""
    res = bp_bound(two_prompts())
    # B's column (10 ms), half of A's (5 ms) and N = C = 1 (10 ms) fill the 25 ms: each
    # request's tokens need only C_j - C_0 >= 1, which one whole iteration gives both;
    # 2 * 3 + 0.5 * 3 = 7.5 (the optimum is 6)
    assert res.status == Status.OPTIMAL
    assert res.bound == pytest.approx(7.5, abs=1e-4)
    assert res.bound == pytest.approx(columns_bound(two_prompts()), abs=1e-4)


def test_two_prompts_with_chain_reach_the_optimum():
    """Two prompts at 0 with the chain rows: 6, the optimum, below columns-chain's 6.75."""
    inst = two_prompts()
    res = bp_bound(inst, chain=True)
    # A and B cannot share (10 + 10 + 10 > 25 ms), so each on-time first token leads an
    # iteration inside (0, 25 ms]: C(25 ms) >= x_AA + x_BB with C integer and N >= C; with B
    # on time, any share of A forces C = 2, N >= 2: 20 + 10 + 10 x_A > 25 ms, so x_A = 0 and
    # the bound is B's 2 * 3 = 6 (columns-chain keeps N = 1.25 fluid: 6.75)
    assert res.status == Status.OPTIMAL
    assert res.bound == pytest.approx(6.0, abs=1e-4)
    assert columns_bound(inst, chain=True) == pytest.approx(6.75, abs=1e-4)
    assert proved_optimum(inst) == pytest.approx(6.0)


def test_three_requests_stay_at_the_columns_bound():
    """The three-request window: 17 without and with the chain rows (the optimum is 14)."""
    inst = three_requests()
    # the columns' 17 is reached with whole completed iterations there: no branch moves it
    assert bp_bound(inst).bound == pytest.approx(17.0, abs=1e-4)
    assert bp_bound(inst, chain=True).bound == pytest.approx(17.0, abs=1e-4)
    assert columns_bound(inst) == pytest.approx(17.0, abs=1e-4)


def test_integral_counts_strictly_tighten_the_columns():
    """Five short requests: bp 12 against the columns' 12.42 (chain: 10.92 against 11.21);
    the optimum is 10."""
    inst = five_requests()
    plain = bp_bound(inst)
    chain = bp_bound(inst, chain=True)
    # measured: columns 12.4167, columns-chain 11.2083 (each converged on the 5 ms grid);
    # with C integral SCIP proves 12.0 and 10.9231 (OPTIMAL); the exact MILP proves 10
    assert plain.status == Status.OPTIMAL and chain.status == Status.OPTIMAL
    assert plain.bound == pytest.approx(12.0, abs=1e-4)
    assert chain.bound == pytest.approx(10.923089, abs=1e-4)
    assert columns_bound(inst) == pytest.approx(12.416680, abs=1e-4)
    assert columns_bound(inst, chain=True) == pytest.approx(11.208346, abs=1e-4)
    assert proved_optimum(inst) == pytest.approx(10.0)


def test_root_lagrangian_and_scip_bound_are_reported():
    """The details hold the root columns' bound, the root Lagrangian and SCIP's proof."""
    res = bp_bound(five_requests())
    d = res.details
    # the reported bound is the least of the three, each with the LP margin
    assert d["scip_status"] == "optimal" and d["nodes"] >= 2
    assert d["scip_bound"] == pytest.approx(12.0, abs=1e-5)
    assert d["root_lagrangian"] >= d["scip_bound"] - TOL
    assert d["columns_bound"] == pytest.approx(12.416680, abs=1e-4)
    assert res.bound <= min(d["columns_bound"], d["root_lagrangian"] + 1e-4) + TOL


def test_same_instance_same_result():
    """The same window twice: the same bound, nodes, columns and pricing calls."""
    a, b = bp_bound(five_requests()), bp_bound(five_requests())
    keys = ("scip_bound", "nodes", "columns", "pricing_calls", "root_lagrangian")
    assert (a.bound, *(a.details[k] for k in keys)) == (b.bound, *(b.details[k] for k in keys))


def test_short_limit_keeps_a_valid_bound():
    """With 0.3 s the run may stop anywhere; its bound is still at least the optimum, 10."""
    res = bp_bound(five_requests(), time_limit=0.3)
    # SCIP uses a node's LP value only once its pricing converged, and the pricer's
    # Lagrangian bound otherwise; the root columns' bound holds whenever it was computed
    assert res.bound is not None and res.bound >= 10.0 - TOL
    assert res.bound <= res.details["ideal"] + TOL
    assert res.status in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT)


def test_registered_as_the_columns_bp_method():
    """``columns-bp`` is a bound method of tdg-horizon: compare runs it and reports its bound."""
    problem = get_problem("tdg-horizon")
    assert problem.aliases["columns-bp"] == "tdg-horizon-columns-bp:highs"
    assert "tdg-horizon-columns-bp" in problem.models
    row = compare(three_requests(), ["columns-bp"], time_limit=60).iloc[0]
    # the default grid of the three-request window gives the 17 of the 5 ms grid too
    assert (row["method"], row["kind"], row["status"]) == ("columns-bp", "bound", "OPTIMAL")
    assert row["bound"] == pytest.approx(17.0, abs=1e-3)


def test_root_share_is_checked():
    """A root share outside (0, 1) is refused, naming the field."""
    with pytest.raises(ValueError, match="root_share"):
        TdgHorizonBranchPrice(three_requests(), root_share=1.0)


small_window = st.composite(small_window_rows)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(small_window())
def test_battery_between_optimum_and_columns(inst):
    """Random small windows: the exact optimum (when proved OPTIMAL) <= bp <= columns on the
    same grid (+ TOL); bp OPTIMAL within 60 s; the root Lagrangian at least the optimum."""
    res = bp_bound(inst)
    assert res.status == Status.OPTIMAL
    assert res.bound <= columns_bound(inst) + TOL
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    if exact.status == Status.OPTIMAL:
        assert exact.objective <= res.bound + TOL
        root = res.details["root_lagrangian"]
        assert math.isinf(root) or exact.objective <= root + TOL


@settings(max_examples=12, deadline=None, derandomize=True)
@given(small_window())
def test_chain_battery_between_optimum_and_columns_chain(inst):
    """Random small windows with the chain rows (their (L4) rows on N and on C): the exact
    optimum (when OPTIMAL) <= bp <= columns-chain on the same grid (+ TOL)."""
    res = bp_bound(inst, chain=True)
    assert res.status == Status.OPTIMAL
    assert res.bound <= columns_bound(inst, chain=True) + TOL
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    if exact.status == Status.OPTIMAL:
        assert exact.objective <= res.bound + TOL


def test_pricing_cut_short_is_never_claimed(monkeypatch):
    """A pricer past its deadline answers DIDNOTRUN: no OPTIMAL, SCIP's bound unused, 12.42."""
    import slolab.models.tdg_bp as tdg_bp

    # a deadline long past: SCIP's first pricing call stops after one request
    monkeypatch.setattr(tdg_bp, "PRICER_GRACE_S", -1e6)
    res = bp_bound(five_requests())
    d = res.details
    assert d["pricing_aborted"] is True
    assert res.status == Status.FEASIBLE and math.isinf(d["scip_bound"])
    # the bound is the root columns' (12.4167, converged on HiGHS), at least the optimum 10
    assert res.bound == pytest.approx(12.416680, abs=1e-4)

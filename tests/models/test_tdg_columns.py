"""The tdg-horizon bound by column generation per request (``tdg-horizon-columns``): hand cases
where it equals and where it is strictly below the bucket LP; seeded batteries on small windows
where exact optimum <= columns <= bucket LP on the same grid; the pricing's columns are points
of the bucket LP's rows; same instance, same result; registered as the ``columns`` method."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.instances.records import Instance
from slolab.models.proserve import TdgHorizon
from slolab.models.tdg_bound import LP_MARGIN_ABS, LP_MARGIN_REL, TdgHorizonBound
from slolab.models.tdg_columns import Column, TdgHorizonColumns
from slolab.problems import get_problem
from slolab.solvers import Status, solve
from tdg_horizon_cases import (
    horizon_instance,
    proved_optimum,
    small_window_rows,
    three_requests,
    two_prompts,
)

#: Grid of every comparison: a fixed spacing, so that the bucket LP solves this one grid only
#: (by default it also solves a coarser one and keeps the least, which the columns do not).
SPACING_S = 0.005
#: Both bounds carry the LP margin (1e-6 relative and absolute) and HiGHS's feasibility and
#: dual tolerances (1e-7 per row), which a comparison of two LPs may add up.
TOL = 1e-5


def columns_bound(inst: Instance, chain: bool = False):
    res = solve(
        TdgHorizonColumns(inst, spacing_s=SPACING_S, chain=chain), solver="highs", time_limit=60
    )
    assert res.status == Status.OPTIMAL
    return res


def unsmoothed_bound(inst: Instance) -> float:
    """The generation as before 2026-12-03 (no smoothing, three columns a round), converged."""
    res = solve(
        TdgHorizonColumns(inst, spacing_s=SPACING_S, smoothing=0.0, columns_per_round=3),
        solver="highs",
        time_limit=60,
    )
    assert res.status == Status.OPTIMAL and res.bound is not None
    return res.bound


def bucket_bound(inst: Instance) -> float:
    res = solve(
        TdgHorizonBound(inst, spacing_s=SPACING_S, family="bucket"), solver="highs", time_limit=60
    )
    assert res.status == Status.OPTIMAL and res.bound is not None
    return res.bound


def test_hand_case_equals_bucket_lp_where_the_iterations_are_fluid():
    """Two 10-token prompts at 0, TTFT 25 ms: the columns bound is the bucket LP's 7.5."""
    inst = two_prompts()
    # each column is a whole prompt, but the master mixes B's (10 ms) with half of A's and one
    # fluid iteration (10 ms) in [0, 25 ms]: 10 + 5 + 10 = 25, so 6 + 3 * 0.5 = 7.5 (the
    # iteration count is fluid in both; the optimum is 6)
    res = columns_bound(inst)
    assert res.bound == pytest.approx(7.5, abs=1e-4)
    assert res.bound == pytest.approx(bucket_bound(inst), abs=1e-4)
    assert proved_optimum(inst) == pytest.approx(6.0)


def test_hand_case_strictly_below_bucket_lp():
    """A (8 tokens, 3 out) at 0, B (3, 2) at 4 ms, C (12, 3) at 12 ms: columns 17 < bucket
    17.58; the optimum is 14."""
    inst = three_requests()
    res = columns_bound(inst)
    bucket = bucket_bound(inst)
    # the bucket LP spends its tangents of the decode work and fractional token counts; the
    # columns' token counts are whole and their decode work exact
    assert bucket == pytest.approx(17.5833, abs=1e-3)
    assert res.bound == pytest.approx(17.0, abs=1e-4)
    assert proved_optimum(inst) == pytest.approx(14.0)


def test_priced_columns_are_points_of_the_bucket_lp_rows():
    """Every column priced against random duals satisfies its request's rows of the bucket LP:
    whole prompt and token counts, work by each boundary at least the tokens' work, decode
    pace, and its gain recomputed token by token."""
    inst = three_requests()
    model = TdgHorizonColumns(inst, spacing_s=SPACING_S)
    rel = model.relaxation
    rng = np.random.default_rng(7)
    checked = 0
    for r in model.requests:
        r = int(r)
        n = model.tables[r]["n"]
        lo = model.bucket_range(r)
        bounds = model.grid.bounds
        for _ in range(20):
            pi = rng.exponential(20.0, n)
            mu = rng.exponential(0.5, n)
            for value, col in model.price(r, pi, mu, most=3):
                k = col.tokens
                c = col.complete
                assert (np.diff(k) >= 0).all() and k[:c].sum() == 0 and k[c] >= 1
                assert k.max() <= inst.workload.output_tokens[r]
                need = rel.prompt_work_s()[r] + np.array(
                    [rel.decode_work_s(int(m) - 1, r) for m in k[c:]]
                )
                assert (np.cumsum(col.work)[c:] >= need - 1e-12).all()
                elapsed = bounds[lo[c:] + 1] - bounds[lo[c]]
                t_min = rel.shortest_decode_iteration_s()[r]
                assert (t_min * (k[c:] - 1) <= elapsed + 1e-9).all()
                # the reduced cost the pricing reports is the column's own
                assert value == pytest.approx(col.gain - pi @ col.work - mu @ k, abs=1e-9)
                checked += 1
    assert checked > 0


def test_lagrangian_bound_holds_at_any_multipliers():
    """The Lagrangian bound at random multipliers is never below the optimum (14), and at the
    bucket LP's duals it is at most the bucket LP's value (17.58)."""
    inst = three_requests()
    model = TdgHorizonColumns(inst, spacing_s=SPACING_S)
    optimum = proved_optimum(inst)
    rng = np.random.default_rng(3)
    for scale in (0.0, 1.0, 50.0, 1000.0):
        pi = rng.exponential(scale, model.grid.buckets) if scale else np.zeros(model.grid.buckets)
        mu = {
            int(r): rng.exponential(scale or 1.0, len(model.bucket_range(int(r))))
            for r in model.requests
        }
        got = model.lagrangian(pi, mu)
        assert got is not None
        assert got[0] >= optimum - 1e-9
    res = columns_bound(inst)
    assert res.details["start_bound"] is not None
    assert optimum - 1e-9 <= res.details["start_bound"] <= bucket_bound(inst) + TOL


def test_same_instance_same_result():
    inst = three_requests()
    a = columns_bound(inst)
    b = columns_bound(inst)
    assert (a.bound, a.details["history"]) == (b.bound, b.details["history"])


def test_registered_as_the_columns_method():
    """``columns`` is a bound method of tdg-horizon: compare runs it and reports its bound."""
    problem = get_problem("tdg-horizon")
    assert problem.aliases["columns"] == "tdg-horizon-columns:highs"
    assert "tdg-horizon-columns" in problem.models
    inst = three_requests()
    row = compare(inst, ["columns"], time_limit=60).iloc[0]
    assert (row["method"], row["kind"], row["status"]) == ("columns", "bound", "OPTIMAL")
    assert row["bound"] == pytest.approx(17.0, abs=1e-4)


small_window = st.composite(small_window_rows)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(small_window())
def test_battery_between_optimum_and_bucket_lp(inst):
    """Random small windows: the exact optimum (when proved OPTIMAL) <= columns <= bucket LP
    on the same grid <= ideal."""
    res = columns_bound(inst)
    bucket = bucket_bound(inst)
    assert res.bound <= bucket + TOL
    assert res.bound <= res.details["ideal"] + TOL
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    if exact.status == Status.OPTIMAL:
        assert exact.objective <= res.bound + TOL


#: The hand window's column generation as the code runs it (recorded 2026-12-03, the rounds'
#: master on the primal simplex; on the dual simplex before: 10 rounds and 77 columns, the same
#: first five rounds, the same bound): rounds, columns and their count per round (exact), then
#: every round's Lagrangian bound and master value, the start bound and the final master
#: (tests/fingerprint.py records; a scalar is one number).
FORMER_GENERATION = [
    "21681e989e8eec26",
    [
        22.5208333333333,
        5.52083333333333,
        24.6458333333334,
        11.5208333333333,
        23.1458343583334,
        11.5208343583333,
        21.4500000104168,
        13.98958334375,
        20.9785411479176,
        14.8885411479167,
        17.9166665833335,
        16.4166665833333,
        18.0000000000001,
        16.5,
        23.0625000000014,
        16.6875,
        17.0,
        17.0,
        17.0,
        17.5833333333333,
    ],
]
#: The master's values and Lagrangian bounds come from HiGHS's LP solves, whose primal and dual
#: feasibility tolerances (1e-7) leave the last digits to the processor and its BLAS: round 3's
#: master, 11.520834358333326 on two machines, had other last digits on the one where the former
#: hash was recorded. Within 1e-6 of each value's magnitude, the same history; the rounds and
#: the columns priced per round are exact.
LP_REL = 1e-6


def test_generation_is_the_former_solve():
    """solve_with through generate (the master kept for the integer master), unsmoothed with
    three columns a round (the defaults before 2026-12-03), gives the bound, rounds, columns
    and history recorded on the hand window."""
    from fingerprint import assert_matches, fingerprint

    res = solve(
        TdgHorizonColumns(
            three_requests(), spacing_s=SPACING_S, smoothing=0.0, columns_per_round=3
        ),
        solver="highs",
        time_limit=60,
    )
    assert res.status == Status.OPTIMAL
    keys = ("rounds", "start_bound", "columns", "master", "history", "converged")
    # the bound recorded: 17.00001800000018 (the same on the dual simplex before)
    assert res.bound == pytest.approx(17.000018, rel=1e-9)
    assert (res.details["rounds"], res.details["columns"], res.details["converged"]) == (
        9,
        70,
        True,
    )
    found = fingerprint({k: res.details[k] for k in keys})
    assert_matches(found, FORMER_GENERATION, "column generation", rel=LP_REL)


#: The hand window's column generation with the defaults since 2026-12-03 (smoothing 0.5, one
#: column per request and round): 8 rounds, 20 columns, the same bound as
#: :data:`FORMER_GENERATION`'s 9 rounds and 70 columns; every round's factor, Lagrangian bound and
#: master value, the start bound and the final master.
SMOOTHED_GENERATION = [
    "e5180171835ebe5d",
    [
        0.5,
        20.0520833333333,
        5.52083333333333,
        0.5,
        22.1208333333333,
        12.0,
        0.5,
        23.1020833333333,
        13.9625,
        0.5,
        21.1416666666667,
        15.7,
        0.5,
        19.7416668666667,
        15.7000004,
        0.5,
        17.2916666666668,
        16.75,
        0.5,
        17.1458333333333,
        17.0,
        0.0,
        17.0,
        17.0,
        17.0,
        17.5833333333333,
    ],
]


def test_generation_with_the_defaults_is_the_recorded_solve():
    """The defaults (smoothed duals, one column a round) on the hand window: the same bound in
    8 rounds and 20 columns, the last round priced at the master's own duals; the rounds,
    columns and history recorded."""
    from fingerprint import assert_matches, fingerprint

    res = columns_bound(three_requests())
    keys = ("rounds", "start_bound", "columns", "master", "history", "converged")
    assert res.bound == pytest.approx(17.000018, rel=1e-9)
    assert (res.details["rounds"], res.details["columns"], res.details["converged"]) == (
        8,
        20,
        True,
    )
    assert res.details["history"][-1]["alpha"] == 0.0
    found = fingerprint({k: res.details[k] for k in keys})
    assert_matches(found, SMOOTHED_GENERATION, "smoothed column generation", rel=LP_REL)


@pytest.fixture(scope="module")
def code_run():
    """Eight Azure code requests at high load (real outputs) and a DeadlineAdmission run."""
    from slolab.heuristics import tdg_search
    from slolab.problems.tdg_horizon import horizon_window

    inst = horizon_window("azure_code_2023", n=8, seed=0, load="high", max_output_tokens=0)
    value, out = tdg_search._run(inst, "deadline-packing/1024", inst, 0)
    return inst, value, out


def test_run_columns_are_the_runs_point_of_the_master(code_run):
    """An engine run's columns earn its TDG and, with its fluid iteration count, satisfy the
    master's rows: bucket time, iterations (release cut), work before every token count."""
    inst, value, out = code_run
    model = TdgHorizonColumns(inst)
    columns = model.run_columns(out)
    assert sum(c.gain for c in columns) + model.fixed_gain == pytest.approx(value, rel=1e-9)
    n_it = model.run_iterations(out)
    assert np.all(np.diff(n_it) >= -1e-12) and n_it[0] >= 0
    used = model.t_c * np.diff(np.append(0.0, n_it))
    for col in columns:
        buckets = model.bucket_range(col.request)
        used[buckets] += col.work
        t = model.tables[col.request]
        f = t["first"]
        before = n_it[f - 2] if f >= 2 else 0.0
        assert np.all(col.tokens <= n_it[buckets] - before + 1e-9)
        if col.complete >= 0:
            done = np.cumsum(col.work)[col.complete :]
            assert np.all(done >= t["need"][col.tokens[col.complete :]] - 1e-9)
    assert np.all(used <= np.diff(model.grid.bounds) + 1e-9)


def test_integer_master_is_at_least_its_start(code_run):
    """Price and branch started from a run picks one column per request and is worth at least
    the run (its point is in the MILP), at most its own dual bound."""
    from slolab.solvers.registry import get_backend

    inst, value, out = code_run
    model = TdgHorizonColumns(inst)
    backend = get_backend("highs")(threads=1, seed=0, log=False)
    plan = model.integer_master(backend, 6.0, start=out)
    assert sorted(plan.columns) == model.requests
    assert plan.value >= value - 1e-6
    assert plan.value <= plan.mip_bound + 1e-6
    assert plan.value == pytest.approx(
        sum(c.gain for c in plan.columns.values()) + model.fixed_gain, rel=1e-9
    )


# -- the chain family in the master (chain=True) ---------------------------------------------------


def chain_window() -> Instance:
    """A (3 tokens, 3 out, TTFT 20 ms) at 0, B (2, 2, 20 ms, priority 2) at 2 ms, C (4, 2, 30
    ms) at 4 ms: B may share A's completion iteration, C A's or B's."""
    return horizon_instance(
        [0.0, 0.002, 0.004],
        [3, 2, 4],
        [3, 2, 2],
        [0.02, 0.02, 0.03],
        [0.006, 0.006, 0.008],
        [1.0, 2.0, 1.0],
    )


def least_work_cost(pi: np.ndarray, need: np.ndarray, c: int) -> float:
    """``min pi . e`` over ``e >= 0`` with ``sum_(i<=j) e_i >= need_j`` from bucket ``c`` on,
    by HiGHS's LP (not the pricing's greedy)."""
    from scipy.optimize import linprog

    n = len(pi)
    rows = np.tril(np.ones((n, n)))[c:]
    got = linprog(pi, A_ub=-rows, b_ub=-need[c:], bounds=(0, None), method="highs")
    assert got.status == 0
    return float(got.fun)


def chain_multipliers(model: TdgHorizonColumns, rng, scale: float):
    """The chain rows (L1-L3 and two interval rows) with random multipliers."""
    rows = model.chain_rows()
    lay = model.leaders
    B = model.grid.buckets
    for s, e in ((0, B // 2), (int(lay["start"].min()), int(lay["end"].max()))):
        chosen = (lay["start"] >= s) & (lay["end"] <= e)
        rows.add([(int(i), 1.0) for i in np.flatnonzero(chosen)], [(e - 1, -1.0)])
    rows.highs[:] = range(rows.count)
    return rows, rng.exponential(scale, rows.count)


def test_pricing_with_chain_duals_is_brute_force():
    """With the chain rows' multipliers nonzero, the best reduced cost per completion bucket
    that the pricing reports is the best over every column enumerated (whole token profiles
    within the pace, the least work cost by an LP), each column's reduced cost counting its
    terms in the master's chain rows as the master writes them."""
    import itertools

    model = TdgHorizonColumns(chain_window(), spacing_s=SPACING_S, chain=True)
    rng = np.random.default_rng(11)
    compared = 0
    for draw in range(2):
        rows, y = chain_multipliers(model, rng, 2.0)
        for r in model.requests:
            t = model.tables[r]
            n = t["n"]
            pi = rng.exponential(20.0, n) * (draw + 1)
            mu = rng.exponential(0.5, n)
            extra = rows.column_terms(r, y, t["first_ok"], t["first"])
            priced = {col.complete: v for v, col in model.price(r, pi, mu, most=n, extra=extra)}
            for c in np.flatnonzero(t["allowed"]):
                best = -np.inf
                for steps in itertools.product(range(t["k_max"]), repeat=n - c - 1):
                    tokens = np.zeros(n, dtype=np.int64)
                    tokens[c:] = 1 + np.concatenate([[0], np.cumsum(steps)])
                    if (tokens[c:] > t["cap"][c, c:]).any():
                        continue
                    gain = model.column_gain(r, int(c), tokens)
                    work = least_work_cost(np.maximum(pi, 0.0), t["need"][tokens], int(c))
                    col_rows, coef = model._chain_terms(
                        rows, Column(r, int(c), tokens, np.zeros(n), gain), np.zeros(0), np.zeros(0)
                    )
                    best = max(best, gain - work - mu @ tokens - y[col_rows.astype(int)] @ coef)
                assert priced[int(c)] == pytest.approx(best, abs=1e-9)
                compared += 1
    assert compared > 0


def chain_lp_bound(inst: Instance) -> float:
    """The bound's chain family as an LP (no integral phase) on the same grid."""
    res = solve(
        TdgHorizonBound(inst, spacing_s=SPACING_S, integral=False), solver="highs", time_limit=60
    )
    assert res.status == Status.OPTIMAL and res.bound is not None
    return res.bound


def test_chain_lagrangian_holds_at_any_multipliers():
    """With the chain rows (L1-L3 and interval rows), the Lagrangian bound at random
    multipliers of every row is never below the optimum, on the hand windows."""
    for inst in (three_requests(), chain_window()):
        model = TdgHorizonColumns(inst, spacing_s=SPACING_S, chain=True)
        optimum = proved_optimum(inst)
        rng = np.random.default_rng(5)
        for scale in (0.0, 1.0, 50.0, 1000.0):
            B = model.grid.buckets
            pi = rng.exponential(scale, B) if scale else np.zeros(B)
            mu = {
                int(r): rng.exponential(scale or 1.0, len(model.bucket_range(int(r))))
                for r in model.requests
            }
            got = model.lagrangian(pi, mu, chain=chain_multipliers(model, rng, scale or 1.0))
            assert got is not None
            assert got[0] >= optimum - 1e-9


def test_chain_hand_cases():
    """Two 10-token prompts at 0 (TTFT 25 ms): with the chain rows the columns give the chain
    LP's 6.75, below the columns' 7.5 (the optimum is 6); on the three-request window (A, B,
    C) the columns' 17 (the chain LP 17.58, the optimum 14)."""
    two = horizon_instance([0.0, 0.0], [10, 10], [1, 1], [0.025, 0.025], [0.01, 0.01], [1.0, 2.0])
    # A and B cannot share an iteration (10 + 10 + 10 ms > 25 ms), so each on-time first token
    # leads one: N >= 1 + x_AA in [0, 25 ms] (an interval row), and 10 (B) + 10 x (A) + 10
    # (1 + x) <= 25 gives x = 1/4: 6 + 3 / 4. N stays fluid: a quarter of A's iteration.
    res = columns_bound(two, chain=True)
    assert res.bound == pytest.approx(6.75, abs=1e-4)
    assert sum(h.get("cuts", 0) for h in res.details["history"]) >= 1
    assert chain_lp_bound(two) == pytest.approx(6.75, abs=1e-4)
    assert columns_bound(two).bound == pytest.approx(7.5, abs=1e-4)
    res = columns_bound(three_requests(), chain=True)
    assert res.bound == pytest.approx(17.0, abs=1e-4)
    assert chain_lp_bound(three_requests()) == pytest.approx(17.5833, abs=1e-3)


def test_chain_off_by_default_and_not_in_the_integer_master():
    inst = three_requests()
    assert TdgHorizonColumns(inst).leaders is None
    from slolab.solvers.registry import get_backend

    backend = get_backend("highs")(threads=1, seed=0, log=False)
    with pytest.raises(ValueError, match="chain"):
        TdgHorizonColumns(inst, chain=True).integer_master(backend, 1.0)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(small_window())
def test_chain_battery_between_optimum_and_both_bounds(inst):
    """Random small windows: the exact optimum (when proved OPTIMAL) <= columns with the chain
    rows <= the least of the columns and the chain LP on the same grid (TOL: each carries the
    LP margin and HiGHS's tolerances)."""
    res = columns_bound(inst, chain=True)
    assert res.bound <= columns_bound(inst).bound + TOL
    assert res.bound <= chain_lp_bound(inst) + TOL
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    if exact.status == Status.OPTIMAL:
        assert exact.objective <= res.bound + TOL


def test_start_share_zero_starts_from_the_empty_columns_and_converges_to_the_same_bound():
    """Without the bucket LP's start the generation begins at zero multipliers (no start
    bound) and, converged, reports the same LP optimum on the hand window; a share outside
    [0, 1) is refused."""
    inst = three_requests()
    res = solve(
        TdgHorizonColumns(inst, spacing_s=SPACING_S, start_share=0.0), "highs", time_limit=60
    )
    assert res.status == Status.OPTIMAL
    assert res.details["start_bound"] is None
    assert res.bound == pytest.approx(columns_bound(inst).bound, rel=1e-9)
    for share in (-0.1, 1.0):
        with pytest.raises(ValueError, match="start_share"):
            TdgHorizonColumns(inst, spacing_s=SPACING_S, start_share=share)


@pytest.mark.parametrize("share", [0.5, 0.0])
@pytest.mark.parametrize("smoothing", [0.5, 0.8])
def test_smoothed_generation_converges_to_the_same_bound(smoothing, share):
    """Pricing at smoothed duals changes the path, not the end: on the hand window the
    generation converges (OPTIMAL, priced last at the master's own duals) to the LP optimum
    of the unsmoothed generation, every round's Lagrangian value is at least it, and the
    rounds that priced between the centre and the master's duals are recorded with their
    factor."""
    inst = three_requests()
    former = unsmoothed_bound(inst)
    res = solve(
        TdgHorizonColumns(inst, spacing_s=SPACING_S, smoothing=smoothing, start_share=share),
        "highs",
        time_limit=60,
    )
    assert res.status == Status.OPTIMAL
    assert res.bound == pytest.approx(former, rel=1e-7)
    history = res.details["history"]
    # the reported bound carries the LP margin; the Lagrangian values do not
    optimum = (former - LP_MARGIN_ABS) / (1 + LP_MARGIN_REL)
    assert all(h["lagrangian"] >= optimum - TOL for h in history)
    assert history[-1]["alpha"] == 0.0 and history[-1]["columns"] == 0
    assert any(h["alpha"] > 0.0 for h in history)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="smoothing"):
            TdgHorizonColumns(inst, spacing_s=SPACING_S, smoothing=bad)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(small_window())
def test_smoothed_battery_equals_the_unsmoothed_optimum(inst):
    """Random small windows: with smoothing 0.5 the converged bound is the unsmoothed one
    (the same master LP optimum), so it lies between the proved optimum and the bucket LP."""
    res = solve(TdgHorizonColumns(inst, spacing_s=SPACING_S, smoothing=0.5), "highs", time_limit=60)
    assert res.status == Status.OPTIMAL
    assert res.bound == pytest.approx(columns_bound(inst).bound, rel=1e-6, abs=TOL)


def test_reduced_cost_of_a_column_is_its_pricing_value_at_the_masters_duals(code_run):
    """The reduced cost read from a column's master entries (the test that a column priced at
    smoothed duals improves the master) equals the pricing's value at the master's duals less
    the convexity dual, for every request's best columns, over four rounds of a master (the
    hand window and eight code requests)."""
    from slolab.solvers.highs import HighsBackend, backend_highs, lp_round

    for inst in (three_requests(), code_run[0]):
        model = TdgHorizonColumns(inst, spacing_s=SPACING_S, start_share=0.0)
        highs = backend_highs(HighsBackend())
        master = model._master(highs)
        checked = 0
        for _ in range(4):
            assert lp_round(highs, 60, "test master")
            dual = -np.asarray(highs.getSolution().row_dual)
            out = model._master_multipliers(master, dual)
            found = []
            for r in model.requests:
                sigma = dual[master["convexity_rows"][r]]
                priced = model.price(r, out.pi[model.bucket_range(r)], out.mu[r], most=3)
                for value, column in priced:
                    reduced = model._reduced(master, column, dual)
                    assert reduced == pytest.approx(value - sigma, abs=1e-9)
                    checked += 1
                    if reduced > 1e-7:
                        found.append(column)
            if not found:
                break
            model._add_columns(highs, master, found)
        assert checked > 0


def test_one_column_per_round_converges_to_the_same_bound():
    """With one column per request and round (and smoothing) the hand window converges to the
    same LP optimum, every round adding at most one column per request; fewer than one is
    refused."""
    inst = three_requests()
    model = TdgHorizonColumns(inst, spacing_s=SPACING_S, smoothing=0.5, columns_per_round=1)
    res = solve(model, "highs", time_limit=60)
    assert res.status == Status.OPTIMAL
    assert res.bound == pytest.approx(unsmoothed_bound(inst), rel=1e-7)
    assert all(h["columns"] <= len(model.requests) for h in res.details["history"])
    assert max(h["columns"] for h in res.details["history"]) == len(model.requests)
    with pytest.raises(ValueError, match="columns_per_round"):
        TdgHorizonColumns(inst, spacing_s=SPACING_S, columns_per_round=0)

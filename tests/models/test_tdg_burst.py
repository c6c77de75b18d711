"""Burst-capacity rows for the tdg-horizon bounds (``slolab.models.tdg_burst``): the serial
batching programme against brute force; the table against single sets; the rows hold at the
exact optimum's schedule; on small windows optimum <= bound with the rows <= bound without
(bucket LP, chain family, column master); hand windows where the rows close the gap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab import sim
from slolab.models.proserve import ON_TIME_TOL_S, TdgHorizon
from slolab.models.tdg_bound import TdgHorizonBound
from slolab.models.tdg_burst import burst_capacity, burst_table, weight_units
from slolab.models.tdg_columns import TdgHorizonColumns
from slolab.solvers import Status, solve
from tdg_horizon_cases import small_window_rows, two_prompts

SPACING_S = 0.005
#: both sides carry the LP margin and HiGHS's tolerances
TOL = 1e-5


def brute_capacity(release, deadlines, works, weights, t_c) -> float:
    """Most on-time weight over every subset run as every ordered sequence of batches."""
    n = len(deadlines)
    best = 0.0

    def batches(items):
        # every ordered partition of items into non-empty batches
        if not items:
            yield []
            return
        for size in range(1, len(items) + 1):
            for first in itertools.combinations(items, size):
                rest = [i for i in items if i not in first]
                for tail in batches(rest):
                    yield [first, *tail]

    for size in range(n + 1):
        for subset in itertools.combinations(range(n), size):
            for plan in batches(list(subset)):
                end, ok = release, True
                for batch in plan:
                    end += t_c + sum(works[i] for i in batch)
                    if any(end > deadlines[i] + 1e-9 for i in batch):
                        ok = False
                        break
                if ok:
                    best = max(best, sum(weights[i] for i in subset))
    return best


def test_hand_capacity_two_prompts_cannot_share():
    """Two 10 ms prompts released at 0, deadlines 25 ms, setup 10 ms: together 30 ms, one
    after the other 20 and 40 ms, so one of them: the heavier, 6."""
    # 10 + 10 + 10 = 30 > 25 (shared); 10 + 10 = 20 <= 25, then 40 > 25 (one each)
    f = burst_capacity(
        0.0, np.array([0.025, 0.025]), np.array([0.01, 0.01]), np.array([3.0, 6.0]), 0.01
    )
    assert f == pytest.approx(6.0)
    # with deadlines 30 ms they share one iteration ending at 30 ms: both, 9
    f = burst_capacity(
        0.0, np.array([0.03, 0.03]), np.array([0.01, 0.01]), np.array([3.0, 6.0]), 0.01
    )
    assert f == pytest.approx(9.0)


def test_capacity_is_brute_force():
    """Seeded sets of 1-5 requests (common release, weights 1 and 2 units of 3.5): the
    programme equals brute force over every subset and ordered batching; with weights that
    share no unit it is at least brute force and at most 1/16 of the least weight per
    request above it."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(1, 6))
        works = rng.integers(1, 12, n) * 1e-3
        deadlines = rng.integers(8, 60, n) * 1e-3
        t_c = float(rng.choice([0.002, 0.005, 0.01]))
        weights = rng.choice([3.5, 7.0], n)
        exact = brute_capacity(0.0, deadlines, works, weights, t_c)
        assert burst_capacity(0.0, deadlines, works, weights, t_c) == pytest.approx(exact)
        odd = rng.uniform(1.0, 3.0, n)
        rough = burst_capacity(0.0, deadlines, works, odd, t_c)
        exact_odd = brute_capacity(0.0, deadlines, works, odd, t_c)
        assert exact_odd - 1e-9 <= rough <= exact_odd + n * odd.min() / 16 + 1e-9


def test_weight_units_round_up():
    """Weights w_p and 2 w_p share the unit w_p; others are rounded up to sixteenths of the
    least."""
    units, unit = weight_units(np.array([73.45, 146.9, 73.45]))
    assert unit == pytest.approx(73.45) and units.tolist() == [1, 2, 1]
    units, unit = weight_units(np.array([1.0, 1.3]))
    # 1.3 / (1 / 16) = 20.8, rounded up to 21
    assert unit == pytest.approx(1 / 16) and units.tolist() == [16, 21]
    assert (units * unit >= np.array([1.0, 1.3]) - 1e-12).all()


def test_table_is_the_capacity_of_each_interval_set():
    """Every entry of the table is the programme on its set alone, released at the set's
    arrival threshold."""
    rng = np.random.default_rng(3)
    n = 9
    arrival = np.sort(rng.integers(0, 5, n) * 4e-3)
    work = rng.integers(1, 12, n) * 1e-3
    deadline = arrival + rng.integers(10, 50, n) * 1e-3
    weights = rng.choice([3.0, 6.0], n)
    t_c = 0.005
    table = burst_table(arrival, deadline, work, weights, t_c, arrival + t_c + work)
    for s, start in enumerate(table.starts):
        for e, end in enumerate(table.ends):
            members = table.requests[
                (arrival[table.requests] >= start) & (deadline[table.requests] <= end)
            ]
            f = burst_capacity(start, deadline[members], work[members], weights[members], t_c)
            assert table.capacity[s, e] == pytest.approx(f, rel=1e-8, abs=1e-8)


def test_hand_window_rows_reach_the_optimum():
    """Two 10-token prompts at 0, TTFT 25 ms (10 ms an iteration, 1 ms a token): the bucket LP
    and the column master give 7.5, with the burst rows 6, the optimum."""
    inst = two_prompts()
    # F({A, B}) = 6 (they cannot share: 10 + 10 + 10 > 25 ms), so 3 g_A + 6 g_B <= 6
    without = solve(
        TdgHorizonBound(inst, spacing_s=SPACING_S, family="bucket"), "highs", time_limit=30
    )
    bound = solve(
        TdgHorizonBound(inst, spacing_s=SPACING_S, family="bucket", burst_rows=True),
        "highs",
        time_limit=30,
    )
    columns = solve(
        TdgHorizonColumns(inst, spacing_s=SPACING_S, burst=True), "highs", time_limit=30
    )
    assert without.bound == pytest.approx(7.5, abs=1e-4)
    assert bound.bound == pytest.approx(6.0, abs=1e-4)
    assert bound.details["families"]["bucket+burst"] == pytest.approx(6.0, abs=1e-4)
    assert columns.bound == pytest.approx(6.0, abs=1e-4) and columns.status == Status.OPTIMAL


small_window = st.composite(small_window_rows)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(small_window())
def test_rows_hold_at_the_optimal_schedule(inst):
    """The exact optimum's schedule (replayed) earns at most F(S) of first-token gain in every
    interval set S."""
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    if exact.status != Status.OPTIMAL or exact.schedule is None:
        return
    outcome = sim.replay(inst, exact.schedule)
    model = TdgHorizonBound(inst, spacing_s=SPACING_S, burst_rows=True)
    table = model.burst()
    d = model.data
    on_time = outcome.first_token_s <= d.first_deadline_s + ON_TIME_TOL_S
    gain = np.where(on_time, d.first_gain, 0.0)[table.requests]
    assert (table.gains(gain) <= table.capacity + 1e-9).all()


@settings(max_examples=8, deadline=None, derandomize=True)
@given(small_window())
def test_battery_optimum_below_rows_below_former(inst):
    """Small windows: optimum (when OPTIMAL) <= each bound with the burst rows <= the same
    bound without (bucket LP and chain family on one grid, and the column master)."""
    got = {}
    for family in ("bucket", "chain"):
        for burst in (False, True):
            res = solve(
                TdgHorizonBound(inst, spacing_s=SPACING_S, family=family, burst_rows=burst),
                "highs",
                time_limit=60,
            )
            assert res.status == Status.OPTIMAL
            got[family, burst] = res.bound
    for burst in (False, True):
        res = solve(
            TdgHorizonColumns(inst, spacing_s=SPACING_S, burst=burst), "highs", time_limit=60
        )
        assert res.status == Status.OPTIMAL
        got["columns", burst] = res.bound
    for kind in ("bucket", "chain", "columns"):
        assert got[kind, True] <= got[kind, False] + TOL
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    if exact.status == Status.OPTIMAL:
        assert all(exact.objective <= v + TOL for v in got.values() if math.isfinite(v))

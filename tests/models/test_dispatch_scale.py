"""dispatch-scale (HyperFlexis): the exact joint dispatch-and-scaling models on hand cases and
seeded random batteries (MILP == CP-SAT == exhaustive search, weighted objective and Pareto
front; replay equality; checker clean; exact >= every heuristic)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dispatch_scale_cases import ROUND, solved, window
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.instances.records import Cluster, Instance
from slolab.models.dispatch_scale import (
    DispatchScale,
    DispatchScaleCost,
    ScaleWindow,
    pareto_front,
)
from slolab.sim import check, metrics, replay
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming, preset
from slolab.timing.forms import RooflineTiming, phase_affine

SOLVERS = ("highs", "cpsat", "brute")


def test_two_requests_on_one_worker_by_hand():
    """A then B on the initial worker, both on time; it leaves after B: J = 1 - 0.5 * 0.142."""
    inst = window([0.0, 0.1], [10, 20], [2, 2], [0.05, 0.05], [0.05, 0.05])
    values = []
    for solver in SOLVERS:
        res, out = solved(DispatchScale(inst), solver)
        # A: prefill 0.010 + 0.010 -> 0.020, decode 0.010 + 0.002 -> 0.032; B at 0.1:
        # 0.010 + 0.020 -> 0.130, decode -> 0.142; deadlines 0.05/0.10 and 0.15/0.20: all met
        np.testing.assert_allclose(out.tokens_of(1), [0.130, 0.142], rtol=1e-12)
        # cost: the worker from 0 to its last iteration's end, 0.142 s
        assert metrics.server_seconds(inst, out) == pytest.approx(0.142, rel=1e-12)
        values.append(res.objective)
    # J = 1 - 0.5 * 0.142 = 0.929
    assert values == pytest.approx([0.929] * 3, abs=1e-12)


def test_switching_a_worker_on_early_is_worth_its_cost_by_hand():
    """A 300-token prompt busies worker 0 until 0.31; B (0.2, TTFT 0.05) needs a second
    worker, switched on at slot 0 and ready at 0.2: both met."""
    inst = window(
        [0.0, 0.2], [300, 10], [1, 1], [0.35, 0.05], [0.0, 0.0], startup_s=0.2, weight=0.1
    )
    # one worker meets one of them (A then B: B at 0.330 > 0.25; B first: A at 0.530 > 0.35);
    # two: A 0.010 + 0.300 -> 0.310 on worker 0, B 0.2 + 0.020 -> 0.220 on worker 1 (on at 0),
    # J = 1 - 0.1 * (0.310 + 0.220) = 0.947
    for solver in SOLVERS:
        res, out = solved(DispatchScale(inst), solver)
        assert res.objective == pytest.approx(0.947, abs=1e-12)
        assert [(t, a.kind) for t, a in res.schedule.plan.actions][0] == (0.0, "on")
        assert out.server.tolist() == [0, 1]


def test_the_cheapest_service_drains_the_idle_initial_worker():
    """The cheapest service drains the initial worker at 0 and serves a request arriving at
    0.3 on a worker switched on at a later slot (before or after the arrival: ties)."""
    inst = window([0.3], [10], [1], [5.0], [0.0], startup_s=0.1, weight=1.0)
    for solver in SOLVERS:
        res, out = solved(DispatchScaleCost(inst, min_met=1), solver)
        # a worker switched on at 0.25 or later costs its start-up and the prefill:
        # 0.1 + 0.010 + 0.010 = 0.12 (the initial worker, drained at 0, costs nothing;
        # keeping it for the request would cost 0.32)
        assert res.objective == pytest.approx(0.12, rel=1e-9)
        assert out.server[0] == 1 and out.server_off_s[0] == 0.0


def test_front_of_a_contended_window_by_hand():
    """Two requests arriving together, TTFT 25 ms, on two initial workers.

    Both met: one each, 0.020 + 0.020 = 0.040; one worker, A then B (0.040) meets only A for
    the same cost (dominated); one batch of both, 0.010 + 0.020 = 0.030, meets neither. The
    front: (1, 0.040) and (0, 0.030)."""
    inst = window(
        [0.0, 0.0], [10, 10], [1, 1], [0.025, 0.025], [0.0, 0.0], servers=2, max_servers=2
    )
    for solver in SOLVERS:
        front = pareto_front(inst, solver=solver, time_limit=30)
        points = [(p.attainment, round(p.cost_server_s, 12)) for p in front]
        assert points == [(1.0, 0.04), (0.0, 0.03)]
        assert all(p.status == Status.OPTIMAL for p in front)


@st.composite
def random_window(draw):
    """2-3 requests, 1-2 initial workers of 2, outputs of 1-2 tokens, seeded values."""
    n = draw(st.integers(2, 3))
    arrival = sorted(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    prompt = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    ttft = draw(st.lists(st.sampled_from([0.02, 0.04, 0.08, 0.2]), min_size=n, max_size=n))
    tpot = draw(st.lists(st.sampled_from([0.005, 0.02]), min_size=n, max_size=n))
    servers = draw(st.integers(1, 2))
    return window(
        [a / 100 for a in arrival],
        prompt,
        output,
        ttft,
        tpot,
        servers=servers,
        max_servers=2,
        startup_s=draw(st.sampled_from([0.05, 0.15])),
        weight=draw(st.sampled_from([0.0, 0.5, 3.0])),
        slot_s=0.1,
    )


@settings(max_examples=12, deadline=None, derandomize=True)
@given(random_window())
def test_battery_milp_cpsat_brute_agree_on_the_optimum(inst):
    """Random windows: every backend OPTIMAL, replayed to its objective, checker clean, equal."""
    values = [solved(DispatchScale(inst), s)[0].objective for s in SOLVERS]
    assert values[0] == pytest.approx(values[1], abs=1e-9)
    assert values[0] == pytest.approx(values[2], abs=1e-9)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(random_window())
def test_battery_fronts_agree(inst):
    """Random windows: the three fronts have the same points, each proved and replayed."""
    fronts = []
    for solver in SOLVERS:
        front = pareto_front(inst, solver=solver, time_limit=30)
        assert all(p.status == Status.OPTIMAL for p in front)
        for p in front:
            out = replay(inst, p.schedule)
            assert metrics.server_seconds(inst, out) == pytest.approx(p.cost_server_s, abs=1e-12)
            assert check(inst, out) == []
        fronts.append([(p.attainment, p.cost_server_s) for p in front])
    for other in fronts[1:]:
        assert [a for a, _ in other] == [a for a, _ in fronts[0]]
        assert [c for _, c in other] == pytest.approx([c for _, c in fronts[0]], abs=1e-9)


HEURISTICS = ["hyperflexis", "hyperflexis-scaling", "hyperflexis-pm", "round-robin", "scorpio-rr"]


@settings(max_examples=10, deadline=None, derandomize=True)
@given(random_window())
def test_battery_exact_at_least_every_heuristic(inst):
    """The proved optimum is at least every heuristic's replayed objective."""
    frame = compare(inst, ["highs", *HEURISTICS], time_limit=30)
    exact = frame[frame.method == "highs"].iloc[0]
    assert exact.status == "OPTIMAL"
    assert (frame.violations == 0).all()
    for _, row in frame[frame.kind == "heuristic"].iterrows():
        assert exact.objective >= row.objective - 1e-9, row.method


def test_every_front_point_beats_or_matches_the_heuristics():
    """On a contended window no heuristic lies beyond the exact front (cost at its level)."""
    inst = window(
        [0.0, 0.01, 0.02], [40, 30, 20], [2, 2, 1], [0.06, 0.05, 0.2], [0.02] * 3, servers=1
    )
    front = pareto_front(inst, solver="brute", time_limit=30)
    frame = compare(inst, HEURISTICS, time_limit=30)
    for _, row in frame.iterrows():
        # the least cost at an attainment of at least the heuristic's
        best = min(p.cost_server_s for p in front if p.attainment >= row.attainment - 1e-12)
        assert best <= row.cost_server_s + 1e-9, row.method


def test_the_model_refuses_what_it_does_not_model():
    """Mean-TPOT attainment, a two-line roofline and a KV cache too small are clear errors."""
    inst = window([0.0], [10], [1], [1.0], [0.1])
    mean = Instance(
        "m",
        inst.workload,
        inst.cluster,
        ROUND,
        "dispatch-scale",
        {**inst.settings, "definition": "ttft+mean-tpot"},
    )
    with pytest.raises(ValueError, match="deadline definition"):
        ScaleWindow.of(mean)
    roof = RooflineTiming([ROUND, LinearTiming(0.001, {"prefill_tokens": 2e-3})])
    bad = Instance("r", inst.workload, inst.cluster, roof, "dispatch-scale", inst.settings)
    with pytest.raises(ValueError, match="affine once the phases are known"):
        ScaleWindow.of(bad)
    small = Instance(
        "k",
        inst.workload,
        Cluster(servers=1, kv_capacity_tokens=5),
        ROUND,
        "dispatch-scale",
        inst.settings,
    )
    with pytest.raises(ValueError, match="KV capacity 5 < 11"):
        ScaleWindow.of(small)


def test_phase_sum_of_eqs_1_2_has_its_phase_affine_view():
    """The HyperFlexis preset: prefill 18.10 ms and decode 19.93 ms intercepts by phase."""
    view = phase_affine(preset("opt-13b-a100-hyperflexis"))
    assert view is not None
    assert (view.any_s, view.prefill_s, view.decode_s) == pytest.approx((0.0, 18.10e-3, 19.93e-3))
    # a 1000-token prompt: 0.1019e-3 * 1000 + 7.122e-6e-3 * 1000^2 = 0.1090 s without intercept
    # (prefill_tokens (0.1019 - 7.122e-6) ms, attention 2 * 7.122e-6 ms on 500,500)
    assert view.prefill_part_s(1000) == pytest.approx(0.109022, rel=1e-9)
    assert math.isclose(view.kv_s, 0.000627e-3)


def test_cpsat_never_calls_a_feasible_window_infeasible():
    """Regression: CP-SAT once proved this 8-request window infeasible (two-literal
    enforcements); every window is feasible (serve each request on the initial worker)."""
    from slolab.problems import build_instance

    inst = build_instance("dispatch-scale", n=8, seed=0, slo_scale=0.25, rate=10.0)
    res = solve(DispatchScale(inst), solver="cpsat", time_limit=2)
    assert res.status != Status.INFEASIBLE

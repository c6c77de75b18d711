"""The tdg-horizon bound's chain family (completion-leader rows): valid against the exact
optimum on a seeded battery of contended windows, never looser than the bucket LP, strictly
tighter on a hand window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models.proserve import TdgHorizon
from slolab.models.tdg_bound import TdgHorizonBound
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# 10 ms per iteration, 1 ms per prompt token, 2 ms per decode token
TIMING = LinearTiming(0.01, {"prefill_tokens": 1e-3, "decode_tokens": 2e-3}, name="round")


def window(arrival, prompt, output, ttft, tpot, priority) -> Instance:
    """A tdg-horizon window (w_prefill 3, w_decode 1) on one server."""
    wl = Workload(
        {
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ttft_slo_s": ttft,
            "tpot_slo_s": tpot,
            "priority": priority,
        }
    )
    return Instance(
        "window",
        wl,
        Cluster(servers=1, kv_capacity_tokens=10_000),
        TIMING,
        "tdg-horizon",
        {"w_prefill": 3.0, "w_decode": 1.0},
    )


def test_chain_strictly_tighter_than_bucket_on_two_prompts():
    """Two 10-token prompts at 0, TTFT 25 ms: bucket LP 7.5, chain LP 6.75, integral 6."""
    inst = window([0.0, 0.0], [10, 10], [1, 1], [0.025, 0.025], [0.01, 0.01], [1.0, 2.0])
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    # one first token only (alone 10 + 10 = 20 ms, together 10 + 20 = 30 > 25): 3 * 2 = 6
    assert exact.objective == pytest.approx(6.0)
    bucket = solve(TdgHorizonBound(inst, family="bucket"), solver="highs", time_limit=30)
    # one fluid iteration for both: 10 g_a + 10 g_b + 10 <= 25, g_b = 1, g_a = 0.5: 6 + 1.5
    assert bucket.bound == pytest.approx(7.5, abs=1e-4)
    chain = solve(
        TdgHorizonBound(inst, family="chain", integral=False), solver="highs", time_limit=30
    )
    assert chain.status == Status.OPTIMAL
    # they cannot share an iteration (0 + 10 + 10 + 10 = 30 > 25), so each on-time first token
    # leads its own inside (0, 25 ms]: 10 g_a + 10 g_b + 10 (g_a + g_b) <= 25, g_a + g_b <= 1.25;
    # g_b = 1, g_a = 0.25: 6 + 3 * 0.25 = 6.75
    assert chain.bound == pytest.approx(6.75, abs=1e-4)
    assert chain.details["families"]["bucket"] == pytest.approx(7.5, abs=1e-4)
    assert chain.details["tightest"] == "chain"
    # integral first tokens and leaders: g_a + g_b <= 1.25 leaves one: the optimum, 6
    whole = solve(TdgHorizonBound(inst), solver="highs", time_limit=30)
    assert whole.status == Status.OPTIMAL
    assert whole.bound == pytest.approx(6.0, abs=1e-4)
    assert whole.details["tightest"] == "chain-integral"


def test_chain_shares_an_iteration_when_it_can():
    """Two 5-token prompts at 0, TTFT 25 ms share one iteration: every bound is the ideal 9."""
    inst = window([0.0, 0.0], [5, 5], [1, 1], [0.025, 0.025], [0.01, 0.01], [1.0, 2.0])
    # together 10 + 5 + 5 = 20 <= 25 ms: both first tokens, 3 + 6 = 9 = the ideal
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.objective == pytest.approx(9.0)
    chain = solve(TdgHorizonBound(inst), solver="highs", time_limit=30)
    assert chain.bound == pytest.approx(9.0, abs=1e-4)


@st.composite
def contended_window(draw) -> Instance:
    """Two to four requests, prompts of 1-12 tokens, one or two output tokens, tight TTFTs."""
    n = draw(st.integers(2, 4))
    rows = [
        {
            "arrival": draw(st.sampled_from([0.0, 0.004, 0.012])),
            "prompt": draw(st.integers(1, 12)),
            "output": draw(st.integers(1, 2)),
            "ttft": draw(st.sampled_from([0.012, 0.02, 0.03, 0.05])),
            "tpot": draw(st.sampled_from([0.012, 0.03])),
            "priority": draw(st.sampled_from([1.0, 2.0])),
        }
        for _ in range(n)
    ]
    rows.sort(key=lambda r: r["arrival"])
    return window(*([r[k] for r in rows] for k in rows[0]))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(contended_window())
def test_chain_battery_between_optimum_and_bucket(inst):
    """Random contended windows proved OPTIMAL: optimum <= chain <= bucket <= ideal."""
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    assert exact.status == Status.OPTIMAL
    chain = solve(TdgHorizonBound(inst), solver="highs", time_limit=30)
    assert chain.status == Status.OPTIMAL
    bucket = solve(TdgHorizonBound(inst, family="bucket"), solver="highs", time_limit=30)
    assert bucket.status == Status.OPTIMAL
    assert exact.objective <= chain.bound + 1e-6
    assert chain.bound <= bucket.bound + 1e-6
    assert bucket.bound <= bucket.details["ideal"] + 1e-6
    # the chain LP (before the integral phase) lies between the two as well
    lp = chain.details["families"]["chain"]
    assert exact.objective <= lp + 1e-6 <= bucket.bound + 2e-6

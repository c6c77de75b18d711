"""Hand-made tdg-horizon windows shared by the ProServe model tests."""

from __future__ import annotations

import pytest
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models.proserve import TdgHorizon
from slolab.sim import check, replay
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# 10 ms per iteration, 1 ms per prompt token, 2 ms per decode token (whole milliseconds, so
# CP-SAT's nanoseconds are exact)
TIMING = LinearTiming(0.01, {"prefill_tokens": 1e-3, "decode_tokens": 2e-3}, name="round")


def horizon_instance(arrival, prompt, output, ttft, tpot, priority, k=None) -> Instance:
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
    settings_ = {"w_prefill": 3.0, "w_decode": 1.0}
    if k is not None:
        settings_["max_iterations"] = k
    return Instance(
        "window",
        wl,
        Cluster(servers=1, kv_capacity_tokens=10_000),
        TIMING,
        "tdg-horizon",
        settings_,
    )


def drawn_rows(draw, n, arrivals, prompts, outputs, ttfts, tpots) -> Instance:
    """A window of ``n`` requests drawn by hypothesis's ``draw``, sorted by arrival: each an
    arrival, a prompt length in ``prompts``, an output length in ``outputs`` (inclusive
    ranges), a TTFT and a TPOT from the lists, priority 1 or 2."""
    from hypothesis import strategies as st

    rows = [
        {
            "arrival": draw(st.sampled_from(arrivals)),
            "prompt": draw(st.integers(*prompts)),
            "output": draw(st.integers(*outputs)),
            "ttft": draw(st.sampled_from(ttfts)),
            "tpot": draw(st.sampled_from(tpots)),
            "priority": draw(st.sampled_from([1.0, 2.0])),
        }
        for _ in range(n)
    ]
    rows.sort(key=lambda r: r["arrival"])
    return horizon_instance(*([r[k] for r in rows] for k in rows[0]))


def small_window_rows(draw) -> Instance:
    """Two to five requests, prompts of 1-12 tokens, outputs cut to 1-3 tokens, tight TTFTs:
    the small windows the tdg-horizon bound batteries draw (wrap with ``st.composite``)."""
    from hypothesis import strategies as st

    n = draw(st.integers(2, 5))
    return drawn_rows(
        draw,
        n,
        [0.0, 0.004, 0.012, 0.02],
        (1, 12),
        (1, 3),
        [0.012, 0.02, 0.03, 0.05],
        [0.008, 0.012, 0.03],
    )


def proved_optimum(inst: Instance) -> float:
    """The exact MILP's optimum of a small window (HiGHS, 60 s), asserted OPTIMAL."""
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    assert exact.status == Status.OPTIMAL and exact.objective is not None
    return exact.objective


def three_requests() -> Instance:
    """A (8 tokens, 3 out, TTFT 20 ms) at 0, B (3, 2, 30 ms, priority 2) at 4 ms, C (12, 3,
    50 ms) at 12 ms; TPOTs 8, 12 and 30 ms."""
    return horizon_instance(
        [0.0, 0.004, 0.012],
        [8, 3, 12],
        [3, 2, 3],
        [0.02, 0.03, 0.05],
        [0.008, 0.012, 0.03],
        [1.0, 2.0, 1.0],
    )


def two_prompts() -> Instance:
    """Two 10-token prompts at 0, TTFT 25 ms, priorities 1 and 2 (10 ms an iteration, 1 ms a
    token)."""
    return horizon_instance([0.0, 0.0], [10, 10], [1, 1], [0.025, 0.025], [0.01, 0.01], [1.0, 2.0])


def agreed_optimum(model, inst: Instance, objective) -> list[float]:
    """Solve with HiGHS, CP-SAT and brute force: each OPTIMAL, replayed to its own objective with
    a clean checker, and all three equal; returns the three optima."""
    values = []
    for solver in ("highs", "cpsat", "brute"):
        res = solve(model(inst), solver=solver, time_limit=30)
        assert res.status == Status.OPTIMAL
        out = replay(inst, res.schedule)
        assert objective(inst, out) == pytest.approx(res.objective, abs=1e-9)
        assert check(inst, out) == []
        values.append(res.objective)
    assert values[0] == pytest.approx(values[1], abs=1e-9)
    assert values[0] == pytest.approx(values[2], abs=1e-9)
    return values

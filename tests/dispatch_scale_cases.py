"""Shared dispatch-scale test windows: per-request lists on a round-number timing model."""

from __future__ import annotations

import pytest
from slolab.instances.records import Cluster, Instance, Workload
from slolab.problems import build_instance
from slolab.sim import check, replay
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# 10 ms per iteration, 1 ms per prompt token, 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 1e-3, "decode_tokens": 2e-3}, name="round")


def window(
    arrival,
    prompt,
    output,
    ttft,
    tpot,
    *,
    servers=1,
    max_servers=2,
    startup_s=0.2,
    weight=0.5,
    slot_s=0.25,
    timing=ROUND,
    cached=None,
) -> Instance:
    """A dispatch-scale window from per-request lists (``cached``: the given cache's
    ``cached_tokens`` column, none when None)."""
    columns = {
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "ttft_slo_s": ttft,
        "tpot_slo_s": tpot,
    }
    if cached is not None:
        columns["cached_tokens"] = cached
    wl = Workload(columns)
    cluster = Cluster(servers=servers, kv_capacity_tokens=10_000, startup_s=startup_s)
    settings_ = {
        "max_servers": max_servers,
        "slot_s": slot_s,
        "cost_weight_per_server_s": weight,
        "definition": "deadline",
    }
    return Instance("w", wl, cluster, timing, problem="dispatch-scale", settings=settings_)


def azure_window(trace: str, n: int):
    """``n`` consecutive requests of ``trace`` at high load with their real outputs, 2 of 4
    workers ready, 0.002 attainment per worker-second."""
    return build_instance(
        "dispatch-scale",
        trace=trace,
        n=n,
        load="high",
        max_output_tokens=0,
        servers=2,
        max_servers=4,
        cost_weight=0.002,
        seed=1,
    )


def solved(model, solver: str):
    """A solve whose schedule replays to its objective with a clean checker."""
    res = solve(model, solver=solver, time_limit=60)
    assert res.status == Status.OPTIMAL, (solver, res.status)
    out = replay(model.instance, res.schedule)
    assert check(model.instance, out) == []
    assert model.evaluate(res.schedule) == pytest.approx(res.objective, abs=1e-12)
    return res, out

"""ProServe's models with a snapshot's given cache (``cached_tokens``): tdg-horizon's MILP,
CP-SAT and brute force agree and replay to their objective, checker-clean, on seeded windows
with random cached prefixes; its bounds (bucket/chain LP, columns, branch-and-price, burst
rows) stay at or above the optimum; the slice move reaches it; tdg-batch's three backends agree;
SlideBatching, GoRouting and the search run checker-clean; hand cases where the cache changes
the decision; an all-zero column decides as no column; the builders' ``cache`` option."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.heuristics.proserve import SlideBatching, SlideBatchingParams, one_iteration_schedule
from slolab.instances.records import CACHED_COLUMN, Cluster, Instance, Workload
from slolab.models.proserve import TdgBatch, TdgHorizon
from slolab.models.tdg_bound import TdgHorizonBound
from slolab.models.tdg_bp import TdgHorizonBranchPrice
from slolab.models.tdg_columns import TdgHorizonColumns
from slolab.models.tdg_slice import TdgSlice
from slolab.problems.tdg_horizon import horizon_window
from slolab.sim import check, metrics, replay, run
from slolab.solvers import Status, solve
from tdg_horizon_cases import TIMING, agreed_optimum, horizon_instance

#: LP bounds carry their margins and the LP solvers' tolerances (as in the bound tests).
TOL = 1e-5
#: The bound models' one fixed grid (the column tests' spacing).
SPACING_S = 0.005


def uncached(inst: Instance) -> Instance:
    """``inst`` without the ``cached_tokens`` column."""
    frame = inst.workload.to_frame().drop(columns=[CACHED_COLUMN])
    return dataclasses.replace(inst, workload=Workload.from_frame(frame))


def cached(inst: Instance, tokens) -> Instance:
    """``inst`` with the given cache ``tokens`` (the workload column ``cached_tokens``)."""
    workload = inst.workload.with_columns(**{CACHED_COLUMN: np.asarray(tokens, dtype=np.int64)})
    return dataclasses.replace(inst, workload=workload)


def agreed(model, inst: Instance, objective) -> float:
    """HiGHS, CP-SAT and brute force agree (:func:`agreed_optimum`); returns the optimum."""
    return agreed_optimum(model, inst, objective)[0]


@st.composite
def cached_window(draw) -> Instance:
    """Two requests (prompts of 2-5 tokens, each with a random cached prefix of 0 to p - 1,
    outputs of 1-2 tokens), three iterations."""
    rows = sorted(
        (
            draw(st.sampled_from([0.0, 0.005, 0.012])),
            draw(st.integers(2, 5)),
            draw(st.integers(1, 2)),
            draw(st.sampled_from([0.012, 0.016, 0.02, 0.03])),
            draw(st.sampled_from([0.005, 0.012])),
            draw(st.sampled_from([1.0, 2.0])),
        )
        for _ in range(2)
    )
    inst = horizon_instance(*(list(col) for col in zip(*rows, strict=True)), k=3)
    prompts = inst.workload.prompt_tokens.tolist()
    return cached(inst, [draw(st.integers(0, p - 1)) for p in prompts])


# -- hand cases ------------------------------------------------------------------------------


def test_cache_lets_both_first_tokens_make_it():
    """Prompts of 6 and 4 tokens at 0 (TTFT 20 and 15 ms): TDG 6 uncached, 9 with 4 and 2 cached."""
    inst = horizon_instance(
        arrival=[0.0, 0.0],
        prompt=[6, 4],
        output=[2, 1],
        ttft=[0.02, 0.015],
        tpot=[0.005, 0.005],
        priority=[1.0, 2.0],
    )
    # uncached: both together 10 + 10 = 20 ms > 15 ms misses r1 (3 * 1 = 3); r1 alone 14 ms
    # earns 3 * 2 = 6, then r0 at 14 + 16 = 30 > 20 ms: 6
    assert agreed(TdgHorizon, inst, metrics.tdg) == pytest.approx(6.0)
    # cached 4 and 2: both together prefill 2 + 2 tokens, 10 + 4 = 14 ms <= 15, 20 ms: 3 + 6 = 9;
    # r0's decode ends 14 + 12 = 26 > 20 + 5 ms (late)
    assert agreed(TdgHorizon, cached(inst, [4, 2]), metrics.tdg) == pytest.approx(9.0)


def batch_snapshot(cache, kv_capacity_tokens=10_000) -> Instance:
    """r0 decoding (deadline 1.1 s, gain 2, 3 tokens out), r1 waiting with a 24-token prompt
    (deadline 1.035 s, gain 3) at 1 s; budget 35 ms (SlideBatching's own: the least slack);
    r1's cached prefix ``cache``."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.9],
            "prompt_tokens": [5, 24],
            "output_tokens": [10, 5],
            "ttft_slo_s": [0.5, 0.135],
            "tpot_slo_s": [0.2, 0.1],
            "priority": [2.0, 1.0],
            "running": [True, False],
            "remaining_prefill_tokens": [0, 24],
            "generated_tokens": [3, 0],
            CACHED_COLUMN: [0, cache],
        }
    )
    settings_ = {"scheduling_time_s": 1.0, "latency_budget_s": 0.035, "eta_s": 0.03}
    settings_.update({"w_prefill": 3.0, "w_decode": 1.0})
    cluster = Cluster(servers=1, kv_capacity_tokens=kv_capacity_tokens)
    return Instance("hand", wl, cluster, TIMING, "tdg-batch", settings_)


def test_batch_cache_fits_the_decode_token_too():
    """tdg-batch: r1's whole prompt alone nearly fills the 35 ms budget (TDG 3); with 10 tokens
    cached r0's decode token joins (TDG 5)."""
    # uncached: r1 alone 10 + 24 = 34 ms <= 35 (3); with r0 10 + 2 + 24 = 36 ms > 35
    assert agreed(TdgBatch, batch_snapshot(0), metrics.tdg_emitted) == pytest.approx(3.0)
    # cached 10: 10 + 2 + 14 = 26 ms <= 35, r1 on time (1.026 <= 1.035), r0 too: 2 + 3 = 5
    inst = batch_snapshot(10)
    assert agreed(TdgBatch, inst, metrics.tdg_emitted) == pytest.approx(5.0)
    res = solve(TdgBatch(inst), solver="highs", time_limit=10)
    assert sorted(res.schedule.iterations[0][0].entries) == [(0, "decode", 1), (1, "prefill", 14)]


def test_batch_cached_tokens_are_outside_the_capacity():
    """tdg-batch with 14 free KV tokens: r1's 24-token prompt does not fit (TDG 2, r0's token);
    with 12 cached its 12 computed tokens plus one do, beside r0's (TDG 5)."""
    # r0 holds 5 + 3 = 8 of 22: 14 free; uncached r1 needs 24 + 1 > 14; cached 12 + 1 + 1 <= 14
    assert agreed(TdgBatch, batch_snapshot(0, 22), metrics.tdg_emitted) == pytest.approx(2.0)
    assert agreed(TdgBatch, batch_snapshot(12, 22), metrics.tdg_emitted) == pytest.approx(5.0)


def test_slide_batching_takes_the_cached_prompt_and_the_decode():
    """SlideBatching at the hand snapshot (its budget 35 ms): uncached, r1's prompt leaves no
    room for r0's token (TDG 3); with 10 cached both join one iteration (TDG 5); checker-clean."""
    for cache, expected in ((0, 3.0), (10, 5.0)):
        inst = batch_snapshot(cache)
        schedule = one_iteration_schedule(inst, SlideBatching(SlideBatchingParams(eta_s=0.03)))
        out = replay(inst, schedule)
        assert check(inst, out) == []
        # budget max(min(0.1, 0.035), 0.03) = 35 ms: 10 + 24 (+ 2) ms; cached 10 + 14 + 2 ms
        assert metrics.tdg_emitted(inst, out) == pytest.approx(expected)


# -- seeded batteries -----------------------------------------------------------------------


@settings(max_examples=12, deadline=None, derandomize=True)
@given(cached_window())
def test_horizon_battery_backends_agree_and_bounds_hold(inst):
    """Random cached windows: MILP == CP-SAT == brute force, replays equal, checker clean; the
    bucket/chain LP, the columns (with chain rows) and the burst rows are >= the optimum."""
    optimum = agreed(TdgHorizon, inst, metrics.tdg)
    for model in (
        TdgHorizonBound(inst),
        TdgHorizonBound(inst, family="bucket"),
        TdgHorizonBound(inst, burst_rows=True),
        TdgHorizonColumns(inst, spacing_s=SPACING_S, chain=True),
        TdgHorizonColumns(inst, spacing_s=SPACING_S, burst=True),
    ):
        res = solve(model, solver="highs", time_limit=30)
        assert res.status == Status.OPTIMAL
        assert res.bound >= optimum - TOL


@settings(max_examples=5, deadline=None, derandomize=True)
@given(cached_window())
def test_branch_and_price_at_least_the_cached_optimum(inst):
    """Random cached windows: branch-and-price (integral iteration counts) >= the optimum."""
    optimum = agreed(TdgHorizon, inst, metrics.tdg)
    res = solve(TdgHorizonBranchPrice(inst, spacing_s=SPACING_S), solver="highs", time_limit=30)
    assert res.status == Status.OPTIMAL
    assert res.bound >= optimum - TOL


@settings(max_examples=3, deadline=None, derandomize=True)
@given(cached_window())
def test_heuristics_run_clean_and_never_beat_the_optimum(inst):
    """Random cached windows (default K): SlideBatching, its baselines and the search replay
    checker-clean and never above the exact optimum."""
    inst = dataclasses.replace(inst, settings={"w_prefill": 3.0, "w_decode": 1.0})
    methods = ["highs", "slide-batching", "sarathi-priority", "vllm-fcfs", "lns"]
    frame = compare(inst, methods, time_limit=1)
    exact = frame.set_index("method").loc["highs"]
    assert exact["status"] == "OPTIMAL"
    assert (frame["objective"] <= exact["objective"] + 1e-9).all()
    assert (frame["violations"] == 0).all()


@settings(max_examples=5, deadline=None, derandomize=True)
@given(cached_window())
def test_whole_window_slice_reaches_the_cached_optimum(inst):
    """A slice over the whole cached window (the MILP's slots plus the longest output) reaches
    tdg-horizon's optimum and replays to it, checker-clean."""
    from slolab.heuristics.tdg_search import DeadlineAdmission

    inst = dataclasses.replace(inst, settings={"w_prefill": 3.0, "w_decode": 1.0})
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    out = run(inst, DeadlineAdmission(), seed=0, record_iterations=True)
    assert check(inst, out) == []
    slots = int(inst.workload.output_tokens.sum()) + inst.n_requests
    slots += int(inst.workload.output_tokens.max())
    res = solve(TdgSlice(inst, out, 0, len(out.it_start), max_iterations=slots), "highs", 30)
    assert res.status == Status.OPTIMAL
    assert res.objective == pytest.approx(exact.objective, abs=1e-9)
    new = replay(inst, res.schedule)
    assert metrics.tdg(inst, new) == pytest.approx(exact.objective, abs=1e-9)
    assert check(inst, new) == []


@st.composite
def cached_snapshot(draw) -> Instance:
    """A tdg-batch snapshot of 2-3 requests: decoding ones (no cache) and waiting ones with a
    prompt of 2-5 tokens and a random cached prefix of 0 to p - 1; the free KV memory may bind."""
    n = draw(st.integers(2, 3))
    rows = []
    for _ in range(n):
        decoding = draw(st.booleans())
        prompt = draw(st.integers(2, 5))
        output = draw(st.integers(2, 4))
        rows.append(
            {
                "arrival_s": 0.0,
                "prompt_tokens": prompt,
                "output_tokens": output,
                "ttft_slo_s": draw(st.sampled_from([0.005, 0.012, 0.02])),
                "tpot_slo_s": draw(st.sampled_from([0.003, 0.006])),
                "priority": draw(st.sampled_from([1.0, 2.0])),
                "running": decoding,
                "remaining_prefill_tokens": 0 if decoding else prompt,
                "generated_tokens": draw(st.integers(1, output - 1)) if decoding else 0,
                CACHED_COLUMN: 0 if decoding else draw(st.integers(0, prompt - 1)),
            }
        )
    wl = Workload({key: [row[key] for row in rows] for key in rows[0]})
    budget = draw(st.sampled_from([0.012, 0.015, 0.02]))
    settings_ = {"scheduling_time_s": 0.001, "latency_budget_s": budget, "eta_s": budget}
    settings_.update({"w_prefill": 3.0, "w_decode": 1.0})
    # memory that may bind: what the running requests hold, one token for each decode, and
    # 0-8 tokens more (or plenty), at least every request's own need (none is refused)
    held = sum(r["prompt_tokens"] + r["generated_tokens"] for r in rows if r["running"])
    room = draw(st.sampled_from([0, 3, 8, 10_000]))
    need = max(r["prompt_tokens"] + r["output_tokens"] - r[CACHED_COLUMN] for r in rows)
    capacity = max(held + sum(r["running"] for r in rows) + room, need)
    cluster = Cluster(servers=1, kv_capacity_tokens=capacity)
    return Instance("snapshot", wl, cluster, TIMING, "tdg-batch", settings_)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(cached_snapshot())
def test_batch_battery_backends_agree_and_slide_batching_below(inst):
    """Random cached snapshots: MILP == CP-SAT == brute force, replays equal, checker clean;
    SlideBatching's choice replays clean and, within the budget, never beats the optimum."""
    optimum = agreed(TdgBatch, inst, metrics.tdg_emitted)
    eta = inst.settings["eta_s"]
    schedule = one_iteration_schedule(inst, SlideBatching(SlideBatchingParams(eta_s=eta)))
    out = replay(inst, schedule)
    assert check(inst, out) == []
    if out.n_iterations and out.it_end[0] - out.it_start[0] <= inst.settings["latency_budget_s"]:
        assert metrics.tdg_emitted(inst, out) <= optimum + 1e-9


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_go_routing_with_a_given_cache_runs_clean():
    """Two colocated servers, GoRouting and SlideBatching on 12 requests with random cached
    prefixes (seed 7): every request served, checker-clean. An idle server's load is 0, not
    ``inf * 0`` (its step count is inf here: the budget is at the iteration overhead)."""
    from slolab.heuristics.policies import make_router

    rng = np.random.default_rng(7)
    prompts = rng.integers(2, 40, size=12)
    inst = Instance(
        "two-servers",
        Workload(
            {
                "arrival_s": np.sort(rng.uniform(0.0, 0.2, size=12)),
                "prompt_tokens": prompts,
                "output_tokens": rng.integers(1, 6, size=12),
                "ttft_slo_s": np.full(12, 0.05),
                "tpot_slo_s": np.full(12, 0.01),
                "priority": rng.choice([1.0, 2.0], size=12),
                CACHED_COLUMN: rng.integers(0, prompts),
            }
        ),
        Cluster(servers=2, kv_capacity_tokens=200),
        TIMING,
        "tdg-horizon",
        {"w_prefill": 3.0, "w_decode": 1.0},
    )
    out = run(inst, SlideBatching(), make_router("go-routing"), seed=0)
    assert check(inst, out) == []
    assert np.isfinite(out.token_times).all()


# -- no cache, or an all-zero one ------------------------------------------------------------


@settings(max_examples=6, deadline=None, derandomize=True)
@given(cached_window())
def test_all_zero_column_decides_as_no_column(inst):
    """The same window without the column and with an all-zero one: the same MILP and CP-SAT
    schedules, the same bound, the same SlideBatching run."""
    bare = uncached(inst)
    zero = cached(bare, [0] * bare.n_requests)
    for solver in ("highs", "cpsat"):
        a = solve(TdgHorizon(bare), solver=solver, time_limit=30)
        b = solve(TdgHorizon(zero), solver=solver, time_limit=30)
        assert a.schedule == b.schedule and a.objective == b.objective
    a, b = (solve(TdgHorizonBound(x), solver="highs", time_limit=30) for x in (bare, zero))
    assert a.bound == b.bound
    runs = [run(x, SlideBatching(), seed=0) for x in (bare, zero)]
    assert np.array_equal(runs[0].token_times, runs[1].token_times, equal_nan=True)


def test_zero_cache_snapshot_decides_as_no_column():
    """tdg-batch: the hand snapshot with r1's cache 0 has the same optimum and schedule as
    without the column."""
    zero = batch_snapshot(0)
    bare = uncached(zero)
    a, b = (solve(TdgBatch(x), solver="highs", time_limit=10) for x in (bare, zero))
    assert a.schedule == b.schedule and a.objective == b.objective == pytest.approx(3.0)


# -- builders --------------------------------------------------------------------------------


def test_horizon_window_cache_option():
    """``cache=True`` on a Mooncake window adds cached_tokens (whole 512-token blocks, below
    each prompt) and keeps the rest of the window; a trace without hash_ids is refused."""
    plain = horizon_window("mooncake_conversation", n=4, seed=1)
    window = horizon_window("mooncake_conversation", n=4, seed=1, cache=True)
    k = np.asarray(window.workload[CACHED_COLUMN])
    # measured: prompts 8339, 924, 2079, 1053 find 7680, 512, 1024 and 512 tokens cached
    assert k.tolist() == [7680, 512, 1024, 512]
    assert CACHED_COLUMN not in plain.workload
    assert np.array_equal(window.workload.prompt_tokens, plain.workload.prompt_tokens)
    for key in ("arrival_s", "ttft_slo_s", "tpot_slo_s", "priority"):
        assert np.array_equal(window.workload[key], plain.workload[key])
    with pytest.raises(ValueError, match="needs a trace with hash_ids"):
        horizon_window("azure_conv_2023", n=4, seed=0, cache=True)


def test_batch_snapshot_cache_option():
    """``cache=True`` on a captured Mooncake snapshot gives its waiting requests their cached
    prefixes, its running ones 0, and keeps the queue; a trace without hash_ids is refused
    before any simulation."""
    from slolab.problems.tdg_batch import build

    options = {"seed": 0, "trace": "mooncake_conversation", "queue": 6, "n": 60, "rate": 2.0}
    plain, snapshot = build(**options), build(**options, cache=True)
    wl = snapshot.workload
    # measured: rows 25, 11, 53, 55, 49, 50; only row 11 waits, and finds one 512-token block
    assert np.asarray(wl[CACHED_COLUMN]).tolist() == [0, 512, 0, 0, 0, 0]
    assert np.asarray(wl["running"]).tolist() == [True, False, True, True, True, True]
    assert np.array_equal(wl.prompt_tokens, plain.workload.prompt_tokens)
    with pytest.raises(ValueError, match="needs a trace with hash_ids"):
        build(seed=0, queue=6, n=60, cache=True)


def test_batch_refuses_a_cached_running_request():
    """tdg-batch refuses a running request with cached tokens, as the engine does."""
    inst = batch_snapshot(0)
    wrong = cached(inst, [2, 0])
    with pytest.raises(ValueError, match="request 0 is running and has cached_tokens 2"):
        TdgBatch(wrong)

"""PolyServe's tier models and heuristic with a given prefix cache (the workload's
``cached_tokens``): the fluid work charges each prompt its uncached tokens and their attention
over the cached prefix, the KV held leaves the cached tokens out, the decode steps read the
whole context; the partition's MILP equals its brute force, the fluid LP bounds it, the plan's
grids bracket its MILP, a cache never lowers the bound, an all-zero column changes nothing,
disaggregated instances with a cache are refused, and PolyServe runs checker-clean."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.heuristics.policies import make_scheduler
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models import tier_partition as tp
from slolab.problems.tier_partition import stream_instance
from slolab.sim import check, run
from slolab.solvers import Status, build_model, solve
from slolab.timing import LinearTiming, timing_lines

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token + 0.1 us per unit of prefill attention
ATTENTION = LinearTiming(
    0.010,
    {
        "prefill_tokens": 1e-4,
        "decode_tokens": 1e-4,
        "decode_kv_tokens": 1e-6,
        "prefill_attention_work": 1e-7,
    },
    name="line-attention",
)


def with_cached(inst: Instance, cached) -> Instance:
    """``inst`` with the given cache's column ``cached``."""
    wl = inst.workload.with_columns(cached_tokens=np.asarray(cached, dtype=np.int64))
    return dataclasses.replace(inst, workload=wl)


def without_cached(inst: Instance) -> Instance:
    """``inst`` without the given cache's column."""
    columns = {c: inst.workload[c] for c in inst.workload.columns if c != "cached_tokens"}
    return dataclasses.replace(inst, workload=Workload(columns))


def test_request_work_charges_the_uncached_prompt_by_hand():
    """p = 100 with 60 cached, d = 11: 40 prefill tokens over the 60, KV held 10 x 45.5."""
    b, c = timing_lines(ATTENTION)
    work = tp.request_work(
        np.array([100.0]), np.array([11.0]), b, c, "colocated", cached=np.array([60.0])
    )
    # decode: 10 x (1e-4 + 1e-6 x (100 + 5.5)) = 2.055e-3 (the whole context is read);
    # prompt: 40 x 1e-4 + 40 x (60 + 41 / 2) x 1e-7 = 4e-3 + 3.22e-4
    assert work["work"][0, 0] == pytest.approx(2.055e-3 + 4e-3 + 3.22e-4, rel=1e-12)
    # KV held: 10 x (40 + 5.5) = 455 token-iterations; tokens 40 + 10
    assert work["kv"][0] == pytest.approx(455.0)
    assert work["tokens"][0] == pytest.approx(50.0)
    bare = tp.request_work(np.array([100.0]), np.array([11.0]), b, c, "colocated")
    # without: 100 x 1e-4 + 5050 x 1e-7 = 0.0105 of prompt, KV 10 x 105.5
    assert bare["work"][0, 0] == pytest.approx(2.055e-3 + 0.01 + 5.05e-4, rel=1e-12)
    assert bare["kv"][0] == pytest.approx(1055.0)


def one_request(cached=None, kv=10**6) -> Instance:
    """Two requests of p = 100, d = 11 at a 50 ms TPOT on the attention line, co-located."""
    columns = {
        "arrival_s": [0.0, 1.0],
        "prompt_tokens": [100, 100],
        "output_tokens": [11, 11],
        "ttft_slo_s": [1.0, 1.0],
        "tpot_slo_s": [0.05, 0.05],
    }
    if cached is not None:
        columns["cached_tokens"] = cached
    cl = Cluster(servers=1, kv_capacity_tokens=kv, max_batch_size=10**5)
    return Instance(
        "one",
        Workload(columns),
        cl,
        ATTENTION,
        problem="tier-partition",
        settings={"mode": "colocated", "servers": 3},
    )


def test_colocated_optimum_and_partition_with_the_cache_by_hand():
    """60 of 100 prompt tokens cached: 50 tokens per request instead of 110, so T* = 313 (350) and
    the cost falls from 110 t(T) / T to 50 t(T) / T; the partition serves more."""
    opt = tp.request_optimum(one_request([60, 60]), "colocated").iloc[0]
    # q = (40 x 1e-4 + 10 x 2.055e-4 + 3220 x 1e-7) / 50 = 1.2754e-4; T = floor(0.04 / q) = 313
    q = (40e-4 + 10 * 2.055e-4 + 3220e-7) / 50
    assert opt.batch == 313
    assert opt.cost_s == pytest.approx(50 * (0.01 + 313 * q) / 313, rel=1e-12)
    bare = tp.request_optimum(one_request(), "colocated").iloc[0]
    # q = (100 x 1e-4 + 10 x 2.055e-4 + 5050 x 1e-7) / 110 = 1.1418e-4; T = 350
    q0 = (100e-4 + 10 * 2.055e-4 + 5050e-7) / 110
    assert bare.batch == 350
    assert bare.cost_s == pytest.approx(110 * (0.01 + 350 * q0) / 350, rel=1e-12)
    # the partition: 3 servers of one tier, time 1 - 0.01 / 0.05 = 0.8 per server over the
    # request's work 2.055e-3 + 4.322e-3 per request: 3 x 0.8 / 6.377e-3 req/s
    res = solve(build_model("tier-partition", one_request([60, 60])), solver="highs")
    assert res.status == Status.OPTIMAL
    assert res.objective == pytest.approx(3 * 0.8 / (2.055e-3 + 4.322e-3), rel=1e-9)


def random_cached(seed: int, mode: str = "colocated") -> Instance:
    """2-3 tiers, 6-14 requests, random cached prefixes (seeded), 2-4 servers, co-located."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 15))
    tiers = np.array([0.02, 0.05, 0.1])[: int(rng.integers(2, 4))]
    prompt = rng.integers(10, 3000, n)
    wl = Workload(
        {
            "arrival_s": np.sort(rng.uniform(0, 30, n)),
            "prompt_tokens": prompt,
            "output_tokens": rng.integers(2, 400, n),
            "ttft_slo_s": np.full(n, 1.0),
            "tpot_slo_s": rng.choice(tiers, n),
            "cached_tokens": (rng.uniform(0, 1, n) * prompt).astype(np.int64),
        }
    )
    slope = LinearTiming(
        float(rng.uniform(0.004, 0.012)),
        {
            "prefill_tokens": float(rng.uniform(1e-5, 5e-5)),
            "decode_tokens": float(rng.uniform(1e-5, 5e-5)),
            "decode_kv_tokens": float(rng.uniform(1e-8, 1e-7)),
            "prefill_attention_work": float(rng.uniform(0, 2e-9)),
        },
    )
    kv = int(rng.integers(20_000, 400_000))
    cl = Cluster(servers=int(rng.integers(2, 5)), kv_capacity_tokens=kv, max_batch_size=4096)
    settings_ = {"mode": mode, "servers": cl.servers, "window_s": 10.0}
    return Instance(f"c{seed}", wl, cl, slope, problem="tier-partition", settings=settings_)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6))
def test_battery_partition_milp_equals_brute_force_with_the_cache(seed):
    """Random cached prefixes: MILP == brute force, the fluid LP >= the MILP, CP-SAT's grids
    bracket it, and the cache never lowers the served rate (less work, less KV held)."""
    inst = random_cached(seed)
    milp = solve(build_model("tier-partition", inst), solver="highs", time_limit=30)
    brute = solve(build_model("tier-partition", inst), solver="brute", time_limit=30)
    assert milp.status == brute.status == Status.OPTIMAL
    assert milp.objective == pytest.approx(brute.objective, rel=1e-6, abs=1e-9)
    fluid = solve(build_model("tier-partition-fluid", inst), solver="highs")
    assert fluid.objective >= milp.objective * (1 - 1e-9)
    data = tp.PartitionData.of(inst)
    low = tp.solve_raw(tp.partition_cpsat(data, relax=False), "cpsat", 30)
    high = tp.solve_raw(tp.partition_cpsat(data, relax=True), "cpsat", 30)
    rate = milp.objective * data.servable_fraction
    assert low.objective <= rate * (1 + 1e-6) + 1e-9 <= high.objective * (1 + 1e-6) + 2e-9
    bare = solve(build_model("tier-partition", without_cached(inst)), solver="highs")
    assert milp.objective >= bare.objective * (1 - 1e-9)


@settings(max_examples=4, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6))
def test_battery_plan_with_the_cache(seed):
    """The windowed plan with random cached prefixes: CP-SAT's relaxed grid <= MILP, and the
    cache never raises the least cost."""
    inst = dataclasses.replace(random_cached(seed), problem="tier-autoscale")
    inst = dataclasses.replace(
        inst,
        cluster=Cluster(servers=4, kv_capacity_tokens=inst.cluster.kv_capacity_tokens),
        settings={"mode": "colocated", "servers": 4, "window_s": 10.0},
    )
    milp = solve(build_model("tier-autoscale", inst), solver="highs", time_limit=30)
    bare = solve(build_model("tier-autoscale", without_cached(inst)), solver="highs")
    if bare.status == Status.OPTIMAL:
        assert milp.status == Status.OPTIMAL
        assert milp.objective <= bare.objective * (1 + 1e-9) + 1e-6
    if milp.status == Status.OPTIMAL:
        cp = solve(build_model("tier-autoscale", inst), solver="cpsat", time_limit=30)
        assert cp.status == Status.OPTIMAL
        assert cp.objective <= milp.objective * (1 + 1e-9) + 1e-6


def test_an_all_zero_column_is_no_column():
    """Zeros in cached_tokens: the same partition data and the same bounds as without."""
    inst = random_cached(7)
    zeros = with_cached(inst, np.zeros(len(inst.workload), dtype=np.int64))
    bare = without_cached(inst)
    a, b = tp.PartitionData.of(zeros), tp.PartitionData.of(bare)
    assert np.array_equal(a.use, b.use) and np.array_equal(a.share, b.share)
    for model in ("tier-partition", "tier-partition-fluid"):
        x = solve(build_model(model, zeros), solver="highs")
        y = solve(build_model(model, bare), solver="highs")
        assert x.objective == y.objective
    assert tp.request_optimum(zeros).equals(tp.request_optimum(bare))


def test_disaggregated_with_a_cache_is_refused():
    """The engine serves a given cache co-located only; so do the tier models (one line)."""
    inst = random_cached(3, mode="disaggregated")
    with pytest.raises(ValueError, match="cached_tokens column .* co-located only"):
        tp.PartitionData.of(inst)
    with pytest.raises(ValueError, match="co-located only"):
        tp.request_optimum(inst)


def cached_stream(seed: int) -> Instance:
    """PolyServe's uniform stream, 40 requests on 2 servers with 40,000 KV tokens each (memory
    binds), every prompt with a random cached prefix."""
    inst = stream_instance("uniform", 40, 4.0, seed=seed, servers=2, kv_capacity_tokens=40_000)
    rng = np.random.default_rng(seed)
    prompt = inst.workload.prompt_tokens
    return with_cached(inst, (rng.uniform(0, 1, len(prompt)) * prompt).astype(np.int64))


def test_polyserve_runs_checker_clean_with_the_cache():
    """PolyServe and CO-Chunk on cached streams: no violation, every request settled."""
    for seed in (0, 1):
        frame = compare(cached_stream(seed), ["polyserve", "chunk"], time_limit=10)
        assert (frame.violations == 0).all(), frame
        assert (frame.objective > 0).all()


def test_polyserve_with_an_all_zero_column_decides_as_without():
    """Zeros in cached_tokens: PolyServe's run gives the very token times of the run without."""
    inst = without_cached(cached_stream(2))
    zeros = with_cached(inst, np.zeros(len(inst.workload), dtype=np.int64))
    outs = []
    for case in (inst, zeros):
        sched = make_scheduler("polyserve", case, mode="colocated", servers=2)
        out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
        assert check(sched.instance, out) == []
        outs.append(out)
    assert np.array_equal(outs[0].token_times, outs[1].token_times)

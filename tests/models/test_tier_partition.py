"""PolyServe's tier models: the per-request optimum by hand, and seeded random batteries where
the partition MILP equals brute force, CP-SAT's grids bracket it, and the plan's MILP and CP-SAT
agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models import tier_partition as tp
from slolab.solvers import Status, build_model, solve
from slolab.timing import LinearTiming, RooflineTiming, preset

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token
LINE = LinearTiming(
    0.010, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4, "decode_kv_tokens": 1e-6}, name="line"
)


def one_request(kv=10**6, tpot=0.05, ttft=1.0, p=100, d=11) -> Instance:
    wl = Workload(
        {
            "arrival_s": [0.0, 1.0],
            "prompt_tokens": [p, p],
            "output_tokens": [d, d],
            "ttft_slo_s": [ttft, ttft],
            "tpot_slo_s": [tpot, tpot],
        }
    )
    cl = Cluster(servers=1, kv_capacity_tokens=kv, max_batch_size=10**5)
    return Instance("one", wl, cl, LINE, problem="tier-partition")


def test_disaggregated_optimum_by_hand():
    """p = 100, d = 11 at 50 ms: B* = 194 (time); with 10,000 KV tokens B* = 94 (memory)."""
    opt = tp.request_optimum(one_request(), "disaggregated").iloc[0]
    # g = 1e-4 + 1e-6 (100 + 11 / 2) = 2.055e-4; B = floor((0.05 - 0.01) / 2.055e-4) = 194
    assert opt.batch == 194
    # t(194) = 0.01 + 194 * 2.055e-4 = 0.049867; decode cost 10 * 0.049867 / 194
    assert opt.iteration_s == pytest.approx(0.049867, rel=1e-12)
    assert opt.decode_cost_s == pytest.approx(10 * 0.049867 / 194, rel=1e-12)
    # prefill at P = 2048 tokens: 0.01 * 100 / 2048 + 1e-4 * 100
    assert opt.prefill_cost_s == pytest.approx(0.01 * 100 / 2048 + 0.01, rel=1e-12)
    # memory: floor(10,000 / 105.5) = 94
    assert tp.request_optimum(one_request(kv=10_000), "disaggregated").iloc[0].batch == 94


def test_colocated_optimum_by_hand():
    """Co-located: 110 tokens per request, T* = 364 tokens per iteration; a 15 ms TTFT is
    unattainable."""
    opt = tp.request_optimum(one_request(), "colocated").iloc[0]
    # q = (100 * 1e-4 + 10 * 2.055e-4) / 110 = 1.095909e-4; T = floor(0.04 / q) = 364
    q = (100 * 1e-4 + 10 * 2.055e-4) / 110
    assert opt.batch == 364
    assert opt.iteration_s == pytest.approx(0.01 + 364 * q, rel=1e-12)
    assert opt.cost_s == pytest.approx(110 * (0.01 + 364 * q) / 364, rel=1e-12)
    # TTFT 15 ms: one iteration (N = 1) must take <= 15 ms: T <= (0.015 - 0.01) / q = 45 < 110
    # tokens, but then N = ceil(110 / 45) = 3 iterations: infeasible
    assert not tp.request_optimum(one_request(ttft=0.015), "colocated").iloc[0].feasible


def test_fluid_rate_is_servers_over_mean_cost():
    """Two identical requests on 3 servers: 3 / cost (req/s)."""
    inst = one_request()
    cost = tp.request_optimum(inst, "colocated").iloc[0].cost_s
    assert tp.fluid_rate(inst, "colocated", servers=3) == pytest.approx(3 / cost, rel=1e-12)


def test_roofline_lines_and_other_forms():
    """A roofline gives its lines; a profiled table has no line view."""
    from slolab.timing import ProfiledTiming, timing_lines

    b, c = timing_lines(preset("llama3.1-8b-h200"))
    assert b.tolist() == [0.015, 0.010]
    assert c.shape == (2, 7)
    table = ProfiledTiming.from_model(LINE, [1, 10], [0, 100])
    with pytest.raises(ValueError, match="linear or roofline"):
        timing_lines(table)


def test_one_tier_partition_by_hand():
    """One tier, one class, PD: the rate is the smaller of decode and prefill capacity over the
    split of 3 servers, and the MILP, brute force and CP-SAT agree."""
    inst = one_request()
    import dataclasses

    inst = dataclasses.replace(inst, settings={"servers": 3, "mode": "disaggregated"})
    # decode: w = 10 * 2.055e-4 = 2.055e-3 s per request, a server gives 1 - 0.01 / 0.05 = 0.8
    # -> 389.29 req/s per decode server; prefill: h = 0.01 * 100 / 2048 + 0.01 = 0.0104883 s
    # -> 95.344 req/s per prefill server. Best split: 1 decode + 2 prefill: min(389.29, 190.69)
    res = solve(build_model("tier-partition", inst), solver="highs")
    assert res.status == Status.OPTIMAL
    assert res.objective == pytest.approx(2 / (0.01 * 100 / 2048 + 0.01), rel=1e-9)
    assert res.details["solution"]["servers_per_tier"] == {"50ms": 1.0, "prefill": 2.0}
    brute = solve(build_model("tier-partition", inst), solver="brute")
    assert brute.objective == pytest.approx(res.objective, rel=1e-9)
    cp = solve(build_model("tier-partition", inst), solver="cpsat")
    # the CP-SAT grid is an upper bound within its width (1 / 20,000 of the rate's bound)
    assert res.objective - 1e-9 <= cp.objective <= res.objective * (1 + 1e-3)
    assert res.schedule is None  # a bound, not a schedule


def random_instance(seed: int, mode: str) -> Instance:
    """2-3 tiers, 6-14 requests, a random linear or roofline timing, 2-4 servers."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 15))
    tiers = np.array([0.02, 0.05, 0.1])[: int(rng.integers(2, 4))]
    wl = Workload(
        {
            "arrival_s": np.sort(rng.uniform(0, 10, n)),
            "prompt_tokens": rng.integers(10, 3000, n),
            "output_tokens": rng.integers(2, 400, n),
            "ttft_slo_s": np.full(n, 1.0),
            "tpot_slo_s": rng.choice(tiers, n),
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
    timing = slope if rng.random() < 0.5 else RooflineTiming([LinearTiming(0.015, {}), slope])
    kv = int(rng.integers(20_000, 400_000))
    cl = Cluster(servers=int(rng.integers(2, 5)), kv_capacity_tokens=kv, max_batch_size=4096)
    settings_ = {"mode": mode, "servers": cl.servers}
    return Instance(f"r{seed}", wl, cl, timing, problem="tier-partition", settings=settings_)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), mode=st.sampled_from(tp.MODES))
def test_partition_milp_equals_brute_force_and_cpsat_brackets_it(seed, mode):
    """MILP (HiGHS) == brute force (every split, an LP each); CP-SAT's feasible grid <= MILP <=
    CP-SAT's relaxed grid; the fluid LP >= the MILP."""
    inst = random_instance(seed, mode)
    milp = solve(build_model("tier-partition", inst), solver="highs", time_limit=30)
    brute = solve(build_model("tier-partition", inst), solver="brute", time_limit=30)
    assert milp.status == brute.status == Status.OPTIMAL
    assert milp.objective == pytest.approx(brute.objective, rel=1e-6, abs=1e-9)
    data = tp.PartitionData.of(inst)
    low = tp.solve_raw(tp.partition_cpsat(data, relax=False), "cpsat", 30)
    high = tp.solve_raw(tp.partition_cpsat(data, relax=True), "cpsat", 30)
    rate = milp.objective * data.servable_fraction  # servable req/s
    assert low.status == high.status == Status.OPTIMAL
    assert low.objective <= rate * (1 + 1e-6) + 1e-9
    assert rate <= high.objective * (1 + 1e-6) + 1e-9
    # the grid is fine: both within 0.5 % of the MILP
    assert high.objective - low.objective <= 5e-3 * max(rate, 1e-9) + 1e-9
    fluid = solve(build_model("tier-partition-fluid", inst), solver="highs")
    assert fluid.objective >= milp.objective * (1 - 1e-9)


def plan_instance(seed: int, mode: str) -> Instance:
    """A random shift: 3 windows of 10 s, the tier mix changing window by window."""
    rng = np.random.default_rng(seed)
    base = random_instance(seed, mode)
    n = len(base.workload)
    columns = {c: np.asarray(base.workload[c]) for c in base.workload.columns}
    columns["arrival_s"] = np.sort(rng.uniform(0, 30, n))
    settings_ = {"mode": mode, "servers": 4, "window_s": 10.0}
    cl = Cluster(servers=4, kv_capacity_tokens=base.cluster.kv_capacity_tokens, startup_s=0.5)
    return Instance(
        f"p{seed}", Workload(columns), cl, base.timing, problem="tier-autoscale", settings=settings_
    )


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), mode=st.sampled_from(tp.MODES))
def test_plan_milp_is_bracketed_by_the_cpsat_grids(seed, mode):
    """The windowed plan: CP-SAT's relaxed grid <= MILP (HiGHS) <= CP-SAT's feasible grid, and
    the relaxed one is the registered CP-SAT formulation."""
    inst = plan_instance(seed, mode)
    milp = solve(build_model("tier-autoscale", inst), solver="highs", time_limit=30)
    if milp.status == Status.INFEASIBLE:
        cp = solve(build_model("tier-autoscale", inst), solver="cpsat", time_limit=30)
        # the relaxed grid may still fit what 4 servers cannot; it never finds the MILP wrong
        assert cp.status in (Status.INFEASIBLE, Status.OPTIMAL)
        return
    assert milp.status == Status.OPTIMAL
    data = tp.PlanData.of(inst)
    high = tp.solve_raw(tp.plan_cpsat(data, relax=False), "cpsat", 30)
    cp = solve(build_model("tier-autoscale", inst), solver="cpsat", time_limit=30)
    assert cp.status == Status.OPTIMAL
    assert cp.objective <= milp.objective * (1 + 1e-9) + 1e-6
    if high.status == Status.OPTIMAL:
        assert milp.objective <= high.objective * (1 + 1e-9) + 1e-6


def test_plan_by_hand_one_tier_two_windows():
    """One class, 10 requests in window 0 and none in window 1 at 0.5 s start-up: one server in
    window 0 (cost 10 s + 0.5 s), then drained (cost: its drain time)."""
    wl = Workload(
        {
            "arrival_s": np.r_[np.linspace(0, 9, 10), 19.0],
            "prompt_tokens": np.full(11, 100),
            "output_tokens": np.r_[np.full(10, 11), 1],
            "ttft_slo_s": np.full(11, 1.0),
            "tpot_slo_s": np.full(11, 0.05),
        }
    )
    cl = Cluster(servers=2, kv_capacity_tokens=10**6, max_batch_size=10**5, startup_s=0.5)
    settings_ = {"mode": "colocated", "servers": 2, "window_s": 10.0}
    inst = Instance("hand", wl, cl, LINE, problem="tier-autoscale", settings=settings_)
    res = solve(build_model("tier-autoscale", inst), solver="highs")
    plan = res.details["solution"]["servers_per_tier"]["50ms"]
    # window 1 holds a request of 1 output token: it still needs a server (its prefill)
    assert plan == [1.0, 1.0]
    # cost: 2 windows x 10 s + one start-up 0.5 s
    assert res.objective == pytest.approx(20.5, rel=1e-9)
    cp = solve(build_model("tier-autoscale", inst), solver="cpsat")
    assert cp.objective == pytest.approx(20.5, rel=1e-9)


def test_min_servers_for_a_rate():
    """The fewest servers serving a rate: 2 / 0.0150767 req/s -> 1 co-located server."""
    inst = one_request()
    cost = tp.request_optimum(inst, "colocated").iloc[0].cost_s
    # one server gives 1 - 0.01 / 0.05 = 0.8 s/s of slope work; a request uses
    # 100 * 1e-4 + 10 * 2.055e-4 = 0.012055 s: 66.36 req/s per server
    out = tp.min_servers(inst, 60.0, mode="colocated")
    assert out["status"] == "OPTIMAL"
    assert out["servers"] == 1.0
    assert tp.min_servers(inst, 70.0, mode="colocated")["servers"] == 2.0
    assert cost > 0

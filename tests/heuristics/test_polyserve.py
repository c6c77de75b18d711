"""PolyServe's controller, batch formation and baselines: hand cases (KV peak, profile inverse,
dynamic chunking, lazy promotion, the pending list) and small runs checked clean."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.heuristics.policies import make_policy, make_scheduler, policy_entry
from slolab.heuristics.polyserve import (
    PolyServeController,
    PolyServeParams,
    PolyServePolicy,
    Profile,
    kv_peak,
    polyserve_cluster,
    tier_pool,
)
from slolab.instances.records import Cluster, Instance, Workload
from slolab.problems.tier_partition import polyserve_instance
from slolab.sim import check, metrics, run
from slolab.timing import LinearTiming, preset

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token
LINE = LinearTiming(
    0.010, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4, "decode_kv_tokens": 1e-6}, name="line"
)


def test_kv_peak_is_largest_just_before_a_request_leaves():
    """Contexts 10, 20, 30 with 1, 3, 5 steps left: KV(t) peaks at t = 2 with 22 + 32 = 54."""
    # t = 0: 10 + 20 + 30 = 60; t = 2 (before the second leaves): (20 + 2) + (30 + 2) = 54;
    # t = 4: 30 + 4 = 34 -> the peak is 60 at t = 0
    assert kv_peak(np.array([10.0, 20.0, 30.0]), np.array([1.0, 3.0, 5.0])) == 60.0
    # contexts 1, 1, 100 with 10, 10, 1 steps: t = 0 -> 102; t = 9 -> 2 * 10 = 20 -> 102
    assert kv_peak(np.array([1.0, 1.0, 100.0]), np.array([10.0, 10.0, 1.0])) == 102.0
    # one growing request: context 5, 7 steps: t = 6 -> 11
    assert kv_peak(np.array([5.0]), np.array([7.0])) == 11.0
    assert kv_peak(np.zeros(0), np.zeros(0)) == 0.0


def test_profile_reads_and_inverts_the_table():
    """The profile of a linear model: time of 100 tokens at 1,000 KV, and the most tokens within
    20 ms at that KV (floor((0.02 - 0.01 - 0.001) / 1e-4) = 90)."""
    prof = Profile(LINE, kv_capacity_tokens=10_000)
    # 0.01 + 100 * 1e-4 + 1,000 * 1e-6 = 0.021 (bilinear is exact on a linear model)
    assert prof.time(100, 1000) == pytest.approx(0.021, rel=1e-9)
    assert prof.max_tokens(1000, 0.020) == 90
    assert prof.max_tokens(1000, 0.010) == 0  # not even the intercept fits


def test_pd_dynamic_chunking_merges_the_last_two_chunks():
    """A 2,050-token prompt with budget 1,024 runs as 1,024 + 1,026 (the remainder under 2 x
    1,024 is finished at once), not 1,024 + 1,024 + 2 (Sec. 4.7's example)."""
    wl = Workload(
        {
            "arrival_s": [0.0],
            "prompt_tokens": [2050],
            "output_tokens": [2],
            "ttft_slo_s": [5.0],
            "tpot_slo_s": [0.1],
        }
    )
    inst = Instance("chunk", wl, Cluster(servers=2, kv_capacity_tokens=10**5), LINE)
    sched = make_scheduler("polyserve", inst, mode="disaggregated", servers=2)
    out = sched.run(sched.instance, seed=0)
    prefill = out.it_features[:, 0]
    assert prefill[prefill > 0].tolist() == [1024.0, 1026.0]
    assert check(sched.instance, out) == []


def _two_tier_instance(arrival, prompt, output, tpot, ttft=None):
    n = len(arrival)
    wl = Workload(
        {
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ttft_slo_s": ttft or [1.0] * n,
            "tpot_slo_s": tpot,
        }
    )
    return Instance("two", wl, Cluster(servers=1, kv_capacity_tokens=10**5), LINE)


def test_lazy_promotion_uses_a_tighter_server_only_when_the_own_tier_is_full():
    """Fleet of one: the 100 ms request, arriving while the only server is in the 30 ms tier,
    is promoted there (its own tier has no server and none is left)."""
    inst = _two_tier_instance([0.0, 0.05], [50, 50], [20, 20], [0.03, 0.1])
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=1)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    assert out.server.tolist() == [0, 0]
    assert out.pool_names[out.server_pool[0]] == tier_pool(0.03)
    assert metrics.attainment(sched.instance, out) == 1.0
    assert check(sched.instance, out) == []
    # promotion off: the 100 ms request waits until the server leaves the 30 ms tier
    params = PolyServeParams(promotion="none")
    ctrl = PolyServeController(params)
    inst2 = polyserve_cluster(inst, "colocated", 1)
    out2 = run(inst2, PolyServePolicy(ctrl), ctrl, seed=0, scaler=ctrl)
    assert out2.routed_s[1] > out.routed_s[1]


def test_pending_server_joins_the_tier_of_the_requests_it_runs():
    """Fleet of one: A (20 ms) and B (100 ms, long) share the 20 ms server; once A is done the
    server runs only B, goes on the pending list at the next check (1 s), and when C (100 ms)
    arrives at 2 s the server is assigned to the 100 ms tier and takes C."""
    inst = _two_tier_instance([0.0, 0.01, 2.0], [50, 50, 50], [3, 200, 5], [0.02, 0.1, 0.1])
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=1)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    assigns = [e for e in out.scale_events if e.action == "assign"]
    assert [(e.server, e.pool) for e in assigns] == [(0, tier_pool(0.1))]
    assert 1.0 <= assigns[0].time_s <= 2.0 + 0.005 + 1e-9
    assert out.server.tolist() == [0, 0, 0]
    # the server counted for the 20 ms pool from its switch-on (the first tick after A arrived,
    # 5 ms) until the assign, then for the 100 ms one
    on_s = out.server_on_s[0]
    assert on_s == pytest.approx(0.005, rel=1e-9)
    assert out.cost_by_pool[tier_pool(0.02)] == pytest.approx(assigns[0].time_s - on_s, rel=1e-9)
    assert check(sched.instance, out) == []


def test_last_server_returns_to_the_best_effort_pool_once_empty():
    """One request: its tier's server is drained at the first check after it finishes, so the
    run costs less than the fleet would."""
    inst = _two_tier_instance([0.0, 3.0], [50, 50], [5, 5], [0.05, 0.05])
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=2)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    actions = [e.action for e in out.scale_events]
    # on (first request), drain (empty at the 1 s check), on (second request at 3 s)
    assert actions[:3] == ["on", "drain", "on"]
    assert out.cost_server_s < out.end_s
    assert check(sched.instance, out) == []


@pytest.fixture(scope="module")
def conv():
    """100 Azure conv requests at 15 req/s with PolyServe's SLOs, on 4 servers."""
    return polyserve_instance("azure_conv_2023", seed=0, servers=4, limit=100, rate=15.0)


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
@pytest.mark.parametrize("policy", ["polyserve", "random", "minimal", "chunk"])
def test_polyserve_and_baselines_run_clean(conv, policy, mode):
    """100 Azure conv requests on 4 servers at 15 req/s: every request finishes, the checker is
    clean, attainment is split by tier."""
    if policy == "chunk" and mode == "disaggregated":
        with pytest.raises(ValueError, match="co-located only"):
            make_scheduler(policy, conv, mode=mode, servers=4)
        return
    sched = make_scheduler(policy, conv, mode=mode, servers=4)
    out = sched.run(sched.instance, seed=0)
    assert out.finished.all()
    assert check(sched.instance, out) == []
    s = metrics.summary(sched.instance, out)
    assert set(s["attainment_by_tier"]) <= {"0", "1", "2", "3", "4"}
    assert len(s["attainment_by_tier"]) >= 3
    if policy == "polyserve":
        # light load: PolyServe meets (almost) every deadline and never uses the whole fleet
        assert s["attainment"] >= 0.98
        assert out.cost_server_s < 4 * out.end_s


def test_pd_baselines_run_at_the_bound_split(conv):
    """Random on 6 disaggregated servers takes the tier-partition bound's prefill split."""
    from slolab.heuristics.polyserve import bound_prefill_split

    split = bound_prefill_split(conv, 6)
    sched = make_scheduler("random", conv, mode="disaggregated", servers=6)
    assert 1 <= split <= 5
    assert sched.instance.cluster.prefill_servers == split


def test_policies_that_route_themselves_refuse_a_router(conv):
    """polyserve builds its own routers and pools: make_policy and a given router refuse."""
    inst = conv
    assert policy_entry("polyserve").setup is not None
    with pytest.raises(ValueError, match="make_scheduler"):
        make_policy("polyserve", inst)
    with pytest.raises(ValueError, match="routes requests itself: drop --router"):
        make_scheduler("polyserve", inst, router="least-loaded")
    with pytest.raises(ValueError, match="colocated or disaggregated"):
        make_scheduler("polyserve", inst, mode="static")


def test_params_are_checked():
    """Bad parameters name the field."""
    with pytest.raises(ValueError, match="promotion"):
        PolyServeParams(promotion="sometimes")
    with pytest.raises(ValueError, match="tick_s"):
        PolyServeParams(tick_s=0.0)
    with pytest.raises(ValueError, match="kv_reserve"):
        PolyServeParams(kv_reserve=1.0)


def test_capacity_bound_is_the_partition_optimum(conv):
    """The policy family's capacity bound equals the tier-partition MILP's optimum."""
    from slolab.models.tier_partition import TierPartition
    from slolab.solvers import solve

    inst = conv
    bound = policy_entry("polyserve").capacity_bound(inst, mode="colocated", servers=4)
    res = solve(TierPartition(inst, mode="colocated", servers=4), solver="highs")
    assert bound == pytest.approx(res.objective, rel=1e-9)


def test_h200_kv_capacity():
    """845,642 tokens: (0.9 x 141e9 - 2 x 8.03e9) B / 131,072 B per token, rounded down."""
    from slolab.heuristics.polyserve import H200_LLAMA31_8B_KV_TOKENS
    from slolab.timing.presets import LLAMA31_8B

    assert H200_LLAMA31_8B_KV_TOKENS == int(
        (0.9 * 141e9 - 2 * 8.03e9) / LLAMA31_8B.kv_bytes_per_token
    )
    assert preset("llama3.1-8b-h200").name == "llama3.1-8b-h200"


def test_reclaimed_prefill_server_is_not_drained_twice_in_one_tick():
    """Fleet of 3 full (prefill servers 0 and 1 idle, decode server 2): the 20 ms tier holds a
    request, so the tick reclaims an idle prefill server (1: fewest queued, newest); the scale-down
    check due at the same tick would drain that same last idle prefill server again, which the
    engine refuses once it has departed. One drain of server 1, nothing else."""
    from types import SimpleNamespace

    from slolab.heuristics.polyserve import PREFILL_POOL
    from slolab.sim.scaling import ClusterView

    inst = _two_tier_instance([0.0, 0.0], [50, 50], [5, 5], [0.02, 0.02])
    inst = polyserve_cluster(inst, "disaggregated", 3)
    ctrl = PolyServeController()
    ctrl.start(inst, seed=0)

    def server(sid, pool, load):
        return SimpleNamespace(
            id=sid, pool=pool, state="ready", accepting=True, load=load,
            waiting=(), prefilling=(), decoding=(0,) if load else (),
            remaining_prefill=lambda r: 0,
        )  # fmt: skip

    servers = (
        server(0, PREFILL_POOL, 0),
        server(1, PREFILL_POOL, 0),
        server(2, tier_pool(0.02), 1),
    )
    ctrl.held_count[0], ctrl.unplaced[0] = 1, True  # request 1 waits for a 20 ms decode server
    actions = ctrl.decide(ClusterView(1.0, inst.cluster.resolved_pools(), servers))  # type: ignore[arg-type]
    assert [(a.kind, a.server) for a in actions] == [("drain", 1)]

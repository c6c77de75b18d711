"""HyperFlexis's online algorithms: the token budget (Eq. 5), the dispatcher on its central
queue, priority mapping, the Alg. 3 scaler's decisions, SCORPIO and the SA adapter."""

from dataclasses import dataclass

import numpy as np
import pytest
from slolab.heuristics.baselines import RoundRobin
from slolab.heuristics.hyperflexis import (
    HoldRouter,
    HyperFlexisDispatcher,
    HyperFlexisScaler,
    PriorityMapper,
    ScalerParams,
    linear_prefill_coefficients,
    token_budget,
)
from slolab.heuristics.sa_online import SAOrderingPolicy
from slolab.heuristics.scorpio import ScorpioPolicy
from slolab.instances.records import Cluster, Instance, Pool, Workload
from slolab.problems.dispatch_scale import mix_instance, online_scheduler
from slolab.sim import ClusterView, check, metrics, run
from slolab.timing import LinearTiming, preset

# 10 ms per iteration, 1 ms per prompt token, 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 1e-3, "decode_tokens": 2e-3}, name="round")


def instance(arrival, prompt, output, ttft, tpot, *, servers=1, tier=None, **cluster):
    columns = {
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "ttft_slo_s": ttft,
        "tpot_slo_s": tpot,
    }
    if tier is not None:
        columns["tier"] = tier
    return Instance("h", Workload(columns), Cluster(servers=servers, **cluster), ROUND)


def test_token_budget_eq5_by_hand():
    """a = 0.1 ms/token, b = 20 ms, TTFT 0.7 s, TPOT 0.5 s, decode step 20 ms."""
    # amortize = 0.02 / (0.5 - 0.02) = 0.041667; P = 0.7 / 2.041667 = 0.342857 s;
    # n = (0.342857 - 0.02) / 1e-4 = 3228.57 tokens
    n = token_budget(1e-4, 0.02, ttft_s=0.7, tpot_s=0.5, decode_s=0.02)
    assert n == pytest.approx(3228.5714, rel=1e-6)
    # no decodes: P = TTFT / 2 = 0.35, n = 3300; decodes using the whole TPOT: 0
    assert token_budget(1e-4, 0.02, ttft_s=0.7, tpot_s=0.5, decode_s=0.0) == pytest.approx(3300)
    assert token_budget(1e-4, 0.02, ttft_s=0.7, tpot_s=0.5, decode_s=0.5) == 0.0
    # alpha = 0.5 halves the amortization: P = 0.7 / 2.020833 = 0.346392, n = 3263.92
    alpha = token_budget(1e-4, 0.02, ttft_s=0.7, tpot_s=0.5, decode_s=0.02, time_saving_rate=0.5)
    assert alpha == pytest.approx(3263.9175, rel=1e-6)


def test_linear_prefill_coefficients_of_eq_1():
    """Eq. 1 without its square: a = (0.1019 - 7.122e-6) ms per token, b = 18.10 ms."""
    a, b = linear_prefill_coefficients(preset("opt-13b-a100-hyperflexis"))
    assert a == pytest.approx(0.101892878e-3, rel=1e-9)
    assert b == pytest.approx(18.10e-3, rel=1e-9)


def test_dispatcher_holds_requests_and_serves_by_tpot_then_arrival():
    """Three requests held at 0 on one idle worker: the batch takes them by TPOT target (B,
    then A, C by arrival), all prompts within the budget; checker clean."""
    inst = instance([0.0, 0.0, 0.0], [10, 10, 10], [2, 2, 2], [1.0] * 3, [0.5, 0.1, 0.5])
    out = run(inst, HyperFlexisDispatcher(), HoldRouter(), seed=0)
    # one prefill batch of the three at 0: 0.010 + 0.030 = 0.040, then one decode step of 3:
    # 0.010 + 0.006 = 0.056
    first = out.entry_request[: out.entry_offsets[1]].tolist()
    assert first == [1, 0, 2]
    np.testing.assert_allclose(out.tokens_of(0), [0.040, 0.056], rtol=1e-12)
    np.testing.assert_allclose(out.routed_s, [0.0, 0.0, 0.0])
    assert check(inst, out) == []


def test_a_held_request_goes_to_the_first_worker_free_to_take_it():
    """Worker 0 takes A and B at 0 and decodes them; C, held at 0.031, is taken at once by the
    idle worker 1."""
    inst = instance(
        [0.0, 0.0, 0.031], [10, 10, 10], [4, 2, 2], [1.0, 1.0, 1.0], [0.013, 0.5, 0.5], servers=2
    )
    out = run(inst, HyperFlexisDispatcher(), HoldRouter(), seed=0)
    # at 0 both workers are idle: the first to decide (worker 0) takes the whole queue (A and
    # B, ordered by TPOT); C, held at 0.031 while worker 0 decodes, is taken by worker 1
    assert out.server.tolist() == [0, 0, 1]
    assert out.routed_s[2] == pytest.approx(0.031)
    assert check(inst, out) == []


def test_priority_mapping_index_correction_and_bounds():
    """Window of 4 finished requests; a priority-1 request takes the middle of its class past
    the priority-0 ones, minus the extra queuing delay; bounds per priority and contention."""
    inst = instance(
        [0.0] * 6,
        [1] * 6,
        [2] * 6,
        [1.0, 1.0, 2.0, 2.0, 1.0, 2.0],
        [0.1] * 6,
        tier=[0, 0, 1, 1, 0, 1],
    )
    mapper = PriorityMapper(inst, window_size=4, slo_range=0.5)
    # bounds: TTFT medians 1.0 (tier 0) and 2.0 (tier 1) -> [0.5, 1.5] and [1.0, 3.0]
    assert mapper.bounds["ttft"] == {0: (0.5, 1.5), 1: (1.0, 3.0)}
    # empty window: the middle of the bounds (the median target)
    assert mapper.assign(5, pending=[]) == pytest.approx((2.0, 0.1))
    mapper.record(0, ttft_s=0.6, tpot_s=0.05, queue_s=0.1)
    mapper.record(1, ttft_s=0.8, tpot_s=0.06, queue_s=0.2)
    mapper.record(2, ttft_s=1.4, tpot_s=0.07, queue_s=0.9)
    mapper.record(3, ttft_s=1.8, tpot_s=0.08, queue_s=0.3)
    # TTFT window sorted: 0.6 (p0), 0.8 (p0), 1.4 (p1), 1.8 (p1); priority 1: base 2 (the
    # priority-0 entries), offset ceil(2 / 2) = 1 -> index 3: 1.4 s, whose queuing delay 0.9
    # exceeds the latest priority-1 one (0.3) by 0.6: 0.8 s
    ttft, tpot = mapper.assign(5, pending=[4])
    # a priority-0 request (4) is pending: the strict lower bound of priority 1, 1.0 s
    assert ttft == pytest.approx(1.0)
    # TPOT window: 0.05, 0.06, 0.07 (queue 0.9), 0.08 -> 0.07 - 0.6 < 0: the bound 0.05
    assert tpot == pytest.approx(0.05)
    # nothing of higher priority pending: the bound relaxes to the tightest class's (0.5 s),
    # so the mapped 0.8 s stands
    assert mapper.assign(5, pending=[])[0] == pytest.approx(0.8)


@dataclass
class StubServer:
    """What the scaler's decision reads of a server once its metrics are given."""

    id: int
    pool: str
    ready: bool = True
    accepting: bool = True
    load: int = 0


class GivenMetrics(HyperFlexisScaler):
    """The scaler with its measured (U, W, Q) per pool given by the test."""

    def __init__(self, params, metrics_by_pool):
        super().__init__(params)
        self.metrics_by_pool = metrics_by_pool

    def _metrics(self, cluster, pool, role):
        return self.metrics_by_pool[pool]


def pd_view(now, counts):
    cl = Cluster.from_pools([Pool("prefill", "prefill", 2), Pool("decode", "decode", 2)])
    servers, k = [], 0
    for pool, n in counts.items():
        for _ in range(n):
            servers.append(StubServer(k, pool))
            k += 1
    return cl, ClusterView(now, cl.resolved_pools(), tuple(servers))


def test_scaler_moves_a_worker_to_the_pressed_pool_after_sustained_calm():
    """Decode pressed (wait ratio 0.8 > 0.5) while prefill is calm for 3 periods: the third
    period moves a prefill worker to decode instead of switching one on."""
    cl, view = pd_view(0.0, {"prefill": 2, "decode": 2})
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]})
    scaler = GivenMetrics(
        ScalerParams(sustain=3), {"prefill": (0.1, 0.0, 0.0), "decode": (0.1, 0.8, 0.0)}
    )
    scaler.start(Instance("pd", wl, cl, ROUND), seed=0)
    # periods 1 and 2: decode wants a worker, prefill calm only 1 and 2 periods: switch on
    first = scaler.decide(view)
    assert [(a.kind, a.pool) for a in first] == [("on", "decode")]
    scaler.decide(view)
    # period 3: prefill calm for 3 periods: move its least loaded, newest worker (id 1)
    third = scaler.decide(view)
    assert [(a.kind, a.server, a.pool) for a in third] == [("move", 1, "decode")]


def test_scaler_scales_in_after_sustained_calm_and_keeps_the_minimum():
    """A calm co-located pool drains one worker per period once calm for `sustain` periods."""
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]})
    cl = Cluster(servers=2)
    scaler = GivenMetrics(ScalerParams(sustain=2, min_servers=1), {"main": (0.0, 0.0, 0.0)})
    scaler.start(Instance("co", wl, cl, ROUND), seed=0)
    view = ClusterView(0.0, cl.resolved_pools(), (StubServer(0, "main"), StubServer(1, "main")))
    assert scaler.decide(view) == []
    drained = scaler.decide(view)
    assert [(a.kind, a.server) for a in drained] == [("drain", 1)]
    one = ClusterView(1.0, cl.resolved_pools(), (StubServer(0, "main"),))
    assert scaler.decide(one) == [] and scaler.decide(one) == []


def test_scorpio_keeps_the_step_within_the_tightest_tpot_by_pace():
    """A (TPOT 13 ms) and B (TPOT 1 s): a step of both (14 ms) exceeds 13 ms, so A decodes
    alone by its pace until done, then B."""
    inst = instance([0.0, 0.0], [10, 10], [3, 3], [1.0, 1.0], [0.013, 1.0])
    out = run(inst, ScorpioPolicy(), seed=0)
    # prefill both: 0.010 + 0.020 = 0.030; A alone: 0.012 per step -> 0.042, 0.054; then B
    # alone (within its TPOT): 0.066, 0.078
    np.testing.assert_allclose(out.tokens_of(0), [0.030, 0.042, 0.054], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.030, 0.066, 0.078], rtol=1e-12)
    assert check(inst, out) == []


def test_sa_adapter_runs_its_batch_to_completion_before_the_next():
    """B arrives while A's batch runs: it waits until A's last token (static batches)."""
    inst = instance([0.0, 0.005], [10, 10], [3, 2], [1.0, 1.0], [0.5, 0.5])
    out = run(inst, SAOrderingPolicy(), RoundRobin(), seed=0)
    # A: prefill 0.020, decodes 0.032, 0.044; B then: 0.064, 0.076
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.032, 0.044], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.064, 0.076], rtol=1e-12)
    assert check(inst, out) == []


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_every_setup_runs_clean_on_a_task_mix(mode):
    """The six heuristics on 80 requests of the 4-task mix at 160 req/s: checker clean, every
    request finished; the dispatcher meets at least as many as round robin here."""
    inst = mix_instance(
        "4-task",
        qps=160,
        seed=1,
        per_task=20,
        servers=4,
        mode=mode,
        prefill_servers=2 if mode == "disaggregated" else 0,
        max_servers=6,
    )
    names = ["hyperflexis", "hyperflexis-scaling", "hyperflexis-pm", "round-robin"]
    if mode == "colocated":
        names += ["scorpio-rr", "sa-rr"]
    attainment = {}
    for name in names:
        setup = online_scheduler(name, inst)
        out = setup.run(inst, seed=0)
        assert check(inst, out) == [], name
        assert np.isfinite(out.last_token_s).all(), name
        attainment[name] = metrics.attainment(inst, out)
    assert attainment["hyperflexis"] >= attainment["round-robin"]
    with pytest.raises(ValueError, match="dispatch-scale has no online heuristic 'nope'"):
        online_scheduler("nope", inst)


def test_sa_adapter_chunks_a_prompt_longer_than_the_token_cap():
    """Regression: a 5,000-token prompt with a 2,048-token cap was prefilled whole (the engine
    refused the batch); it is now prefilled in chunks of 2,048, 2,048 and 904 tokens."""
    inst = instance([0.0], [5000], [2], [100.0], [1.0], max_batch_tokens=2048)
    out = run(inst, SAOrderingPolicy(), RoundRobin(), seed=0, record_iterations=True)
    assert check(inst, out) == []
    prefill = out.entry_phase == 0
    chunks = out.entry_tokens[prefill].tolist()
    assert chunks == [2048, 2048, 904]  # 5,000 = 2 x 2,048 + 904
    assert len(out.tokens_of(0)) == 2


def test_scorpio_keeps_its_prefill_within_the_token_cap():
    """Regression: SCORPIO prefilled whole prompts past the 2,048-token cap (the engine refused
    the batch on the Mooncake trace). Two 1,500-token prompts: one per iteration; a lone
    5,000-token prompt: chunks of 2,048, 2,048 and 904."""
    inst = instance([0.0, 0.0], [1500, 1500], [2, 2], [100.0] * 2, [1.0] * 2, max_batch_tokens=2048)
    out = run(inst, ScorpioPolicy(), seed=0)
    assert check(inst, out) == []
    assert out.entry_tokens[out.entry_phase == 0].tolist() == [1500, 1500]  # 3,000 > 2,048
    inst = instance([0.0], [5000], [2], [100.0], [1.0], max_batch_tokens=2048)
    out = run(inst, ScorpioPolicy(), seed=0)
    assert check(inst, out) == []
    assert out.entry_tokens[out.entry_phase == 0].tolist() == [2048, 2048, 904]

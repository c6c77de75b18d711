"""ProServe heuristics: SlideBatching's budget and ordering, GoRouting's choice, the baselines."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.heuristics.baselines import LeastLoaded, PrefillFirstFCFS, SarathiFCFS
from slolab.heuristics.policies import make_policy, make_router, policy_entry
from slolab.heuristics.proserve import (
    GoRouting,
    GoRoutingParams,
    LatencyEstimator,
    SlideBatching,
    SlideBatchingParams,
    one_iteration_schedule,
)
from slolab.instances.records import Cluster, Instance, Workload
from slolab.problems.tdg_horizon import PROSERVE_POLICIES, proserve_instance
from slolab.sim import check, metrics, run
from slolab.timing import LinearTiming

# 10 ms per iteration, 1 ms per prompt token, 2 ms per decode token
TIMING = LinearTiming(0.01, {"prefill_tokens": 1e-3, "decode_tokens": 2e-3}, name="round")


def snapshot(rows: list[dict], now: float, eta: float) -> Instance:
    """A tdg-batch snapshot: rows with arrival, prompt, output, ttft, tpot, priority, generated
    (decoding when > 0)."""
    gen = np.array([r.get("generated", 0) for r in rows])
    wl = Workload(
        {
            "arrival_s": [r["arrival"] for r in rows],
            "prompt_tokens": [r["prompt"] for r in rows],
            "output_tokens": [r["output"] for r in rows],
            "ttft_slo_s": [r["ttft"] for r in rows],
            "tpot_slo_s": [r.get("tpot", 0.05) for r in rows],
            "priority": [r.get("priority", 1.0) for r in rows],
            "running": gen > 0,
            "remaining_prefill_tokens": np.where(gen > 0, 0, [r["prompt"] for r in rows]),
            "generated_tokens": gen,
        }
    )
    settings = {"scheduling_time_s": now, "latency_budget_s": eta, "eta_s": eta}
    settings.update({"w_prefill": 3.0, "w_decode": 1.0})
    return Instance("s", wl, Cluster(kv_capacity_tokens=10_000), TIMING, "tdg-batch", settings)


def test_budget_is_max_of_min_remain_and_eta():
    """t_budget = max(min remain, eta): 0.03 s when the earliest deadline is 0.03 s away."""
    inst = snapshot(
        [
            {"arrival": 0.0, "prompt": 10, "output": 4, "ttft": 0.13},
            {"arrival": 0.0, "prompt": 10, "output": 4, "ttft": 0.5},
        ],
        now=0.1,
        eta=0.02,
    )
    policy = SlideBatching(SlideBatchingParams(eta_s=0.02))
    schedule = one_iteration_schedule(inst, policy)
    # remain 0.03 and 0.4: budget max(0.03, 0.02) = 0.03; t_c 0.01 leaves 0.02 s = 20 tokens:
    # r0 (earliest, NORMAL) takes its whole 10 tokens, r1 the 10 left
    assert schedule.iterations[0][0].entries == ((0, "prefill", 10), (1, "prefill", 10))


def test_urgent_requests_go_by_density_under_load():
    """Under load (phi_a > every remain) all are URGENT and served by gain density."""
    inst = snapshot(
        [
            # first-token weight 3 x priority over exec: 3 / 0.04 = 75 and 6 / 0.01 = 600
            {"arrival": 0.0, "prompt": 40, "output": 4, "ttft": 0.15, "priority": 1.0},
            {"arrival": 0.0, "prompt": 10, "output": 4, "ttft": 0.2, "priority": 2.0},
        ],
        now=0.1,
        eta=0.03,
    )
    policy = SlideBatching(SlideBatchingParams(eta_s=0.03))
    schedule = one_iteration_schedule(inst, policy)
    # remain 0.05, 0.1; budget 0.05; phi_a = 0.05 / 0.04 * 0.05 = 0.0625: r0 URGENT (0.05),
    # r1 NORMAL (0.1 >= 0.0625) -> r0 first: 0.01 + 0.04 = 0.05 fills the budget
    assert schedule.iterations[0][0].entries == ((0, "prefill", 40),)
    # gamma 2 makes both URGENT (0.1 < 0.125): density puts r1 (600) before r0 (75);
    # r1 whole (0.02), then r0 gets the 30 tokens left
    policy = SlideBatching(SlideBatchingParams(eta_s=0.03, gamma=2.0))
    schedule = one_iteration_schedule(inst, policy)
    assert schedule.iterations[0][0].entries == ((1, "prefill", 10), (0, "prefill", 30))


def test_ablations_order_by_deadline_or_density():
    """The w/ only deadline ablation serves r0 first, w/ only density r1 first."""
    inst = snapshot(
        [
            {"arrival": 0.0, "prompt": 40, "output": 4, "ttft": 0.15, "priority": 1.0},
            {"arrival": 0.0, "prompt": 10, "output": 4, "ttft": 0.2, "priority": 2.0},
        ],
        now=0.1,
        eta=0.03,
    )
    first = {
        order: one_iteration_schedule(
            inst, SlideBatching(SlideBatchingParams(eta_s=0.03, order=order))
        )
        .iterations[0][0]
        .entries[0][0]
        for order in ("deadline", "density")
    }
    assert first == {"deadline": 0, "density": 1}


def test_estimator_chunk_fits_budget_exactly():
    """GETMAXCHUNK: 0.025 s left after t_c at 1 ms per token is 25 tokens (capped at 20)."""
    est = LatencyEstimator(TIMING)
    lines, feats = est.empty()
    assert est.max_chunk(lines, feats, 0.035, prefix=0, cap=100) == 25
    assert est.max_chunk(lines, feats, 0.035, prefix=0, cap=20) == 20
    assert est.max_chunk(lines, feats, 0.0105, prefix=0, cap=20) == 0


def test_gorouting_reserves_the_light_instance():
    """Both instances meet the request's TTFT: GoRouting keeps the idle one free (the loaded
    one stays under lam * TTFT) while Min-Load picks the idle one."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.001],
            "prompt_tokens": [20, 20],
            "output_tokens": [2, 2],
            "ttft_slo_s": [1.0, 1.0],
            "tpot_slo_s": [0.05, 0.05],
        }
    )
    inst = Instance("two", wl, Cluster(servers=2, kv_capacity_tokens=10_000), TIMING)
    seen: list[int] = []

    class Spy(GoRouting):
        def route(self, request, servers, now):
            k = super().route(request, servers, now)
            seen.append(k)
            return k

    # request 0: both idle, both light (exec 0 < 0.25 s): the most idle (lowest exec, index 0)
    # request 1: server 0 holds 20 tokens (exec ~0.03 s < 0.25 s TTFT), server 1 idle (0 s):
    # both light, the most idle is server 1
    run(inst, SlideBatching(), Spy(GoRoutingParams(mu=0.25, lam=0.75)), seed=0)
    assert seen == [0, 1]
    # with mu = 0 no instance is light: the most loaded candidate below lam * TTFT, server 0
    seen.clear()
    run(inst, SlideBatching(), Spy(GoRoutingParams(mu=0.0, lam=0.75)), seed=0)
    assert seen == [0, 0]


def test_baseline_names_reuse_the_existing_classes():
    """vLLM-FCFS, Sarathi-FCFS and Min-Load are the existing vllm, sarathi, least-loaded."""
    assert policy_entry("vllm-fcfs").make is PrefillFirstFCFS
    assert policy_entry("sarathi-fcfs").make is SarathiFCFS
    assert type(make_router("min-load")) is LeastLoaded


@pytest.fixture(scope="module")
def loaded_conv():
    """80 Azure conversation requests at 24 req/s with ProServe's SLOs, one server."""
    return proserve_instance("azure_conv_2023", seed=0, n=80, rate=24.0)


@pytest.mark.parametrize("policy", PROSERVE_POLICIES)
def test_every_proserve_policy_runs_clean(loaded_conv, policy):
    """Each policy finishes every request with an empty checker list and a TDG ratio in (0, 1]."""
    inst = loaded_conv
    out = run(inst, make_policy(policy, inst), None, seed=0)
    assert check(inst, out) == []
    assert out.finished.all()
    assert 0.0 < metrics.tdg_ratio(inst, out) <= 1.0


def test_sarathi_priority_serves_high_priority_prefills_first():
    """A 15-token budget: Sarathi-Priority gives the later high-priority prompt its 10 tokens
    first, Sarathi-FCFS the earlier low-priority one."""
    inst = snapshot(
        [
            {"arrival": 0.0, "prompt": 10, "output": 4, "ttft": 1.0, "priority": 1.0},
            {"arrival": 0.01, "prompt": 10, "output": 4, "ttft": 1.0, "priority": 2.0},
        ],
        now=0.02,
        eta=0.02,
    )
    entries = {
        name: one_iteration_schedule(inst, make_policy(name, inst, token_budget=15))
        .iterations[0][0]
        .entries
        for name in ("sarathi-priority", "sarathi-fcfs")
    }
    assert entries["sarathi-priority"] == ((1, "prefill", 10), (0, "prefill", 5))
    assert entries["sarathi-fcfs"] == ((0, "prefill", 10), (1, "prefill", 5))


def test_fairbatching_puts_due_decodes_before_prefills():
    """FairBatching: a decode due within one TPOT goes first, a prefill next, a decode with
    slack last; a 12-token budget leaves the slack decode out."""
    inst = snapshot(
        [
            # r0 decoding, next token due 0 + 0.1 + 2 * 0.05 = 0.2: 0.02 s after now (< TPOT)
            {"arrival": 0.0, "prompt": 5, "output": 9, "ttft": 0.1, "generated": 2},
            # r1 decoding, next token due 0 + 0.5 + 2 * 0.05 = 0.6: 0.42 s away
            {"arrival": 0.0, "prompt": 5, "output": 9, "ttft": 0.5, "generated": 2},
            {"arrival": 0.1, "prompt": 11, "output": 4, "ttft": 1.0},
        ],
        now=0.18,
        eta=0.02,
    )
    batch = one_iteration_schedule(inst, make_policy("fairbatching", inst, token_budget=12))
    assert batch.iterations[0][0].entries == ((2, "prefill", 11), (0, "decode", 1))


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_gorouting_on_four_instances_runs_clean(mode):
    """GoRouting and SlideBatching on 4 instances (2P2D when disaggregated): checker clean."""
    inst = proserve_instance(
        "azure_conv_2023",
        seed=0,
        n=60,
        rate=40.0,
        servers=4,
        mode=mode,
        prefill_servers=2 if mode == "disaggregated" else 0,
    )
    decode_router = make_router("most-free-kv") if mode == "disaggregated" else None
    out = run(
        inst,
        make_policy("slide-batching", inst),
        make_router("go-routing"),
        seed=0,
        decode_router=decode_router,
    )
    assert check(inst, out) == []
    assert out.finished.all()

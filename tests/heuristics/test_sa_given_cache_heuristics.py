"""The SA paper's annealing, its baselines and its online adapter with a snapshot's given
prefix cache (the workload's ``cached_tokens``): their plans replay with no violation to the G
they predict, never above the exact optimum, and an all-zero column changes nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sa_ordering_cases import random_ordering_instance
from slolab import sim
from slolab.heuristics.baselines import RoundRobin
from slolab.heuristics.sa_online import SAOrderingPolicy
from slolab.heuristics.sa_ordering import BASELINES, SAParams, plan_g, plan_schedule, sa_order
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models.sa_ordering import SAOrderingModel
from slolab.sim import check, run
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# a short annealing (T0 = 500 down to 20 by 0.8, 30 moves per level) keeps the battery fast
QUICK = SAParams(cooling_rate=0.8, iterations_per_temperature=30)
# 10 ms per iteration, 1 ms per computed prompt token, 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 1e-3, "decode_tokens": 2e-3}, name="round")


def with_cache(instance: Instance, seed: int) -> Instance:
    """``instance`` with each request's cached prefix drawn uniformly in 0..prompt - 1."""
    wl = instance.workload
    rng = np.random.default_rng(seed)
    cached = np.minimum(
        (rng.uniform(0, 1, len(wl)) * wl.prompt_tokens).astype(np.int64), wl.prompt_tokens - 1
    )
    return dataclasses.replace(instance, workload=wl.with_columns(cached_tokens=cached))


@pytest.mark.parametrize(("seed", "n", "b"), [(3, 5, 2), (27, 6, 2), (40, 6, 3)])
def test_annealing_and_baselines_replay_clean_with_the_cache(seed: int, n: int, b: int) -> None:
    """Seeded snapshots with random cached prefixes: the annealing's and every baseline's
    plan pass the checker, replay to the G the plan predicts and stay at most brute force's."""
    instance = with_cache(random_ordering_instance(seed, n, b), seed + 1000)
    optimum = solve(SAOrderingModel(instance), "brute", time_limit=30)
    assert optimum.status == Status.OPTIMAL
    plans = {"sa": sa_order(instance, QUICK, seed=seed)[0]}
    plans.update({name: rule(instance) for name, rule in BASELINES.items()})
    for name, plan in plans.items():
        outcome = sim.replay(instance, plan_schedule(plan))
        assert sim.check(instance, outcome) == [], name
        g = sim.metrics.g_ratio(instance, outcome)
        assert g == pytest.approx(plan_g(instance, plan), rel=1e-9), name
        assert g <= optimum.objective * (1 + 1e-9), name


def test_an_all_zero_column_gives_the_same_annealing() -> None:
    """The same seed anneals to the same plan with and without a zero column."""
    plain = random_ordering_instance(11, 6, 3)
    zero = dataclasses.replace(
        plain, workload=plain.workload.with_columns(cached_tokens=np.zeros(6, dtype=int))
    )
    assert sa_order(plain, QUICK, seed=4) == sa_order(zero, QUICK, seed=4)


def test_the_online_adapter_prefills_only_the_uncached_prompt() -> None:
    """Two 10-token prompts with 6 cached and 3 output tokens each on a 16-token server: the
    plan batches both (G: 2 / 0.092 together, 2 / 0.114 apart), and both fit (4 computed + 3
    generated = 7 tokens each, where whole prompts would need 13 each): one iteration of two
    4-token chunks, 0.010 + 0.008 = 0.018 s, then decodes of 0.010 + 2 * 0.002 = 0.014 s."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.0],
            "prompt_tokens": [10, 10],
            "output_tokens": [3, 3],
            "ttft_slo_s": [1.0, 1.0],
            "tpot_slo_s": [0.5, 0.5],
            "cached_tokens": [6, 6],
        }
    )
    inst = Instance("h", wl, Cluster(servers=1, kv_capacity_tokens=16), ROUND)
    out = run(inst, SAOrderingPolicy(), RoundRobin(), seed=0, record_iterations=True)
    assert check(inst, out) == []
    assert out.entry_tokens[out.entry_phase == 0].tolist() == [4, 4]
    for r in (0, 1):
        np.testing.assert_allclose(out.tokens_of(r), [0.018, 0.032, 0.046], rtol=1e-12)


def test_the_online_adapter_runs_clean_with_random_cached_prefixes() -> None:
    """40 requests with random cached prefixes on two tight servers (seed 5): checker clean,
    every request finished; each first prefill start skips exactly its cached tokens."""
    rng = np.random.default_rng(5)
    n = 40
    prompt = rng.integers(2, 300, n)
    wl = Workload(
        {
            "arrival_s": np.sort(rng.uniform(0, 1.0, n)),
            "prompt_tokens": prompt,
            "output_tokens": rng.integers(1, 40, n),
            "ttft_slo_s": np.full(n, 0.5),
            "tpot_slo_s": np.full(n, 0.05),
            "cached_tokens": (rng.uniform(0, 1, n) * (prompt - 1)).astype(np.int64),
        }
    )
    cluster = Cluster(servers=2, kv_capacity_tokens=1500, max_batch_tokens=256)
    inst = Instance("r", wl, cluster, ROUND)
    out = run(inst, SAOrderingPolicy(batch_size=4), RoundRobin(), seed=5, record_iterations=True)
    assert check(inst, out) == []
    assert out.finished.all()
    prefilled = np.zeros(n, dtype=np.int64)
    first = out.entry_phase == 0
    np.add.at(prefilled, out.entry_request[first], out.entry_tokens[first])
    done = out.preemptions == 0
    expect = prompt - wl["cached_tokens"]
    np.testing.assert_array_equal(prefilled[done], expect[done])

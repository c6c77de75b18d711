"""SLOs-Serve admission with a snapshot's given cache: B1, B2 (MILP and brute force), the DP and
the online policy charge only a new request's uncached prompt and hold its cache outside the
capacity, as the engine replays it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from slolab import sim
from slolab.harness.compare import objective
from slolab.heuristics.slos_serve import SLOsServePolicy
from slolab.heuristics.slos_serve_dp import dp_schedule
from slolab.instances.hints import SuggestingError, cli_message
from slolab.instances.records import Cluster, Instance, Workload, cached_prompt_tokens
from slolab.models.slos_admission import (
    AdmissionB1,
    AdmissionB2,
    AdmissionProblem,
    snapshot_instance,
)
from slolab.problems import get_problem
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# 0.01 s per iteration + 0.4 ms per token: time2bs(0.05) = (0.05 - 0.01) / 4e-4 = 100 tokens.
TIMING = LinearTiming(0.01, {"prefill_tokens": 4e-4, "decode_tokens": 4e-4}, name="round")
#: Seeds of the random calls (recorded: the battery is these, not drawn).
SEEDS = range(10)


def random_call(seed: int, cached: bool = True) -> Instance:
    """A small call at 1 s: 1-5 new requests (about 70% with a random cached prefix) and 0-3
    running ones (decoding or prefilling), TPOT tiers 0.05 / 0.1 / 0.2 s (multiples of t0)."""
    rng = np.random.default_rng(seed)
    n_new, n_run = int(rng.integers(1, 6)), int(rng.integers(0, 4))
    n = n_new + n_run
    running = np.arange(n) < n_run
    decoding = running & (rng.random(n) < 0.6)
    prompt = rng.integers(20, 300, n)
    output = rng.integers(2, 20, n)
    remaining = np.where(decoding, 0, np.where(running, rng.integers(1, prompt + 1), prompt))
    generated = np.where(decoding, rng.integers(1, output), 0)
    arrival = np.where(running, rng.uniform(0.5, 0.9, n), 1.0)
    ttft = np.where(running, 1.0 - arrival + rng.uniform(0.3, 0.8, n), rng.uniform(0.05, 0.6, n))
    kv = prompt + output
    cache = np.where(~running & (rng.random(n) < 0.7), rng.integers(0, prompt), 0)
    capacity = int(kv[running].sum() + 0.7 * (kv - cache)[~running].sum()) + 1
    return snapshot_instance(
        f"cached-call-{seed}",
        1.0,
        arrival,
        prompt,
        output,
        ttft.round(3),
        rng.choice([0.05, 0.1, 0.2], n),
        TIMING,
        cluster=Cluster(kv_capacity_tokens=capacity),
        running=running,
        remaining_prefill_tokens=remaining,
        generated_tokens=generated,
        value=rng.integers(1, 10, n),
        cached_tokens=cache if cached else None,
    )


def replayed(instance: Instance, schedule) -> float:
    """The admitted value the engine's replay of ``schedule`` earns (its checker clean)."""
    outcome = sim.replay(instance, schedule)
    assert sim.check(instance, outcome) == []
    return objective(instance, outcome)


@pytest.mark.parametrize("seed", SEEDS)
def test_models_and_dp_agree_with_their_replays_under_a_given_cache(seed):
    """B1 and B2 (brute force and HiGHS) and the DP: equal optima where they must be, each
    objective its replay's, bounds above the optimum, and B2 >= B1 (tiers multiples of t0)."""
    instance = random_call(seed)
    assert cached_prompt_tokens(instance.workload).any()
    results = {
        (name, solver): solve(model(instance), solver=solver, time_limit=60)
        for name, model in (("b1", AdmissionB1), ("b2", AdmissionB2))
        for solver in ("brute", "highs")
    }
    b1, b2 = results["b1", "highs"], results["b2", "highs"]
    assert results["b1", "brute"].status == b1.status
    assert results["b2", "brute"].status == b2.status
    if b1.status != Status.OPTIMAL:
        assert b1.status == Status.INFEASIBLE
        return
    assert b2.status == Status.OPTIMAL
    assert results["b1", "brute"].objective == pytest.approx(b1.objective)
    assert results["b2", "brute"].objective == pytest.approx(b2.objective)
    assert b2.objective >= b1.objective - 1e-6
    for result in results.values():
        assert result.bound >= result.objective - 1e-6
        assert replayed(instance, result.schedule) == pytest.approx(result.objective)
    # the exact DP (units of one token) is B1 by another route
    assert replayed(instance, dp_schedule(instance, seed=0)) == pytest.approx(b1.objective)
    # the cache only takes work away: the optimum without it is no larger
    without = solve(AdmissionB1(random_call(seed, cached=False)), solver="highs")
    if without.status == Status.OPTIMAL:
        assert without.objective <= b1.objective + 1e-6


def two_prompts(cached_b: int, capacity: int = 200) -> Instance:
    """New A (120 prompt tokens, value 3) and B (90 tokens, value 2), 5 output tokens each, due
    at 0.1 s, TPOT 0.05 s: two batches of 100 tokens before the deadline; B has ``cached_b``
    tokens in the given cache."""
    return snapshot_instance(
        "two-prompts",
        0.0,
        [0.0, 0.0],
        [120, 90],
        [5, 5],
        [0.1, 0.1],
        [0.05, 0.05],
        TIMING,
        cluster=Cluster(kv_capacity_tokens=capacity),
        value=[3.0, 2.0],
        cached_tokens=[0, cached_b],
    )


@pytest.mark.parametrize("model", [AdmissionB1, AdmissionB2])
def test_a_cached_prefix_lets_both_prompts_in(model):
    """Without the cache 120 + 90 = 210 prompt tokens exceed the 2 x 100 before the deadline
    (and 125 + 95 = 220 KV tokens the 200 of memory): A alone, value 3. With 20 of B's cached,
    120 + 70 = 190 <= 200 and 125 + 75 = 200 <= 200: both, value 5, and the replay prefills
    190 tokens."""
    for cached_b, value, prefilled in ((0, 3.0, 120), (20, 5.0, 190)):
        instance = two_prompts(cached_b)
        problem = AdmissionProblem.from_instance(instance)
        assert problem.remaining_prefill_tokens.tolist() == [120, 90 - cached_b]
        assert problem.kv_tokens.tolist() == [125, 95 - cached_b]
        result = solve(model(instance), solver="highs")
        assert result.status == Status.OPTIMAL
        assert result.objective == pytest.approx(value)
        outcome = sim.replay(instance, result.schedule)
        assert sim.check(instance, outcome) == []
        assert objective(instance, outcome) == pytest.approx(value)
        assert int(outcome.entry_tokens[outcome.entry_phase == 0].sum()) == prefilled


def test_the_cache_alone_frees_the_memory():
    """Budget ample (capacity-only case): prompts 120 and 90 due at 0.2 s (400 tokens), memory
    200: 125 + 95 = 220 does not fit, so A alone (3); B with 20 cached holds 75: 200, both (5)."""
    for cached_b, value in ((0, 3.0), (20, 5.0)):
        instance = two_prompts(cached_b)
        wl = instance.workload
        instance = dataclasses.replace(instance, workload=wl.with_columns(ttft_slo_s=[0.2, 0.2]))
        assert solve(AdmissionB1(instance), solver="highs").objective == pytest.approx(value)


@pytest.mark.parametrize("seed", SEEDS[:5])
def test_an_all_zero_column_decides_as_no_column(seed):
    """An all-zero cached_tokens column gives the same problem, optima and schedules as none."""
    bare = random_call(seed, cached=False)
    wl = bare.workload
    zero = dataclasses.replace(
        bare, workload=wl.with_columns(cached_tokens=np.zeros(len(wl), dtype=np.int64))
    )
    a, b = AdmissionProblem.from_instance(bare), AdmissionProblem.from_instance(zero)
    np.testing.assert_array_equal(a.remaining_prefill_tokens, b.remaining_prefill_tokens)
    np.testing.assert_array_equal(a.kv_tokens, b.kv_tokens)
    for model in (AdmissionB1, AdmissionB2):
        first, second = solve(model(bare), "highs"), solve(model(zero), "highs")
        assert first.status == second.status
        assert first.objective == second.objective
        assert first.schedule == second.schedule
    assert dp_schedule(bare, seed=0) == dp_schedule(zero, seed=0)


def test_a_running_request_with_a_cache_is_refused():
    """A running request is warm-started holding its KV: a cache on it is refused, naming the
    column and the row."""
    instance = random_call(1)
    wl = instance.workload
    running = np.asarray(wl["running"], dtype=bool)
    assert running.any()
    cached = np.where(running, 1, 0)
    bad = dataclasses.replace(instance, workload=wl.with_columns(cached_tokens=cached))
    row = int(np.flatnonzero(running)[0])
    with pytest.raises(
        ValueError, match=rf"cached_tokens of a running request must be 0 .* \(row {row}\)"
    ):
        AdmissionB1(bad)


def test_the_online_policy_admits_what_fits_beside_the_cache():
    """A (150 prompt tokens, 100 cached, 5 output) and B (60 prompt, 4 output) on 192 KV
    tokens, the DP counting memory in units of 64: with the cache they hold 55 + 64, one unit
    each, 2 <= 3, so the DP admits both and both meet their SLOs; with the column at 0 A needs
    155, three units, 3 + 1 > 3, and one goes best effort."""
    cols = {
        "arrival_s": [0.0, 0.0],
        "prompt_tokens": [150, 60],
        "output_tokens": [5, 4],
        "ttft_slo_s": [0.5, 0.5],
        "tpot_slo_s": [0.1, 0.1],
    }
    tiers = {}
    for cached in (100, 0):
        instance = Instance(
            "two",
            Workload({**cols, "cached_tokens": [cached, 0]}),
            Cluster(servers=1, kv_capacity_tokens=192),
            TIMING,
        )
        policy = SLOsServePolicy()
        outcome = sim.run(instance, policy, seed=0)
        assert sim.check(instance, outcome) == []
        tiers[cached] = sorted(policy.tier.values())
        if cached:
            assert sim.metrics.met(instance, outcome, "deadline").tolist() == [True, True]
    assert tiers == {100: ["slo", "slo"], 0: ["best-effort", "slo"]}


def test_a_mooncake_cut_with_its_cache():
    """The seed-0 Mooncake cut (10 new, 20 running) with cache: the new requests find
    68,096 of their 130,847 prompt tokens cached, the running ones none; B1 admits 9 (its
    replay too), 4 with the column at 0 on the same capacity."""
    instance = get_problem("slos-admission").builder(
        seed=0, trace="mooncake_conversation", new=10, running=20, cache=True
    )
    wl = instance.workload
    running = np.asarray(wl["running"], dtype=bool)
    cached = cached_prompt_tokens(wl)
    assert int(cached.sum()) == 68_096
    assert int(wl.prompt_tokens[~running].sum()) == 130_847
    assert not cached[running].any()
    result = solve(AdmissionB1(instance), solver="highs")
    assert result.objective == pytest.approx(9.0)
    assert replayed(instance, result.schedule) == pytest.approx(9.0)
    zero = dataclasses.replace(instance, workload=wl.with_columns(cached_tokens=0 * cached))
    assert solve(AdmissionB1(zero), solver="highs").objective == pytest.approx(4.0)


def test_the_cache_needs_block_ids():
    """A trace without hash_ids, or a simulated call, cannot take a cache: one line each."""
    build = get_problem("slos-admission").builder
    with pytest.raises(SuggestingError, match="needs a trace with prompt block ids") as plain:
        build(seed=0, new=3, running=2, cache=True)
    with pytest.raises(
        SuggestingError, match="needs a cut of a trace with prompt block ids"
    ) as sim_run:
        build(seed=0, from_simulation=True, cache=True)
    # the command line names the flags
    assert "--cache needs a trace" in cli_message(plain.value)
    assert cli_message(sim_run.value).startswith("--cache needs a cut")
    assert "--from-simulation" in cli_message(sim_run.value)

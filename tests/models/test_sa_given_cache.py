"""SA ordering with a snapshot's given prefix cache (the workload's ``cached_tokens``): every
exact method charges only the uncached prompt, its optimum replays to itself through the
engine and the checker, the methods agree with brute force, the bounds stay above the optimum,
and an all-zero column changes nothing."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
from sa_ordering_cases import NAN, ordering_instance, random_ordering_instance
from slolab import sim
from slolab.instances.records import Cluster, Instance
from slolab.models.sa_bp import SAOrderingBranchPrice
from slolab.models.sa_columns import (
    SAOrderingColumns,
    claim_capacity_cuts,
    latency_floor,
    met_limit,
    start_bounds,
)
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel, batches_of
from slolab.models.sa_time_index import time_indexed_bound
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming
from test_sa_bp import every_plan

# 0.1 s per iteration plus 1 ms per computed prompt token plus 0.1 ms per KV token a decode
# step reads
PER_TOKEN = LinearTiming(0.1, {"prefill_tokens": 1e-3, "decode_kv_tokens": 1e-4}, name="tok")

#: seeds of the random battery: (instance seed, requests, largest batch)
BATTERY = [(3, 5, 2), (11, 5, 3), (27, 6, 2), (40, 6, 3)]


def with_cache(instance: Instance, seed: int) -> Instance:
    """``instance`` with each request's cached prefix drawn uniformly in 0..prompt - 1."""
    wl = instance.workload
    rng = np.random.default_rng(seed)
    cached = (rng.uniform(0, 1, len(wl)) * wl.prompt_tokens).astype(np.int64)
    cached = np.minimum(cached, wl.prompt_tokens - 1)
    return dataclasses.replace(instance, workload=wl.with_columns(cached_tokens=cached))


def cached_battery(seed: int, n: int, b: int) -> Instance:
    return with_cache(random_ordering_instance(seed, n, b), seed + 1000)


def replays_to(instance: Instance, result) -> float:
    """The replayed G of ``result``'s schedule, after checking it."""
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    return sim.metrics.g_ratio(instance, outcome)


def test_member_timing_charges_only_the_uncached_prompt() -> None:
    """A 1,000-token prompt with 900 cached, 2 output tokens, B = 2: the prefill computes 100
    tokens per sequence, the decode step reads the whole 1,001-token context."""
    inst = ordering_instance([2], [NAN], [NAN], [10.0], batch_size=2, prompt_tokens=[1000])
    inst = dataclasses.replace(inst, timing=PER_TOKEN)
    cached = dataclasses.replace(inst, workload=inst.workload.with_columns(cached_tokens=[900]))
    plain = OrderingProblem.from_instance(inst)
    data = OrderingProblem.from_instance(cached)
    # s = 1: P = 0.1 + 0.001 * 100 = 0.2; decode 0.1 + 1e-4 * 1001 = 0.2001; e = 0.4001
    # s = 2: P = 0.1 + 0.001 * 200 = 0.3; decode 0.1 + 1e-4 * 2002 = 0.3002; e = 0.6002
    np.testing.assert_allclose(data.first_token_s[0, 1:], [0.2, 0.3], rtol=1e-12)
    np.testing.assert_allclose(data.exec_s[0, 1:], [0.4001, 0.6002], rtol=1e-12)
    # without the cache: P(1) = 0.1 + 1.0 = 1.1, P(2) = 0.1 + 2.0 = 2.1, the same decode steps
    np.testing.assert_allclose(plain.exec_s[0, 1:], [1.3001, 2.4002], rtol=1e-12)


def cache_flips_the_order() -> Instance:
    """Code request 0 (1,000-token prompt, 900 cached, e2e 0.25 s) and code request 1 (200
    tokens, nothing cached, e2e 2 s), one token each, B = 1."""
    inst = ordering_instance(
        [1, 1], [NAN, NAN], [NAN, NAN], [0.25, 2.0], batch_size=1, prompt_tokens=[1000, 200]
    )
    return dataclasses.replace(inst, timing=PER_TOKEN)


@pytest.mark.parametrize("solver", ["brute", "highs", "cpsat"])
def test_the_cache_changes_the_order_and_the_optimum(solver: str) -> None:
    """Without the cache request 0 takes 1.1 s and can never meet its 0.25 s SLO: 1 first
    (0.3 s, met), then 0 (1.4 s, late), G = 1 / 1.7. With 900 of its tokens cached it takes
    0.2 s: 0 first (met), then 1 (0.5 s, met), G = 2 / 0.7."""
    plain = cache_flips_the_order()
    cached = dataclasses.replace(
        plain, workload=plain.workload.with_columns(cached_tokens=[900, 0])
    )
    before = solve(SAOrderingModel(plain), solver, time_limit=20)
    after = solve(SAOrderingModel(cached), solver, time_limit=20)
    assert before.status == after.status == Status.OPTIMAL
    # G = 1 met / (0.3 + 1.4) s
    assert before.objective == pytest.approx(1 / 1.7, rel=1e-12)
    assert batches_of(before.schedule) == ((1,), (0,))
    # G = 2 met / (0.2 + 0.5) s
    assert after.objective == pytest.approx(2 / 0.7, rel=1e-12)
    assert batches_of(after.schedule) == ((0,), (1,))
    assert replays_to(cached, after) == pytest.approx(2 / 0.7, rel=1e-12)


def test_cached_tokens_sit_outside_the_capacity() -> None:
    """Capacity 500, B = 2: the 1,000-token request alone does not fit (1,001 KV tokens);
    with 900 cached the pair holds 101 + 201 = 302 tokens, and the replay stays within it."""
    plain = cache_flips_the_order()
    small = Cluster(mode="static", max_batch_size=2, kv_capacity_tokens=500)
    plain = dataclasses.replace(plain, cluster=small, settings={"batch_size": 2})
    with pytest.raises(ValueError, match="need 1202 KV tokens together"):
        OrderingProblem.from_instance(plain)
    cached = dataclasses.replace(
        plain, workload=plain.workload.with_columns(cached_tokens=[900, 0])
    )
    result = solve(SAOrderingModel(cached), "brute", time_limit=20)
    assert result.status == Status.OPTIMAL
    outcome = sim.replay(cached, sim.Schedule.static_batches([(0, 1)]))
    assert sim.check(cached, outcome) == []
    assert int(outcome.it_kv_tokens.max()) == 302
    assert replays_to(cached, result) == pytest.approx(result.objective, rel=1e-9)


@pytest.mark.parametrize(("seed", "n", "b"), BATTERY)
def test_every_method_proves_brute_force_with_the_cache(seed: int, n: int, b: int) -> None:
    """Seeded snapshots with random cached prefixes: the MILP (HiGHS), CP-SAT, the column
    method and branch-and-price (SCIP alone) prove brute force's G*, and each plan replays to
    its objective with no violation."""
    instance = cached_battery(seed, n, b)
    brute = solve(SAOrderingModel(instance), "brute", time_limit=30)
    assert brute.status == Status.OPTIMAL
    assert replays_to(instance, brute) == pytest.approx(brute.objective, rel=1e-9)
    runs = [
        (SAOrderingModel(instance), "highs"),
        (SAOrderingModel(instance), "cpsat"),
        (SAOrderingColumns(instance), "highs"),
        (SAOrderingBranchPrice(instance, warm_start=False), "highs"),
    ]
    for model, solver in runs:
        result = solve(model, solver, time_limit=30)
        assert result.status == Status.OPTIMAL, (model.name, solver)
        assert result.objective == pytest.approx(brute.objective, rel=1e-9), (model.name, solver)
        assert result.bound >= result.objective * (1 - 1e-6)
        assert replays_to(instance, result) == pytest.approx(result.objective, rel=1e-9)


@pytest.mark.parametrize(("seed", "n", "b"), BATTERY)
def test_bounds_stay_above_the_cached_optimum(seed: int, n: int, b: int) -> None:
    """With the cache, every plan's latency is at least the latency floor, its met count at
    most the claim-capacity limit, its batch starts at least ``LB'_q``; the time-indexed bound
    is at least G*."""
    instance = cached_battery(seed, n, b)
    problem = OrderingProblem.from_instance(instance)
    model = SAOrderingModel(instance)
    optimum = solve(model, "brute", time_limit=30).objective
    floor_l = problem.latency_lower_bound_s()
    limit = met_limit(problem, claim_capacity_cuts(problem))
    lower, _ = start_bounds(problem, None)
    for plan in every_plan(tuple(range(n)), b):
        value = problem.evaluate(plan)
        assert value.total_latency_s >= floor_l - 1e-9
        assert value.met_requests <= limit
        start, position = 0.0, 0
        for batch in plan:
            assert start >= lower[position] - 1e-9
            position += len(batch)
            start += max(float(problem.exec_s[r, len(batch)]) for r in batch)
    plan, value = model.starting_plan()
    floor = latency_floor(problem, plan, time.perf_counter() + 10)
    got = time_indexed_bound(problem, plan, value.g, floor, 10, step_s=0.02)
    assert optimum <= got.bound * (1 + 1e-9)


@pytest.mark.parametrize("solver", ["brute", "highs", "cpsat"])
def test_an_all_zero_column_gives_the_same_decisions(solver: str) -> None:
    """A zero ``cached_tokens`` column: bit-identical member timings, the same plan and G."""
    for seed, n, b in BATTERY[:2]:
        plain = random_ordering_instance(seed, n, b)
        zero = dataclasses.replace(
            plain, workload=plain.workload.with_columns(cached_tokens=np.zeros(n, dtype=int))
        )
        a, z = OrderingProblem.from_instance(plain), OrderingProblem.from_instance(zero)
        np.testing.assert_array_equal(a.exec_s, z.exec_s)
        np.testing.assert_array_equal(a.first_token_s, z.first_token_s)
        ra = solve(SAOrderingModel(plain), solver, time_limit=30)
        rz = solve(SAOrderingModel(zero), solver, time_limit=30)
        assert batches_of(ra.schedule) == batches_of(rz.schedule)
        assert ra.objective == rz.objective
        assert math.isfinite(rz.objective)


def test_the_checker_refuses_a_static_replay_without_the_cache() -> None:
    """A plan replayed without the cache, checked against the instance with it (and the other
    way round), shows member times the static timelines do not give."""
    plain = cache_flips_the_order()
    cached = dataclasses.replace(
        plain, workload=plain.workload.with_columns(cached_tokens=[900, 0])
    )
    plan = sim.Schedule.static_batches([(1,), (0,)])
    assert sim.check(plain, sim.replay(plain, plan)) == []
    assert sim.check(cached, sim.replay(cached, plan)) == []
    assert sim.check(cached, sim.replay(plain, plan)) != []
    assert sim.check(plain, sim.replay(cached, plan)) != []

"""A snapshot's given prefix cache (the workload's ``cached_tokens``): the engine skips exactly
the cached tokens at every start of a request's prefill, holds them outside the capacity, the
checker verifies it independently, the idle oracle and the builder agree."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_cases import random_instance
from slolab.heuristics.baselines import PrefillFirstFCFS, SarathiFCFS
from slolab.heuristics.policies import make_scheduler
from slolab.instances.prefix_state import (
    cached_before,
    cached_prefix,
    given_cache,
    pinned_tokens,
    replay_cache,
)
from slolab.instances.records import Cluster, Instance, Workload, cached_prompt_tokens
from slolab.sim import check, run
from slolab.sim.idle import cached_prefix_bound, idle_schedule
from slolab.timing.base import LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token + 1 us per unit of attention work
# + 1 us per KV token a decode step reads
TIMING = LinearTiming(
    0.010,
    {
        "prefill_tokens": 0.001,
        "decode_tokens": 0.002,
        "prefill_attention_work": 1e-6,
        "decode_kv_tokens": 1e-6,
    },
)


def lone(prompt, output, cached, **cluster):
    cols = {"arrival_s": [0.0], "prompt_tokens": [prompt], "output_tokens": [output]}
    if cached is not None:
        cols["cached_tokens"] = [cached]
    return Instance("lone", Workload(cols), Cluster(servers=1, **cluster), TIMING)


def test_a_lone_request_computes_only_its_uncached_prompt():
    """100-token prompt, 60 cached: one chunk of 40 with attention over the 60 cached,
    0.010 + 0.040 + 1e-6 * 40 * (60 + 41 / 2) = 0.05322; its decode step reads all 101 tokens:
    0.010 + 0.002 + 1e-6 * 101 = 0.012101."""
    inst = lone(100, 2, 60)
    out = run(inst, PrefillFirstFCFS(), seed=0)
    np.testing.assert_allclose(out.tokens_of(0), [0.05322, 0.05322 + 0.012101], rtol=1e-12)
    assert check(inst, out) == []
    # the idle oracle is the engine alone
    np.testing.assert_allclose(idle_schedule(inst).token_times, out.token_times, rtol=1e-12)
    assert cached_prefix_bound(inst).tolist() == [60]


def test_given_cached_tokens_sit_outside_the_capacity():
    """Capacity 45: a 100-token prompt with 60 cached needs 40 + 1 computed tokens and one
    generated: it fits (the idle oracle agrees); with 50 cached it would need 52, which the
    oracle says does not fit."""
    inst = lone(100, 2, 60, kv_capacity_tokens=45)
    out = run(inst, PrefillFirstFCFS(), seed=0)
    assert out.finished.all()
    assert int(out.it_kv_tokens.max()) == 42
    assert check(inst, out) == []
    assert idle_schedule(inst).fits.tolist() == [True]
    assert idle_schedule(lone(100, 2, 50, kv_capacity_tokens=45)).fits.tolist() == [False]


def test_an_all_zero_column_changes_nothing():
    inst = random_instance(3, kv=3000)
    wl = inst.workload
    with_zero = dataclasses.replace(
        inst, workload=wl.with_columns(cached_tokens=np.zeros(len(wl), dtype=np.int64))
    )
    a = run(inst, SarathiFCFS(256), seed=0)
    b = run(with_zero, SarathiFCFS(256), seed=0)
    np.testing.assert_array_equal(a.token_times, b.token_times)
    np.testing.assert_array_equal(a.it_kv_tokens, b.it_kv_tokens)


def with_cache(inst, seed):
    rng = np.random.default_rng(seed)
    wl = inst.workload
    cached = (rng.uniform(0, 1, len(wl)) * (wl.prompt_tokens - 1)).astype(np.int64)
    return dataclasses.replace(inst, workload=wl.with_columns(cached_tokens=cached))


POLICIES = ["sarathi", "vllm", "edf", "slos-serve", "hyperflexis", "polyserve", "scorpio"]


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000))
def test_policies_under_memory_pressure_pass_the_checker(policy, seed):
    """Random cached prefixes on tight memory (preemptions happen): every run passes the
    checker, which recomputes each start of a prefill from the cached tokens alone, and each
    request's first start prefills ``prompt - cached`` tokens (recomputes aside)."""
    inst = with_cache(random_instance(seed, n=30, kv=1200, horizon_s=0.5), seed)
    sch = make_scheduler(policy, inst)
    inst = sch.on(inst)
    out = run(inst, sch.policy, sch.router, seed=seed, decode_router=sch.decode_router)
    assert check(inst, out) == []
    done = np.flatnonzero(out.finished & (out.preemptions == 0))
    prefilled = np.zeros(inst.n_requests, dtype=np.int64)
    phase_prefill = out.entry_phase == 0
    np.add.at(prefilled, out.entry_request[phase_prefill], out.entry_tokens[phase_prefill])
    wl = inst.workload
    expect = wl.prompt_tokens - cached_prompt_tokens(wl)
    np.testing.assert_array_equal(prefilled[done], expect[done])


def test_the_checker_refuses_a_skip_the_cache_does_not_give():
    """An outcome run with the cache, checked against the instance without it (and the other
    way round), shows its chunks do not add up."""
    inst = with_cache(random_instance(1, n=20, kv=6000), 1)
    plain = dataclasses.replace(inst, workload=inst.workload.take(np.arange(20)))
    plain = dataclasses.replace(
        plain,
        workload=Workload(
            {c: inst.workload[c] for c in inst.workload.columns if c != "cached_tokens"}
        ),
    )
    out = run(inst, SarathiFCFS(256), seed=0)
    assert check(inst, out) == []
    assert check(plain, out) != []
    assert check(inst, run(plain, SarathiFCFS(256), seed=0)) != []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1.5, 0], "cached_tokens must be an integer, got 1.5 (row 0)"),
        ([0, -1], "cached_tokens must be an integer >= 0, got -1 (row 1)"),
        ([0, 10], "cached_tokens must be at most prompt_tokens - 1"),
    ],
)
def test_a_bad_cached_column_is_one_line(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Workload(
            {
                "arrival_s": [0.0, 1.0],
                "prompt_tokens": [10, 10],
                "output_tokens": [1, 1],
                "cached_tokens": value,
            },
            source="snap.jsonl",
        )


def test_a_given_cache_needs_colocated_servers_without_their_own_cache():
    wl = Workload(
        {"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [1], "cached_tokens": [5]}
    )
    with pytest.raises(ValueError, match="exclude each other"):
        Instance("x", wl, Cluster(prefix_block_tokens=16), TIMING)
    with pytest.raises(ValueError, match="colocated mode only"):
        Instance("x", wl, Cluster(mode="disaggregated", servers=2, prefill_servers=1), TIMING)


def ids_workload(prompts, ids, arrivals=None):
    n = len(prompts)
    return Workload(
        {
            "arrival_s": np.arange(n, dtype=float) if arrivals is None else arrivals,
            "prompt_tokens": prompts,
            "output_tokens": [1] * n,
            "hash_ids": np.array([list(x) for x in ids] + [None], dtype=object)[:-1],
        }
    )


def test_the_builder_replays_the_cache_before_the_snapshot():
    """Requests 0-2 fill the cache (512-token blocks); the snapshot is requests 3 and 4:
    3 shares blocks 1, 2 of request 0 (1,024 tokens; its third block is its own), 4 repeats
    request 2's whole 1,024-token prompt, whose last block lies past its first 1,023 tokens,
    so it finds 512. Request 3's blocks are not cached for request 4 (the snapshot's own)."""
    wl = ids_workload(
        [1536, 600, 1024, 1600, 1024],
        [[1, 2, 3], [9, 10], [5, 6], [1, 2, 7, 8], [5, 6]],
    )
    snap = given_cache(wl, [3, 4])
    assert snap["cached_tokens"].tolist() == [1024, 512]
    assert pinned_tokens(snap) == 3 * 512
    # 16-token blocks: request 4 finds 1,008 (63 blocks inside 1,023 tokens)
    assert given_cache(wl, [3, 4], block_tokens=16)["cached_tokens"].tolist() == [1024, 1008]
    # a cache of 2 blocks keeps the last two touched (request 2's): request 3 finds nothing
    assert given_cache(wl, [3, 4], capacity_tokens=1024)["cached_tokens"].tolist() == [0, 512]
    # with no history, nothing is cached
    assert given_cache(wl, [0, 1])["cached_tokens"].tolist() == [0, 0]
    # cached_before keeps the rows' order (given_cache's snapshot is in arrival order)
    assert cached_before(wl, [4, 3]).tolist() == [512, 1024]


def test_the_builder_touches_blocks_least_recent_first():
    wl = ids_workload([1024, 1024, 1024, 1024], [[1, 2], [3, 4], [1, 2], [3, 4]])
    resident = replay_cache(wl.take(np.arange(3)), capacity_tokens=3 * 512)
    # 3 slots: request 1 evicts block 1; request 2 brings 1 back (evicting 2), touches 2
    # again (evicting 3): 4, 1, 2 from the least recent
    assert list(resident) == [4, 1, 2]
    assert cached_prefix(wl.take([3]), resident).tolist() == [0]


def test_the_builder_needs_block_ids():
    wl = Workload({"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [1, 1]})
    with pytest.raises(ValueError, match="needs the workload's hash_ids"):
        given_cache(wl, [1])

"""The idle-cluster oracle: fastest chunking against brute force and the engine."""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import check, metrics, run
from slolab.sim.idle import chunking_s, fastest_chunks, idle_met, idle_schedule
from slolab.sim.policy import Batch
from slolab.timing import LinearTiming, RooflineTiming, preset

H100 = preset("llama2-7b-h100")
# a roofline whose lines weigh prefill attention differently: the shortest-path branch
SKEWED = RooflineTiming(
    [
        LinearTiming(0.004, {"prefill_tokens": 1e-4, "prefill_attention_work": 1e-6}),
        LinearTiming(0.001, {"prefill_tokens": 4e-4, "prefill_attention_work": 2e-5}),
    ],
    name="skewed",
)


def brute_force_s(timing, prompt, cap):
    """Fastest prefill over every composition of ``prompt`` into parts of at most ``cap``."""
    best = np.inf
    for cuts in itertools.product((False, True), repeat=prompt - 1):
        chunks, size = [], 1
        for cut in cuts:
            if cut:
                chunks.append(size)
                size = 1
            else:
                size += 1
        chunks.append(size)
        if max(chunks) <= cap:
            best = min(best, chunking_s(timing, np.array(chunks)))
    return best


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    timing=st.sampled_from([H100, SKEWED]),
    prompt=st.integers(1, 12),
    cap=st.integers(1, 14),
)
def test_fastest_chunking_matches_brute_force(timing, prompt, cap):
    """The oracle's chunking is as fast as the best of all 2^(P-1) chunkings."""
    plan = fastest_chunks(timing, prompt, cap)
    assert plan.sum() == prompt and plan.max() <= cap
    assert chunking_s(timing, plan) == pytest.approx(brute_force_s(timing, prompt, cap), abs=1e-12)


def test_maximal_chunks_are_not_always_fastest():
    """P = 2049, B = 2048 on the H100 roofline: 1025 + 1024 beats 2048 + 1 by 1.43 ms."""
    plan = fastest_chunks(H100, 2049, 2048)
    assert plan.tolist() == [1025, 1024]
    greedy = chunking_s(H100, np.array([2048, 1]))
    # the chunk of 1 token sits on the floor line (5.797 ms), 1024 tokens on the slope line:
    # 0.004346 + 1.9069e-5 * 2048 + 0.005797 - (2 * 0.004346 + 1.9069e-5 * 2049) = 1.43 ms
    assert greedy - chunking_s(H100, plan) == pytest.approx(1.432e-3, abs=2e-6)


def test_no_cap_prefills_in_one_chunk():
    """max_batch_tokens 0 is no cap: one chunk of the whole prompt (fewest intercepts)."""
    assert fastest_chunks(H100, 5000, 0).tolist() == [5000]


class ChunkPlan:
    """Prefills each request in the given chunks, then decodes it (one request at a time)."""

    name = "chunk-plan"

    def __init__(self, plans):
        self.plans = plans

    def start(self, instance, seed):
        self.done = {}

    def next_batch(self, server):
        for r in [*server.prefilling, *server.waiting]:
            k = self.done.get(r, 0)
            self.done[r] = k + 1
            return Batch(prefill=[(r, int(self.plans[r][k]))])
        if len(server.decoding):
            return Batch(decode=list(server.decoding))
        return Batch()


def _sparse_instance(prompt, output, ttft, tpot, max_batch_tokens=2048, kv=200_000):
    n = len(prompt)
    wl = Workload(
        {
            "arrival_s": 100.0 * np.arange(n),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ttft_slo_s": ttft,
            "tpot_slo_s": tpot,
        }
    )
    cluster = Cluster(servers=1, kv_capacity_tokens=kv, max_batch_tokens=max_batch_tokens)
    return Instance("sparse", wl, cluster, H100)


def test_engine_run_of_the_oracle_chunking_gives_the_oracle_token_times():
    """The engine, fed the oracle's chunkings, emits every token at the oracle's time."""
    inst = _sparse_instance([2049, 6758, 130, 30_000], [5, 40, 3, 2], [0.3] * 4, [0.05] * 4)
    idle = idle_schedule(inst)
    plans = [fastest_chunks(H100, int(p), 2048) for p in inst.workload.prompt_tokens]
    out = run(inst, ChunkPlan(plans), seed=0)
    assert check(inst, out) == []
    np.testing.assert_array_equal(out.token_times, idle.token_times)
    np.testing.assert_array_equal(metrics.met(inst, out), idle.met(inst))


def test_maximal_chunking_engine_run_is_never_faster_than_the_oracle():
    """Sarathi chunking maximally (budget 2048) is 1.43 ms slower on P = 2049, equal otherwise."""
    from slolab.heuristics.baselines import SarathiFCFS

    inst = _sparse_instance([2049, 6758, 4096], [2, 2, 2], [0.3] * 3, [0.05] * 3)
    out = run(inst, SarathiFCFS(token_budget=2048), seed=0)
    assert check(inst, out) == []
    idle = idle_schedule(inst)
    lag = out.first_token_s - idle.first_token_s
    # 6758 = 3 * 2048 + 614 and 4096 = 2 * 2048: every chunk on the slope line either way
    assert lag[0] == pytest.approx(1.432e-3, abs=2e-6)
    assert np.abs(lag[1:]).max() < 1e-12


def test_met_is_the_metrics_met_at_the_ttft_boundary():
    """A TTFT SLO 1 us above the oracle's first token is met, 1 us below it is missed."""
    probe = _sparse_instance([6758], [2], [1.0], [0.05])
    ttft = float(idle_schedule(probe).first_token_s[0])
    inst = _sparse_instance([6758, 6758], [2, 2], [ttft + 1e-6, ttft - 1e-6], [0.05, 0.05])
    assert idle_met(inst).tolist() == [True, False]


def test_a_request_beyond_the_kv_capacity_is_never_met():
    """prompt + output = 1001 > 1000 KV tokens: the engine rejects it, the oracle misses it."""
    inst = _sparse_instance([900, 500], [101, 100], [1.0, 1.0], [0.05, 0.05], kv=1000)
    idle = idle_schedule(inst)
    assert idle.fits.tolist() == [False, True]
    assert idle_met(inst).tolist() == [False, True]
    out = run(inst, ChunkPlan([[900], [500]]), seed=0)
    assert out.rejected.tolist() == [True, False]


def test_a_token_budget_cap_slows_the_prefill():
    """P = 6758 at cap 820 takes 9 chunks instead of 4: 5 more slope intercepts, 21.7 ms."""
    inst = _sparse_instance([6758], [2], [1.0], [0.05])
    full = idle_schedule(inst)
    capped = idle_schedule(inst, max_chunk_tokens=820)
    assert (full.chunks[0], capped.chunks[0]) == (4, 9)
    # ceil(6758 / 820) = 9; the per-token and attention terms are the same: 5 * 4.346 ms
    lag = capped.first_token_s[0] - full.first_token_s[0]
    assert lag == pytest.approx(5 * 0.0043462501065614735, abs=1e-9)


def test_other_modes_are_refused():
    """The oracle models the colocated mode only and says so."""
    inst = _sparse_instance([100], [2], [1.0], [0.05])
    disagg = dataclasses.replace(
        inst,
        cluster=dataclasses.replace(
            inst.cluster, servers=2, mode="disaggregated", prefill_servers=1
        ),
    )
    with pytest.raises(ValueError, match="colocated mode only"):
        idle_schedule(disagg)


def test_an_idle_server_meets_1944_of_the_first_2000_mooncake_requests():
    """docs/engine.md's figures: caching off, 1,944 of 2,000 at the 2,048-token cap, 1,880 at
    820; with the default prefix cache, 1,988 and 1,956."""
    from slolab.problems.serving import serving_instance

    def cut(cache: str):
        return serving_instance(
            "mooncake_conversation",
            seed=0,
            servers=8,
            limit=2000,
            rate=0.01,
            slos="polyserve",
            prefix_cache=cache,
        )

    off = cut("off")
    # 56 are missed for their TTFT even alone; the Sarathi budget loses 64 more
    assert int(idle_met(off).sum()) == 1944
    assert int(idle_met(off, max_chunk_tokens=820).sum()) == 1880
    # the default caches 512-token blocks: a cached prefix skips its prefill, so 44 of the 56
    # meet their TTFT alone after all (12 still miss), and 32 more at the budget (44 miss)
    default = cut("auto")
    assert default.cluster.prefix_block_tokens == 512
    assert int(idle_met(default).sum()) == 1988
    assert int(idle_met(default, max_chunk_tokens=820).sum()) == 1956

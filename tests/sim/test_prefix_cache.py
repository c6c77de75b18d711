"""Prefix caching in the engine: hits, attention over the cached prefix, sharing, LRU eviction,
the checker's replay, the cache-aware router and the synthetic shared-prefix workload."""

import dataclasses
import json

import numpy as np
import pytest
from sim_cases import random_instance
from slolab.heuristics.baselines import PrefillFirstFCFS, RoundRobin, SarathiFCFS
from slolab.heuristics.cache_routing import CacheAwareRouter
from slolab.instances.readers import TraceError, read_mooncake
from slolab.instances.records import Cluster, Instance, Workload
from slolab.instances.shared_prefix import shared_prefix_workload
from slolab.sim import check, metrics, run
from slolab.sim.prefix_cache import cache_log
from slolab.timing.base import LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token + 1 us per unit of attention work
TIMING = LinearTiming(
    0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002, "prefill_attention_work": 1e-6}
)


def instance(prompts, outputs, arrivals, ids, **cluster):
    wl = Workload(
        {
            "arrival_s": arrivals,
            "prompt_tokens": prompts,
            "output_tokens": outputs,
            "hash_ids": np.array([list(x) for x in ids] + [None], dtype=object)[:-1],
        }
    )
    fields = {"servers": 1, "prefix_block_tokens": 16, **cluster}
    return Instance("cache", wl, Cluster(**fields), TIMING)


def test_hit_skips_cached_blocks_and_charges_their_attention():
    """A repeated 40-token prompt skips its 2 cached 16-token blocks and pays their attention."""
    inst = instance([40, 40], [2, 1], [0.0, 1.0], [[7], [7]])
    out = run(inst, PrefillFirstFCFS(), seed=0)
    # B at t=1: blocks inside its first 39 tokens: 39 // 16 = 2, both resident -> skips 32,
    # prefills 8: 0.010 + 0.008 + 1e-6 * 8 * (32 + 9 / 2) = 0.018292 -> first token at 1.018292
    np.testing.assert_allclose(out.tokens_of(1), [1.018292], rtol=1e-12)
    assert cache_log(out).hit_tokens.tolist() == [0, 32]
    summary = metrics.summary(inst, out)["prefix_cache"]
    # 32 of 80 prompt tokens skipped; hits 0 + 2 blocks, misses 2 + 0
    assert (summary["hit_rate"], summary["hits"], summary["misses"]) == (0.4, 2, 2)
    assert summary["prefill_tokens_saved"] == 32
    assert check(inst, out) == []


def test_unreferenced_blocks_are_evicted_least_recently_released_first():
    """Within 60 KV tokens, a new prompt evicts the tail block of the previous one first."""
    inst = instance(
        [40, 40, 40], [1, 1, 1], [0.0, 1.0, 2.0], [[7], [9], [7]], kv_capacity_tokens=60
    )
    out = run(inst, PrefillFirstFCFS(), seed=0)
    log = cache_log(out)
    # A leaves blocks 7*32 = 224 and 225 (released tail first: 225 is the older);
    # C at t=1 holds 41 and 41 + 32 cached > 60: evicts 225; C leaves 288, 289 (289 older);
    # B at t=2 finds 224 only: skips 16, holds 16 + 24 + 1 = 41, 41 + 32 > 60: evicts 289
    assert log.evict_block.tolist() == [225, 289]
    assert log.evict_s.tolist() == [1.0, 2.0]
    assert log.hit_tokens.tolist() == [0, 0, 16]
    assert out.entry_tokens[out.entry_request == 2].tolist() == [24]
    assert check(inst, out) == []


def test_blocks_shared_by_running_requests_count_once():
    """Two running requests with the same 32-token prompt hold its 2 blocks once."""
    inst = instance([32, 32], [3, 3], [0.0, 0.0], [[5], [5]])
    out = run(inst, PrefillFirstFCFS(), seed=0)
    # iteration 1: each prefills 32 (+1 first token): 33 + 33 = 66 (nothing cached yet);
    # iteration 2: each decodes one more: 34 + 34 less the 2 shared blocks (32) = 36
    assert out.it_kv_tokens[:2].tolist() == [66, 36]
    assert check(inst, out) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_caching_without_repeats_changes_nothing(seed):
    """With no block repeated, caching on emits every token at the same time as caching off."""
    base = random_instance(seed)
    ids = np.array([[1000 + r] for r in range(base.n_requests)] + [None], dtype=object)[:-1]
    wl = base.workload.with_columns(hash_ids=ids)
    off = dataclasses.replace(base, workload=wl)
    on = dataclasses.replace(off, cluster=dataclasses.replace(off.cluster, prefix_block_tokens=16))
    for policy in (PrefillFirstFCFS, SarathiFCFS):
        a = run(off, policy(), seed=0)
        b = run(on, policy(), seed=0)
        # no block repeats and no preemption (a recompute would find its own blocks)
        assert a.preemptions.sum() == 0
        np.testing.assert_array_equal(a.token_times, b.token_times)
        np.testing.assert_array_equal(a.it_kv_tokens, b.it_kv_tokens)
        assert cache_log(b).hit_tokens.sum() == 0
        assert check(on, b) == []


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_repeated_prefixes_pass_the_checker(seed, mode):
    """Seeded runs with prefixes drawn from 5, preemptions and both modes: checker clean."""
    base = random_instance(seed, kv=1500, n=60)
    rng = np.random.default_rng(seed)
    ids = np.array([[int(x)] for x in rng.integers(0, 5, base.n_requests)] + [None], dtype=object)
    wl = base.workload.with_columns(hash_ids=ids[:-1])
    cluster = dataclasses.replace(
        base.cluster,
        prefix_block_tokens=16,
        servers=3 if mode == "disaggregated" else 2,
        mode=mode,
        prefill_servers=1 if mode == "disaggregated" else 0,
    )
    inst = dataclasses.replace(base, workload=wl, cluster=cluster)
    for policy in (PrefillFirstFCFS(), SarathiFCFS(token_budget=128)):
        out = run(inst, policy, seed=seed)
        assert check(inst, out) == []
        assert cache_log(out).hit_tokens.sum() > 0


def test_checker_refuses_a_hit_beyond_the_cached_prefix_and_a_hidden_eviction():
    """A hit forged 16 tokens longer, and evictions left out of the log, are each reported."""
    inst = instance([40, 40], [2, 1], [0.0, 1.0], [[7], [7]])
    out = run(inst, PrefillFirstFCFS(), seed=0)
    forged = dataclasses.replace(
        cache_log(out), hit_tokens=cache_log(out).hit_tokens + np.array([16, 0])
    )
    # request 0 skips 16 tokens of an empty cache
    assert any(
        "skips 16" in v
        for v in check(inst, dataclasses.replace(out, info={**out.info, "prefix_cache": forged}))
    )
    inst = instance(
        [40, 40, 40], [1, 1, 1], [0.0, 1.0, 2.0], [[7], [9], [7]], kv_capacity_tokens=60
    )
    out = run(inst, PrefillFirstFCFS(), seed=0)
    log = cache_log(out)
    hidden = dataclasses.replace(
        log,
        evict_server=log.evict_server[:0],
        evict_s=log.evict_s[:0],
        evict_block=log.evict_block[:0],
    )
    # C at t=1: 41 resident and 32 cached exceed 60
    violations = check(inst, dataclasses.replace(out, info={**out.info, "prefix_cache": hidden}))
    assert any("41 KV tokens resident and 32 cached exceed capacity 60" in v for v in violations)


def test_cache_aware_router_follows_the_cached_prefix():
    """The repeat goes where its prefix is cached; round robin sends it to the other server."""
    inst = instance([40, 40], [2, 1], [0.0, 1.0], [[7], [7]], servers=2)
    aware = run(inst, PrefillFirstFCFS(), CacheAwareRouter(), seed=0)
    plain = run(inst, PrefillFirstFCFS(), RoundRobin(), seed=0)
    # 32 of 40 tokens cached on server 0: 0.8 > cache_threshold 0.3
    assert aware.server.tolist() == [0, 0]
    assert cache_log(aware).hit_tokens.tolist() == [0, 32]
    assert plain.server.tolist() == [0, 1]
    assert cache_log(plain).hit_tokens.tolist() == [0, 0]
    assert check(inst, aware) == [] and check(inst, plain) == []


def test_shared_prefix_workload_turns_extend_the_previous_prompt():
    """Every request a turn: prompts grow by the previous answer and the new text."""
    wl = Workload(
        {"arrival_s": [0.0, 1.0, 2.0], "prompt_tokens": [100, 50, 30], "output_tokens": [10, 20, 5]}
    )
    out = shared_prefix_workload(
        wl,
        seed=0,
        system_prompt_tokens=512,
        system_fraction=1.0,
        conversation_fraction=1.0,
        turns=3,
    )
    # 512 + 100 = 612; 612 + 10 + 50 = 672; 672 + 20 + 30 = 722; each keeps the whole blocks
    # of the previous prompt (612 // 512 = 1: the system block 0) and gets one new id
    assert out.prompt_tokens.tolist() == [612, 672, 722]
    assert [list(x) for x in out["hash_ids"]] == [[0, 1], [0, 2], [0, 3]]


def test_mooncake_block_count_mismatch_is_one_line(tmp_path):
    """hash_ids with 1 id for a 1,000-token prompt (2 blocks) names file, line, field, value."""
    path = tmp_path / "bad.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 1000, "output_length": 5, "hash_ids": [3]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError) as err:
        read_mooncake(path, keep_hash_ids=True)
    message = str(err.value)
    assert "\n" not in message
    assert "bad.jsonl" in message and "line 2" in message and "hash_ids" in message
    assert "[3]" in message


class _Watched(SarathiFCFS):
    """SarathiFCFS recording, at every decision, what :meth:`Server.kv_freed_by_preempting`
    says of sets of running requests against the memory releasing them in a copy of the
    server's cache frees (the cache's own release, the engine's counts)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = np.random.default_rng(seed)
        self.pairs: list[tuple[int, int]] = []

    def next_batch(self, server):
        running = [*server.decoding, *server.prefilling]
        cache = server._s.cache
        if len(running) >= 2 and cache is not None:
            e = server._e
            for _ in range(2):
                k = int(self.rng.integers(1, len(running) + 1))
                victims = [int(r) for r in self.rng.choice(running, size=k, replace=False)]
                ref = dict(cache.ref)
                shared = cache.shared
                for r in victims:
                    for key in e.prefix.pinned_keys(r):
                        users = ref[key] - 1
                        ref[key] = users
                        if users:
                            shared -= cache.block_tokens
                used_after = server._s.kv - sum(int(e.held[r]) for r in victims) - shared
                self.pairs.append(
                    (server.kv_freed_by_preempting(victims), server.kv_used_tokens - used_after)
                )
        return super().next_batch(server)


def test_preempting_frees_only_blocks_no_other_running_request_uses():
    """A 512-token prefix every request shares: on every decision, the tokens preempting a
    random set of running requests frees (the server's answer) are the used KV a release of
    their blocks leaves (counted on a copy of the cache). Before, the policies counted every
    held token of a victim as freed, its shared prefix too (a real run that failed on it:
    tests/benchmarks/test_prefix_validation.py)."""
    rng = np.random.default_rng(3)
    n = 60
    own = Workload(
        {
            "arrival_s": np.sort(rng.uniform(0.0, 2.0, n)),
            "prompt_tokens": rng.integers(300, 1500, n),
            "output_tokens": rng.integers(20, 200, n),
        }
    )
    wl = shared_prefix_workload(
        own, seed=0, system_prompt_tokens=512, system_fraction=1.0, conversation_fraction=0.0
    )
    inst = Instance(
        "preempt-shared",
        wl,
        Cluster(servers=1, kv_capacity_tokens=12_000, max_batch_tokens=512, prefix_block_tokens=16),
        TIMING,
    )
    policy = _Watched(seed=0)
    out = run(inst, policy, seed=0)
    assert check(inst, out) == []
    assert int(out.preemptions.sum()) > 0
    predicted, actual = (np.array(x) for x in zip(*policy.pairs, strict=True))
    assert len(predicted) > 100
    np.testing.assert_array_equal(predicted, actual)


def test_idle_oracle_with_a_cache_is_the_engine_alone_with_its_hit():
    """Two 40-token prompts of one block id, 16-token cache blocks: the oracle takes 32 tokens
    of each as cached (the other holds them), so request 1's first token is the engine's
    (alone, hit of 32, 8 tokens prefilled: 1.018292 s) and request 0's is earlier than the
    engine's (it computed all 40 there)."""
    from slolab.sim.idle import cached_prefix_bound, idle_schedule

    inst = instance([40, 40], [2, 1], [0.0, 1.0], [[7], [7]])
    assert cached_prefix_bound(inst).tolist() == [32, 32]
    out = run(inst, PrefillFirstFCFS(), seed=0)
    oracle = idle_schedule(inst)
    np.testing.assert_allclose(oracle.first_token_s[1], out.tokens_of(1)[0], rtol=1e-12)
    np.testing.assert_allclose(oracle.first_token_s[0], 0.018292, rtol=1e-12)
    assert oracle.first_token_s[0] < out.tokens_of(0)[0]
    # without a cache the oracle is what it was: every prompt computed in full
    off = dataclasses.replace(
        inst, cluster=dataclasses.replace(inst.cluster, prefix_block_tokens=0)
    )
    assert cached_prefix_bound(off).tolist() == [0, 0]
    # 0.010 + 0.040 + 1e-6 * 40 * (0 + 41 / 2) = 0.05082 after each arrival
    np.testing.assert_allclose(idle_schedule(off).first_token_s, [0.05082, 1.05082], rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_idle_oracle_with_a_cache_bounds_every_request_of_a_run(seed):
    """Shared system prompts and multi-turn conversations with caching on, arrivals sparse
    enough that many requests run alone: no request's first or last token in a Sarathi run
    comes before the oracle's (which takes every block another prompt shares as cached at the
    arrival), though many come before the cache-blind oracle's."""
    from slolab.sim.idle import cached_prefix_bound, idle_schedule

    rng = np.random.default_rng(seed)
    n = 40
    own = Workload(
        {
            "arrival_s": np.sort(rng.uniform(0.0, 60.0, n)),
            "prompt_tokens": rng.integers(100, 900, n),
            "output_tokens": rng.integers(2, 40, n),
        }
    )
    wl = shared_prefix_workload(own, seed=seed, system_prompt_tokens=512)
    inst = Instance(
        "oracle-cache",
        wl,
        Cluster(servers=2, kv_capacity_tokens=20_000, max_batch_tokens=512, prefix_block_tokens=16),
        TIMING,
    )
    out = run(inst, SarathiFCFS(), seed=0)
    assert check(inst, out) == []
    oracle = idle_schedule(inst)
    assert (cached_prefix_bound(inst) > 0).sum() >= n // 4
    served = out.finished
    assert served.all()
    assert (out.first_token_s >= oracle.first_token_s - 1e-9).all()
    assert (out.last_token_s >= oracle.last_token_s - 1e-9).all()
    off = dataclasses.replace(
        inst, cluster=dataclasses.replace(inst.cluster, prefix_block_tokens=0)
    )
    blind = idle_schedule(off)
    assert (oracle.first_token_s <= blind.first_token_s + 1e-12).all()
    # sparse arrivals: a dozen or more requests hit the cache and beat the cache-blind oracle,
    # which is why it could not stay the bound with caching on
    assert (out.first_token_s < blind.first_token_s - 1e-9).sum() >= 10


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        # the second row's only request is never the one admitted first: every row is checked
        # before the run starts
        ([[7], [9, "x"]], r"hash_ids must be a list of integers, got \[9, 'x'\] \(row 1\)"),
        ([[7], [True]], r"hash_ids must be a list of integers, got \[True\] \(row 1\)"),
        ([[7], [9, 10]], r"one id per 512-token block .* got 2 \(row 1\)"),
    ],
)
def test_bad_block_ids_are_refused_before_the_run(ids, message):
    """A workload's hash_ids are checked row by row when the run starts: a non-integer id or a
    wrong count names the row, whichever request reaches the cache."""
    inst = instance([40, 40], [1, 1], [0.0, 1.0], ids)
    with pytest.raises(ValueError, match=message):
        run(inst, PrefillFirstFCFS(), seed=0)


def test_numpy_integer_block_ids_run_as_plain_ones():
    """Ids held as numpy integers (not the trace's plain ints) take the row-by-row check and
    key the same blocks: the same hits as plain ints."""
    plain = instance([40, 40], [2, 1], [0.0, 1.0], [[7], [7]])
    wl = plain.workload
    as_numpy = np.array(
        [np.array(x, dtype=np.int64) for x in wl["hash_ids"]] + [None], dtype=object
    )
    numpy_ids = dataclasses.replace(plain, workload=wl.with_columns(hash_ids=as_numpy[:-1]))
    a = run(plain, PrefillFirstFCFS(), seed=0)
    b = run(numpy_ids, PrefillFirstFCFS(), seed=0)
    assert cache_log(a).hit_tokens.tolist() == cache_log(b).hit_tokens.tolist() == [0, 32]
    assert check(numpy_ids, b) == []

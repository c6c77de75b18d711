"""Hand-computed engine runs: every token time worked out in a comment and asserted."""

import dataclasses

import numpy as np
import pytest
from sim_cases import random_instance
from slolab.heuristics.baselines import LeastLoaded, PrefillFirstFCFS, SarathiFCFS, StaticFCFS
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import Batch, PolicyError, Schedule, check, replay, run
from slolab.sim.engine import iterations
from slolab.timing.base import FEATURES, LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


def two_requests(**cluster):
    wl = Workload(
        {
            "arrival_s": [0.0, 0.015],
            "prompt_tokens": [10, 20],
            "output_tokens": [3, 2],
        }
    )
    return Instance("two", wl, Cluster(**cluster), ROUND)


def test_colocated_chunked_prefill_token_times():
    """Sarathi with a 16-token budget: chunks, decode-first and every token time."""
    inst = two_requests(servers=1, max_batch_tokens=16)
    out = run(inst, SarathiFCFS(), seed=0)
    # t=0:     A prefills 10 tokens            -> 0.010 + 0.010 = 0.020; A token 1 at 0.020
    # t=0.020: A decodes, B chunk of 15        -> 0.010 + 0.015 + 0.002 = 0.027; ends 0.047
    # t=0.047: A decodes, B last chunk of 5    -> 0.010 + 0.005 + 0.002 = 0.017; ends 0.064
    #          (A's token 3 and B's first token at 0.064)
    # t=0.064: B decodes                       -> 0.010 + 0.002 = 0.012; ends 0.076
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.047, 0.064], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.064, 0.076], rtol=1e-12)
    assert check(inst, out) == []
    # contexts read by decode attention: A at t=0.020 holds 10 prompt + 1 generated = 11
    kv = FEATURES.index("decode_kv_tokens")
    assert out.it_features[1, kv] == 11
    # prefill attention work of B's 15-token chunk at prefix 0: 15 * (0 + 16/2) = 120
    assert out.it_features[1, FEATURES.index("prefill_attention_work")] == 120
    # KV resident during iteration 2: A 10 + 2 = 12, B 15 -> 27
    assert out.it_kv_tokens[1] == 27


def test_prefill_first_fcfs_token_times():
    """vLLM-style prefill-first: B's prefill pauses A's decoding."""
    inst = two_requests(servers=1)
    out = run(inst, PrefillFirstFCFS(), seed=0)
    # t=0:     A prefill 10 -> 0.020 (A token 1)
    # t=0.020: B waiting since 0.015: prefill-only 20 -> 0.030; ends 0.050 (B token 1)
    # t=0.050: decode A, B -> 0.010 + 0.004 = 0.014; ends 0.064 (A token 2, B token 2: B done)
    # t=0.064: decode A    -> 0.012; ends 0.076 (A token 3)
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.064, 0.076], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.050, 0.064], rtol=1e-12)
    assert check(inst, out) == []


def test_static_batch_timelines():
    """Static batching: members follow their padded-batch timelines, batches run in order."""
    inst = Instance(
        "static",
        Workload(
            {
                "arrival_s": [0.0, 0.0, 0.05],
                "prompt_tokens": [100, 200, 50],
                "output_tokens": [3, 2, 4],
            }
        ),
        Cluster(mode="static", max_batch_size=2),
        LinearTiming(0.01, {"prefill_tokens": 1e-4, "decode_tokens": 1e-3}),
    )
    out = replay(inst, Schedule.static_batches([[1], [0, 2]]))
    # batch [1] (size 1) at 0: prefill 0.01 + 200e-4 = 0.03; decode step 0.01 + 1e-3 = 0.011
    #   -> request 1 tokens at 0.030, 0.041; the batch ends at 0.041
    # batch [0, 2] (size 2) waits for request 2's arrival at 0.05:
    #   request 0: prefill of 2 x 100 tokens: 0.01 + 200e-4 = 0.03 -> 0.080; steps 0.012
    #   -> 0.092, 0.104; request 2: prefill 2 x 50: 0.01 + 100e-4 = 0.02 -> 0.070, then 0.082,
    #   0.094, 0.106
    np.testing.assert_allclose(out.tokens_of(1), [0.030, 0.041], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(0), [0.080, 0.092, 0.104], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(2), [0.070, 0.082, 0.094, 0.106], rtol=1e-12)
    assert out.end_s == pytest.approx(0.106, rel=1e-12)
    assert check(inst, out) == []


def test_static_fcfs_policy_runs_batches_in_arrival_order():
    """StaticFCFS forms batches of at most max_batch_size from the queue."""
    inst = Instance(
        "static",
        Workload(
            {
                "arrival_s": [0.0, 0.0, 0.0],
                "prompt_tokens": [10, 10, 10],
                "output_tokens": [1, 1, 1],
            }
        ),
        Cluster(mode="static", max_batch_size=2),
        ROUND,
    )
    out = run(inst, StaticFCFS(), seed=0)
    # batch [0, 1]: prefill 2 x 10 = 20 tokens: 0.010 + 0.020 = 0.030 (one token each)
    # batch [2]: 0.010 + 0.010 = 0.020 -> 0.050
    np.testing.assert_allclose(out.first_token_s, [0.030, 0.030, 0.050], rtol=1e-12)
    assert check(inst, out) == []


def test_disaggregated_transfer_then_decode():
    """Prefill server, KV transfer of prompt + 1 tokens, then the decode server."""
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [9], "output_tokens": [3]})
    cl = Cluster(
        servers=2,
        mode="disaggregated",
        prefill_servers=1,
        kv_bytes_per_token=1000.0,
        kv_transfer_bandwidth_bytes_per_s=1e6,
    )
    inst = Instance("disagg", wl, cl, ROUND)
    out = run(inst, SarathiFCFS(token_budget=64), seed=0)
    # prefill 9 tokens: 0.010 + 0.009 = 0.019 (token 1 at 0.019)
    # transfer (9 + 1) tokens * 1000 B / 1e6 B/s = 0.010 -> on the decode server at 0.029
    # decode steps 0.012 each -> 0.041, 0.053
    np.testing.assert_allclose(out.tokens_of(0), [0.019, 0.041, 0.053], rtol=1e-12)
    assert out.prefill_server[0] == 0 and out.server[0] == 1
    assert out.transfer_done_s[0] == pytest.approx(0.029, rel=1e-12)
    assert check(inst, out) == []


class _NoRepeat:
    """Wraps a policy and drops its repeat flag, forcing one decision per iteration."""

    def __init__(self, inner):
        self.inner = inner

    def start(self, instance, seed):
        self.inner.start(instance, seed)

    def next_batch(self, server):
        b = self.inner.next_batch(server)
        b.repeat = False
        return b


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("policy", [SarathiFCFS, PrefillFirstFCFS])
def test_fast_forward_equals_step_by_step(seed, policy):
    """Fast-forwarded decode windows give the same tokens as deciding every iteration, bit for
    bit."""
    inst = random_instance(seed)
    fast = run(inst, policy(), LeastLoaded(), seed=seed)
    slow = run(inst, _NoRepeat(policy()), LeastLoaded(), seed=seed)
    assert np.array_equal(fast.token_times, slow.token_times)
    assert np.array_equal(fast.busy_s, slow.busy_s)
    assert np.array_equal(fast.server, slow.server)
    assert fast.n_iterations == slow.n_iterations
    assert check(inst, fast) == []
    assert check(inst, slow) == []


def test_preemption_under_memory_pressure_recomputes():
    """A small KV cache forces recompute preemptions; every request still finishes cleanly."""
    inst = random_instance(7, servers=1, n=30, kv=900)
    out = run(inst, SarathiFCFS(), seed=0)
    assert out.preemptions.sum() > 0
    assert out.finished.all()
    assert check(inst, out) == []
    assert out.it_kv_tokens.max() <= 900


def test_policy_breaking_memory_is_an_error():
    """A batch that needs more KV than the server has raises PolicyError naming the server."""

    class Greedy:
        def start(self, instance, seed):
            return None

        def next_batch(self, server):
            return Batch(prefill=[(r, server.remaining_prefill(r)) for r in server.waiting])

    # each request fits alone (30 + 2 <= 40 tokens), both prefilled at once need 31 + 31 = 62
    inst = Instance(
        "small",
        Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [30, 30], "output_tokens": [2, 2]}),
        Cluster(kv_capacity_tokens=40),
        ROUND,
    )
    with pytest.raises(
        PolicyError, match=r"server 0 t=0.0: batch needs 62 KV tokens but only 40 of 40"
    ):
        run(inst, Greedy(), seed=0)


def test_seed_must_be_an_int():
    """run() requires an integer seed."""
    inst = two_requests()
    with pytest.raises(TypeError, match="seed must be an int"):
        run(inst, SarathiFCFS(token_budget=16), seed=None)


def test_forward_moves_a_waiting_request_to_another_server():
    """A policy can hand a waiting request to another replica, which then serves it."""

    class ForwardFromZero(SarathiFCFS):
        def next_batch(self, server):
            if server.id == 0 and server.waiting:
                return Batch(forward=[(r, 1) for r in server.waiting])
            return super().next_batch(server)

    inst = two_requests(servers=2, max_batch_tokens=64)

    class ToZero:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            return 0

    out = run(inst, ForwardFromZero(), ToZero(), seed=0)
    # both requests end up on server 1; request 0 alone there: prefill 10 -> 0.020
    assert out.server.tolist() == [1, 1]
    assert out.tokens_of(0)[0] == pytest.approx(0.020, rel=1e-12)
    assert check(inst, out) == []


def test_warm_started_request_resumes_decoding():
    """A running request (prompt done, 2 of 4 tokens out) resumes beside a new one."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.0],
            "prompt_tokens": [10, 20],
            "output_tokens": [4, 2],
            "running": [True, False],
            "remaining_prefill_tokens": [0, 20],
            "generated_tokens": [2, 0],
            "ttft_slo_s": [0.001, 1.0],
            "tpot_slo_s": [0.05, 0.05],
        }
    )
    inst = Instance("warm", wl, Cluster(max_batch_tokens=64), ROUND)
    out = run(inst, SarathiFCFS(), seed=0)
    # t=0: A decodes (token 3), B prefills 20 -> 0.010 + 0.020 + 0.002 = 0.032
    # t=0.032: A token 4, B token 2 -> 0.010 + 0.004 = 0.014; ends 0.046
    np.testing.assert_allclose(out.tokens_of(0)[2:], [0.032, 0.046], rtol=1e-12)
    assert np.isnan(out.tokens_of(0)[:2]).all()
    np.testing.assert_allclose(out.tokens_of(1), [0.032, 0.046], rtol=1e-12)
    assert check(inst, out) == []
    # KV at t=0: A holds 10 + 2 and allocates 1 more; B 20 + 1 for its first token -> 34
    assert out.it_kv_tokens[0] == 34
    # A's pre-run tokens count as on time; its TTFT SLO of 1 ms cannot be judged and is met
    from slolab.sim import metrics

    assert metrics.met(inst, out, "deadline").tolist() == [True, True]


def test_warm_start_rejects_impossible_state():
    """A running request claiming all its tokens already generated is a clear error."""
    wl = Workload(
        {
            "arrival_s": [0.0],
            "prompt_tokens": [10],
            "output_tokens": [2],
            "running": [True],
            "remaining_prefill_tokens": [0],
            "generated_tokens": [2],
        }
    )
    inst = Instance("warm", wl, Cluster(max_batch_tokens=64), ROUND)
    with pytest.raises(
        ValueError, match=r"generated_tokens of a running request .* got 2 .*\(row 0\)"
    ):
        run(inst, SarathiFCFS(), seed=0)


class _PickServer:
    """A router that always picks server ``k`` (in range or not)."""

    def __init__(self, k):
        self.k = k

    def start(self, instance, seed):
        return None

    def route(self, r, pool, now):
        return self.k


def test_router_choice_out_of_range_is_an_error():
    """An entry router or a decode router naming a server outside its pool raises PolicyError."""
    inst = two_requests(servers=2)
    with pytest.raises(
        PolicyError, match=r"^router chose server 2 for request 0; servers are 0..1"
    ):
        run(inst, SarathiFCFS(token_budget=64), _PickServer(2), seed=0)
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [9], "output_tokens": [3]})
    cl = Cluster(servers=2, mode="disaggregated", prefill_servers=1)
    with pytest.raises(
        PolicyError, match=r"^decode router chose server 1 for request 0; decode servers are 0..0"
    ):
        run(
            Instance("d", wl, cl, ROUND),
            SarathiFCFS(token_budget=64),
            decode_router=_PickServer(1),
            seed=0,
        )


class _SteppedSizes:
    """Wraps a policy: drops its repeat flag (every iteration committed alone) and records the
    size of each decode batch it returns."""

    def __init__(self, inner):
        self.inner = inner
        self.sizes = []

    def start(self, instance, seed):
        self.inner.start(instance, seed)

    def next_batch(self, server):
        batch = self.inner.next_batch(server)
        self.sizes.append(len(batch.decode))
        return dataclasses.replace(batch, repeat=False)


@pytest.mark.parametrize("policy", [SarathiFCFS, PrefillFirstFCFS])
def test_small_decode_batches_commit_as_with_arrays(policy, monkeypatch):
    """Decode batches of up to SMALL_DECODE requests committed request by request give the
    run of the array commit bit for bit: token times, iterations, preemptions."""
    inst = random_instance(5, n=100, servers=1, kv=8000, horizon_s=0.5)
    limit = iterations.SMALL_DECODE
    wrapped = _SteppedSizes(policy())
    small = run(inst, wrapped, LeastLoaded(), seed=5)
    # the commit reads the limit from its own module
    monkeypatch.setattr(iterations, "SMALL_DECODE", 0)
    arrays = run(inst, _SteppedSizes(policy()), LeastLoaded(), seed=5)
    assert np.array_equal(small.token_times, arrays.token_times)
    assert np.array_equal(small.preemptions, arrays.preemptions)
    assert np.array_equal(small.it_start, arrays.it_start)
    assert np.array_equal(small.it_end, arrays.it_end)
    assert check(inst, small) == []
    # both commits ran in the default run, decode batches on either side of the limit
    # (measured, Sarathi: 46 batches of 1 to 16 decoding requests, 67 of 17 to 47)
    assert 0 < min(s for s in wrapped.sizes if s) <= limit < max(wrapped.sizes)

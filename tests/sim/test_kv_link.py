"""KV transfers queued on their prefill server's link (Cluster.kv_transfer_queued)."""

import dataclasses

import numpy as np
import pytest
from slolab.heuristics.baselines import SarathiFCFS
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import Outcome, check, run
from slolab.timing.base import LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


def _pair(queued: bool, decode_servers: int = 1) -> Instance:
    """Two 9-token prompts arriving together on one prefill server, 1 kB of KV per token over
    a 1 MB/s link (10 ms per 10-token cache)."""
    wl = Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [9, 9], "output_tokens": [3, 3]})
    cl = Cluster(
        servers=1 + decode_servers,
        mode="disaggregated",
        prefill_servers=1,
        kv_bytes_per_token=1000.0,
        kv_transfer_bandwidth_bytes_per_s=1e6,
        kv_transfer_queued=queued,
    )
    return Instance("pair", wl, cl, ROUND)


def test_queued_transfers_leave_one_at_a_time():
    """Two caches done together leave the prefill server's link one after the other."""
    inst = _pair(queued=True)
    out = run(inst, SarathiFCFS(token_budget=64), seed=0)
    # both prompts prefill in one iteration: 0.010 + 0.018 = 0.028 (first tokens at 0.028)
    # each cache is 9 + 1 = 10 tokens x 1000 B / 1e6 B/s = 0.010 s on the link:
    # request 0 lands at 0.028 + 0.010 = 0.038, request 1 waits for it: 0.038 + 0.010 = 0.048
    np.testing.assert_allclose(out.first_token_s, [0.028, 0.028], rtol=1e-12)
    np.testing.assert_allclose(out.transfer_done_s, [0.038, 0.048], rtol=1e-12)
    assert check(inst, out) == []


def test_parallel_transfers_are_the_former_model():
    """Without queueing both caches land 10 ms after the prefill, as the engine used to."""
    inst = _pair(queued=False)
    out = run(inst, SarathiFCFS(token_budget=64), seed=0)
    # 0.028 + 0.010 = 0.038 for both (each at the full 1 MB/s at once)
    np.testing.assert_allclose(out.transfer_done_s, [0.038, 0.038], rtol=1e-12)
    assert check(inst, out) == []


def test_queued_decode_token_times():
    """The second request's decode starts after its later landing."""
    inst = _pair(queued=True, decode_servers=2)
    out = run(inst, SarathiFCFS(token_budget=64), seed=0)
    # two decode servers, one request each (fewest requests first): request 0 decodes from
    # 0.038 in steps of 0.010 + 0.002 = 0.012 -> 0.050, 0.062; request 1 from 0.048 -> 0.060,
    # 0.072
    np.testing.assert_allclose(out.tokens_of(0), [0.028, 0.050, 0.062], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.028, 0.060, 0.072], rtol=1e-12)
    assert check(inst, out) == []


def test_checker_flags_a_transfer_that_skips_the_queue():
    """An outcome whose second cache lands as if the link were free is refused."""
    inst = _pair(queued=True)
    out = run(inst, SarathiFCFS(token_budget=64), seed=0)
    # the run's own outcome with request 1 joining at 0.038, before its landing at 0.048
    moved = out.transfer_done_s.copy()
    moved[1] = 0.038
    bad = dataclasses.replace(out, transfer_done_s=moved)
    assert isinstance(bad, Outcome)
    found = check(inst, bad)
    assert any("before its KV transfer lands (0.048" in line for line in found)


def test_link_bandwidth_must_be_positive():
    """A link of 0 B/s is refused in one line naming the field."""
    with pytest.raises(ValueError, match="kv_transfer_bandwidth_bytes_per_s must be > 0, got 0"):
        Cluster(
            servers=2, mode="disaggregated", prefill_servers=1, kv_transfer_bandwidth_bytes_per_s=0
        )


def test_a_pool_link_overrides_the_cluster_bandwidth():
    """A prefill pool's own 2 MB/s link halves each transfer of the queued pair."""
    from slolab.instances.records import Pool

    wl = Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [9, 9], "output_tokens": [3, 3]})
    cl = Cluster.from_pools(
        [Pool("p", "prefill", 1, kv_link_bandwidth_bytes_per_s=2e6), Pool("d", "decode", 1)],
        kv_bytes_per_token=1000.0,
        kv_transfer_bandwidth_bytes_per_s=1e6,
    )
    inst = Instance("pool-link", wl, cl, ROUND)
    out = run(inst, SarathiFCFS(token_budget=64), seed=0)
    # prefill ends at 0.028 (as above); 10 tokens x 1000 B / 2e6 B/s = 0.005 s each:
    # 0.028 + 0.005 = 0.033, then 0.033 + 0.005 = 0.038
    np.testing.assert_allclose(out.transfer_done_s, [0.033, 0.038], rtol=1e-12)
    assert check(inst, out) == []


def test_pool_link_must_be_positive():
    """A pool link of -1 B/s is refused in one line naming the pool and field."""
    from slolab.instances.records import Pool

    with pytest.raises(ValueError, match="pool 'p': kv_link_bandwidth_bytes_per_s must be > 0"):
        Pool("p", "prefill", 1, kv_link_bandwidth_bytes_per_s=-1.0)

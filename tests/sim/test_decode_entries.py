"""A batch's decode entries given as the server's own cached array (``Server.decoding_ids()``)
skip the engine's per-entry checks and read the KV its decoding requests hold from a running
sum; given as anything else they are checked one by one and their KV summed afresh (the
former way for every batch). Both ways: the same runs bit for bit, and the same errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_cases import mooncake_setup, random_instance
from slolab.heuristics.baselines import LeastLoaded, PrefillFirstFCFS, SarathiFCFS
from slolab.sim import Batch, PolicyError, check, run
from slolab.sim.engine import Engine
from slolab.sim.engine.servers import decoding_kv

#: Preemptions of Sarathi-FCFS in test_preempted_runs_keep_the_running_kv_sum (the code before
#: the running sum gives the same 10).
PREEMPTIONS = 10


class Handed:
    """Wraps a policy and hands its decode entries to the engine one way: ``"arrays"``, as the
    server's cached array whenever they are every decoding request in order (the cheap check);
    ``"lists"``, always as a plain list (each entry checked and its KV summed afresh, the former
    way). At every decision the engine's running sum of the KV the server's decoding requests
    hold is compared with the sum read request by request."""

    def __init__(self, inner, way):
        self.inner = inner
        self.way = way
        self.checked = 0
        self.arrays = 0

    def start(self, instance, seed):
        self.inner.start(instance, seed)

    def next_batch(self, server):
        assert decoding_kv(server) == sum(server.kv_held(r) for r in server.decoding)
        self.checked += 1
        batch = self.inner.next_batch(server)
        decode = [int(r) for r in batch.decode]
        if self.way == "lists":
            return dataclasses.replace(batch, decode=decode)
        if decode and decode == list(server.decoding):
            self.arrays += 1
            return dataclasses.replace(batch, decode=server.decoding_ids())
        return batch


def assert_same_outcome(a, b):
    """Every recorded array of outcomes ``a`` and ``b`` equal to the bit, and their scaling
    events."""
    for f in dataclasses.fields(a):
        value = getattr(a, f.name)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, getattr(b, f.name), err_msg=f.name)
    assert a.scale_events == b.scale_events


def _both_ways(instance, make_policy, router, seed):
    """The run with the decode entries handed over as cached arrays, and as lists."""
    kept, lists = Handed(make_policy(), "arrays"), Handed(make_policy(), "lists")
    fast = run(instance, kept, router(), seed=seed)
    slow = run(instance, lists, router(), seed=seed)
    return fast, slow, kept


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    case=st.sampled_from(
        [("colocated", 700), ("colocated", 1_500), ("colocated", 3_000), ("disaggregated", 6_000)]
    ),
    policy=st.sampled_from([SarathiFCFS, PrefillFirstFCFS]),
)
def test_cached_decode_arrays_give_the_former_run(seed, case, policy):
    """Random small instances (co-located: 40 requests in 0.3 s with little KV, so requests
    are preempted and recomputed; disaggregated: decode servers admit transferred requests):
    the same outcome to the bit whether the decode entries reach the engine as the cached
    array or as a list, and the running KV sum equals the request-by-request sum at every
    decision."""
    mode, kv = case
    if mode == "colocated":
        inst = random_instance(seed, n=40, servers=2, kv=kv, horizon_s=0.3)
    else:
        inst = random_instance(seed, n=30, servers=2, kv=kv, mode=mode, prefill_servers=1)
    fast, slow, kept = _both_ways(inst, policy, LeastLoaded, seed)
    assert_same_outcome(fast, slow)
    assert check(inst, fast) == []
    assert kept.checked > 0


def test_preempted_runs_keep_the_running_kv_sum():
    """Seed 0, 40 requests in 0.3 s on two co-located servers of 700 KV tokens: requests are
    preempted (their KV leaves the running sum) and the two ways still agree."""
    inst = random_instance(0, n=40, servers=2, kv=700, horizon_s=0.3)
    fast, slow, kept = _both_ways(inst, SarathiFCFS, LeastLoaded, 0)
    assert_same_outcome(fast, slow)
    assert int(fast.preemptions.sum()) == PREEMPTIONS
    assert kept.arrays > 0


@pytest.mark.parametrize(
    ("policy", "mode", "rate"),
    [
        ("polyserve", "colocated", 1.5),
        ("polyserve", "disaggregated", 1.5),
        ("vllm", "colocated", 3.0),
        ("sarathi", "colocated", 3.0),
        ("hyperflexis", "colocated", 3.0),
        ("slos-serve", "colocated", 3.0),
        ("scorpio", "colocated", 3.0),
        ("slide-batching", "colocated", 3.0),
    ],
)
def test_registered_policies_give_the_former_run(policy, mode, rate):
    """60 Mooncake requests with Poisson arrivals on 4 servers: every recorded array and the
    scaling events equal whether decode arrays are kept or turned into lists, and the running
    KV sum is right at every decision."""
    setup = mooncake_setup(policy, mode)
    outcomes = []
    for way in ("arrays", "lists"):
        instance, sched = setup.prepare(setup.instance(rate))
        wrapped = Handed(sched.policy, way)
        outcomes.append(dataclasses.replace(sched, policy=wrapped).run(instance, seed=0))
        assert wrapped.checked > 0
    assert_same_outcome(*outcomes)
    assert check(instance, outcomes[0]) == []


def test_polyserve_colocated_batches_carry_the_cached_array():
    """Co-located PolyServe hands over every decoding request as the server's cached array
    (the engine's cheap check) whenever it decodes them all."""
    setup = mooncake_setup("polyserve")
    instance, sched = setup.prepare(setup.instance(1.5))
    handed = []

    class Seen:
        def start(self, instance, seed):
            sched.policy.start(instance, seed)

        def next_batch(self, server):
            batch = sched.policy.next_batch(server)
            if len(batch.decode):
                handed.append(batch.decode is server.decoding_ids())
            return batch

    dataclasses.replace(sched, policy=Seen()).run(instance, seed=0)
    assert sum(handed) > 0.9 * len(handed), (sum(handed), len(handed))


class Scripted:
    """Prefills each request whole, then on its first all-decode decision returns ``bad(server)``."""

    def __init__(self, bad):
        self.bad = bad

    def start(self, instance, seed):
        pass

    def next_batch(self, server):
        if server.waiting:
            r = server.waiting[0]
            return Batch(prefill=[(r, server.remaining_prefill(r))])
        if len(server.decoding) >= 2:
            return self.bad(server)
        return Batch(decode=server.decoding_ids()) if server.decoding else Batch()


def _two_requests():
    return random_instance(5, n=2, servers=1, kv=6000, horizon_s=0.001)


@pytest.mark.parametrize("as_array", [True, False])
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda s, d: Batch(decode=d, preempt=[s.decoding[0]]), "is not decoding here"),
        (lambda s, d: Batch(prefill=[(s.decoding[0], 1)], decode=d), "cannot prefill here"),
    ],
)
def test_decode_entry_errors_are_raised_either_way(bad, message, as_array):
    """A decode entry preempted by the same batch, or a decoding request also given a prefill
    chunk: the same PolicyError with the cached array as with a list."""

    def batch(server):
        ids = server.decoding_ids()
        return bad(server, ids if as_array else ids.tolist())

    with pytest.raises(PolicyError, match=message):
        run(_two_requests(), Scripted(batch), seed=0)


def test_a_request_twice_in_a_decode_list_or_a_prefill_is_an_error():
    """A decode list naming a request twice, and two prefill chunks of one request beside the
    cached decode array: 'a request appears twice in one batch'."""

    def twice_in_decode(server):
        return Batch(decode=[server.decoding[0], *server.decoding])

    with pytest.raises(PolicyError, match="appears twice"):
        run(_two_requests(), Scripted(twice_in_decode), seed=0)

    class PrefillTwice:
        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            if len(server.waiting) + len(server.prefilling) == 1 and server.decoding:
                r = (server.waiting + server.prefilling)[0]
                return Batch(prefill=[(r, 1), (r, 1)], decode=server.decoding_ids())
            if server.waiting and not server.decoding:
                r = server.waiting[0]
                return Batch(prefill=[(r, server.remaining_prefill(r))])
            return Batch(decode=server.decoding_ids()) if server.decoding else Batch()

    inst = random_instance(5, n=2, servers=1, kv=6000, horizon_s=0.001)
    with pytest.raises(PolicyError, match="appears twice"):
        run(inst, PrefillTwice(), seed=0)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    decoding=st.lists(st.integers(0, 39), min_size=1, max_size=40, unique=True),
    picks=st.lists(st.integers(0, 39), min_size=1, max_size=10),
    held=st.lists(st.integers(1, 500), min_size=40, max_size=40),
    by_position=st.booleans(),
)
def test_finished_requests_leave_as_the_former_removals_did(decoding, picks, held, by_position):
    """Random decoding lists and finished subsets (one or several, in list order), removed by
    value or by their positions: the list left, the server's KV and the running KV sum equal
    the former request-by-request removals'."""
    done = sorted({decoding[i % len(decoding)] for i in picks}, key=decoding.index)
    engine = Engine(random_instance(0), SarathiFCFS(), None, None, 0, False)
    engine.held[:] = held
    srv = engine.servers[0]
    srv.decoding[:] = decoding
    srv.kv = srv.decoding_kv = sum(held[r] for r in decoding)
    expected = list(decoding)
    for r in done:
        expected.remove(r)
    positions = [decoding.index(r) for r in done] if by_position else None
    engine._finish_decoding(srv, done, positions)
    # what stays holds the KV still counted, on the server and in the running sum
    assert srv.decoding == expected
    assert srv.kv == srv.decoding_kv == sum(held[r] for r in expected)
    assert engine._retry_due

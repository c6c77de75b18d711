"""Routers that hold requests in their own queue, the assign action, an empty start, free_at_s."""

import numpy as np
import pytest
from sim_cases import random_instance
from slolab.heuristics.baselines import SarathiFCFS, decode_server_batch
from slolab.instances.records import Cluster, Instance, Pool, Workload
from slolab.sim import (
    HOLD,
    Batch,
    PolicyError,
    ScaleAction,
    ScaleEvent,
    ScalePlan,
    check,
    metrics,
    replay,
    run,
)
from slolab.sim.schedule import Schedule
from slolab.timing.base import LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


class OneAtATime:
    """Holds every request while its one server has work; sends it there once it is empty."""

    def start(self, instance, seed):
        self.offers = 0

    def route(self, request, servers, now):
        self.offers += 1
        if not servers or servers[0].load:
            return HOLD
        return 0


class OneAtATimeDispatch(OneAtATime):
    """Same rule, through ``dispatch``: places the oldest held request when the server is empty."""

    def dispatch(self, held, servers, now):
        self.offers += 1
        if servers and not servers[0].load:
            return [(held[0], 0)]
        return []


@pytest.mark.parametrize("router", [OneAtATime, OneAtATimeDispatch])
def test_held_requests_are_placed_when_a_request_leaves(router):
    """Three requests at 0 run one after another: each is placed when the previous finishes."""
    wl = Workload(
        {"arrival_s": [0.0, 0.0, 0.0], "prompt_tokens": [10] * 3, "output_tokens": [2] * 3}
    )
    inst = Instance("held", wl, Cluster(servers=1, max_batch_tokens=64), ROUND)
    out = run(inst, SarathiFCFS(), router(), seed=0)
    # each request: prefill 10 tokens 0.020, one decode 0.012: 0.032 per request, back to back
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.032], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.052, 0.064], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(2), [0.084, 0.096], rtol=1e-12)
    # routed when the previous one left: 0, 0.032, 0.064
    np.testing.assert_allclose(out.routed_s, [0.0, 0.032, 0.064], rtol=1e-12)
    assert check(inst, out) == []


def test_requests_held_with_no_server_and_no_scaler_stay_unserved():
    """A router that never places anything leaves every request unfinished; the run ends."""

    class Never:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            return HOLD

    inst = random_instance(0, n=5)
    out = run(inst, SarathiFCFS(), Never(), seed=0)
    assert not out.finished.any()
    assert (out.server == -1).all()
    assert metrics.summary(inst, out)["attainment"] == 0.0


def test_a_held_request_too_large_for_every_pool_is_rejected_at_once():
    """A request needing 150 + 5 KV tokens, with 100 per server, is rejected, not held."""

    class Hold:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            return HOLD if request == 1 else 0

    wl = Workload({"arrival_s": [0.0, 0.1], "prompt_tokens": [10, 150], "output_tokens": [2, 5]})
    inst = Instance(
        "kv", wl, Cluster(servers=1, kv_capacity_tokens=100, max_batch_tokens=64), ROUND
    )
    out = run(inst, SarathiFCFS(), Hold(), seed=0)
    assert out.rejected.tolist() == [False, True]
    assert out.rejected_kv.tolist() == [False, True]
    assert out.rejected_s[1] == 0.1


def test_dispatching_a_request_not_held_is_a_policy_error():
    """``dispatch`` may only place requests the router holds."""

    class Liar(OneAtATimeDispatch):
        def dispatch(self, held, servers, now):
            return [(99, 0)]

    inst = random_instance(1, n=6, servers=1)
    with pytest.raises(PolicyError, match="dispatched request 99, which it does not hold"):
        run(inst, SarathiFCFS(), Liar(), seed=0)


class SwitchOnWhenHeld:
    """Scaler: switches a server on into pool ``a`` while requests wait and none is on."""

    interval_s = 0.5

    def start(self, instance, seed):
        return None

    def decide(self, cluster):
        return [ScaleAction.on("a")] if not cluster.servers else []


class HoldUntilAServer:
    def start(self, instance, seed):
        return None

    def route(self, request, servers, now):
        return 0 if servers else HOLD


def test_an_empty_cluster_fills_from_its_scaler_and_serves_the_held_request():
    """A cluster of pools starting with no server: the request arriving at 0.2 s is held until
    the scaler's tick at 0.5 s switches a server on (ready 1 s later), then served."""
    wl = Workload({"arrival_s": [0.2], "prompt_tokens": [10], "output_tokens": [2]})
    cl = Cluster.from_pools([Pool("a", servers=0)], max_batch_tokens=64, startup_s=1.0)
    assert cl.servers == 0
    inst = Instance("empty", wl, cl, ROUND)
    out = run(inst, SarathiFCFS(), HoldUntilAServer(), seed=0, scaler=SwitchOnWhenHeld())
    # ticks at 0 (no request yet: the scaler is called, nothing to switch on since... it has no
    # servers, so it switches one on at 0); the request at 0.2 goes to it; ready at 1.0:
    # prefill 0.020 -> 1.020, decode 0.012 -> 1.032
    assert out.scale_events[0] == ScaleEvent(0.0, "on", 0, "a", 0)
    np.testing.assert_allclose(out.tokens_of(0), [1.020, 1.032], rtol=1e-12)
    assert check(inst, out) == []


def test_the_scaler_stops_when_held_requests_can_never_be_placed():
    """A request held with no server, and a scaler that never acts: the run ends."""

    class Idle:
        interval_s = 0.1

        def start(self, instance, seed):
            return None

        def decide(self, cluster):
            return []

    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [2]})
    cl = Cluster.from_pools([Pool("a", servers=0)], max_batch_tokens=64)
    out = run(
        Instance("stuck", wl, cl, ROUND), SarathiFCFS(), HoldUntilAServer(), seed=0, scaler=Idle()
    )
    assert not out.finished.any()


def _two_pool_instance():
    wl = Workload({"arrival_s": [0.0, 0.5], "prompt_tokens": [10, 10], "output_tokens": [3, 2]})
    cl = Cluster.from_pools([Pool("a", servers=1), Pool("b", servers=0)], max_batch_tokens=64)
    return Instance("assign", wl, cl, ROUND)


def test_assign_moves_a_server_to_another_pool_with_its_requests_and_splits_the_cost():
    """Server 0 assigned from pool a to b at 10 ms keeps serving A; the cost splits there."""
    inst = _two_pool_instance()
    plan = ScalePlan(((0.010, ScaleAction.assign(0, "b")),))
    seen = []

    class Spy:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            seen.append([s.pool for s in servers])
            return 0

    out = run(inst, SarathiFCFS(), Spy(), seed=0, plan=plan)
    # A: prefill 0.020, decodes 0.032, 0.044 (not interrupted); B at 0.5: 0.520, 0.532
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.032, 0.044], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.520, 0.532], rtol=1e-12)
    assert seen == [["a"], ["b"]]
    assert out.server_pool.tolist() == [0]  # the pool it was switched on into
    assert out.scale_events == (ScaleEvent(0.010, "assign", 0, "b", 0),)
    # cost: pool a 0 .. 0.010, pool b 0.010 .. 0.532
    assert out.cost_by_pool == pytest.approx({"a": 0.010, "b": 0.522}, rel=1e-12)
    assert metrics.cost_by_pool(inst, out) == pytest.approx(out.cost_by_pool, rel=1e-12)
    assert check(inst, out) == []


def test_a_wrong_cost_split_after_assign_is_reported():
    """The checker recomputes the per-pool cost with the assign split."""
    import dataclasses

    inst = _two_pool_instance()
    out = run(inst, SarathiFCFS(), seed=0, plan=ScalePlan(((0.010, ScaleAction.assign(0, "b")),)))
    bad = dataclasses.replace(out, cost_by_pool={"a": 0.532, "b": 0.0})
    assert any("cost of pool 'a'" in v for v in check(inst, bad))


def test_assign_between_different_pools_is_refused():
    """Pools of different KV capacity cannot exchange a server by assign."""
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [2]})
    cl = Cluster.from_pools(
        [Pool("a", servers=1), Pool("b", servers=0, kv_capacity_tokens=500)], max_batch_tokens=64
    )
    inst = Instance("bad", wl, cl, ROUND)
    with pytest.raises(PolicyError, match="differ in kv_capacity_tokens"):
        run(inst, SarathiFCFS(), seed=0, plan=ScalePlan(((0.001, ScaleAction.assign(0, "b")),)))


def test_a_run_with_assign_replays_exactly():
    """Schedule and scale plan of a run with an assign replay to the same tokens and cost."""
    inst = random_instance(3, n=30, servers=2)
    inst = Instance(
        inst.name,
        inst.workload,
        Cluster.from_pools(
            [Pool("a", servers=2), Pool("b", servers=0)],
            kv_capacity_tokens=6000,
            max_batch_tokens=256,
        ),
        inst.timing,
    )
    plan = ScalePlan(((0.3, ScaleAction.assign(1, "b")), (0.9, ScaleAction.assign(1, "a"))))
    out = run(inst, SarathiFCFS(), seed=0, plan=plan)
    again = replay(inst, Schedule.from_outcome(out), plan=ScalePlan.from_outcome(out))
    np.testing.assert_allclose(again.token_times, out.token_times, rtol=1e-9)
    assert again.scale_events == out.scale_events
    assert again.cost_by_pool == pytest.approx(out.cost_by_pool, rel=1e-9)
    assert out.cost_by_pool["b"] == pytest.approx(0.6, rel=1e-12)  # assigned from 0.3 to 0.9
    assert check(inst, out) == []


def test_free_at_is_the_end_of_the_iteration_in_progress_even_inside_a_window():
    """A router at 0.05 s sees server 0 in a decode window whose iteration ends at 0.054."""
    free = []

    class Look:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            free.append(servers[0].free_at_s)
            return 0

    wl = Workload({"arrival_s": [0.0, 0.05], "prompt_tokens": [10, 1], "output_tokens": [20, 1]})
    inst = Instance("free", wl, Cluster(servers=1, max_batch_tokens=64), ROUND)
    run(inst, SarathiFCFS(), Look(), seed=0)
    # at 0: idle, free now (0.0); A's prefill ends 0.020, decodes every 0.012:
    # 0.032, 0.044, 0.056: the one in progress at 0.05 ends at 0.056
    assert free == pytest.approx([0.0, 0.056], rel=1e-12)


def test_a_decode_router_may_hold_a_transferred_request():
    """Disaggregated: the decode router holds B until A has left the only decode server."""

    class OneDecode:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            return HOLD if servers[0].load else 0

    class Decode:
        def start(self, instance, seed):
            return None

        def next_batch(self, server):
            if server.role == "decode":
                return decode_server_batch(server)
            return SarathiFCFS(64).next_batch(server)

    wl = Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [10, 10], "output_tokens": [3, 3]})
    cl = Cluster(
        servers=2,
        mode="disaggregated",
        prefill_servers=1,
        max_batch_tokens=64,
        kv_transfer_bandwidth_bytes_per_s=1e30,
    )
    inst = Instance("pd", wl, cl, ROUND)
    out = run(inst, Decode(), decode_router=OneDecode(), seed=0)
    # prefill of both together: 20 tokens -> 0.030; A decodes 0.042, 0.054 and leaves; B waits
    # held, then decodes 0.066, 0.078
    np.testing.assert_allclose(out.tokens_of(0), [0.030, 0.042, 0.054], rtol=1e-9)
    np.testing.assert_allclose(out.tokens_of(1), [0.030, 0.066, 0.078], rtol=1e-9)
    assert out.transfer_done_s[1] == pytest.approx(0.054, rel=1e-9)
    assert check(inst, out) == []


class RecomputeOnDecode:
    """Prefill servers: Sarathi; decode servers: decode everything, preempt the newest when the
    step does not fit, and recompute a preempted request once its KV fits again."""

    def start(self, instance, seed):
        return None

    def next_batch(self, server):
        if server.role == "prefill":
            return SarathiFCFS(64).next_batch(server)
        decode = list(server.decoding)
        if len(decode) > server.kv_free_tokens:
            return Batch(decode=decode[:-1], preempt=[decode[-1]])
        free = server.kv_free_tokens - len(decode)
        for r in server.waiting:
            left = server.remaining_prefill(r)
            if left and left + 1 <= free:
                return Batch(prefill=[(r, left)], decode=decode)
            if not left and server.kv_held(r) + 1 <= free:
                decode.append(r)
                free -= server.kv_held(r) + 1
        return Batch(decode=decode)


def test_a_decode_server_recomputes_a_request_it_preempted():
    """Two requests (10 + 30 tokens) on a 60-token decode server: one is preempted when memory
    runs out, recomputed after the other finishes, and both finish; the checker is clean."""
    wl = Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [10, 10], "output_tokens": [30, 30]})
    cl = Cluster(
        servers=2,
        mode="disaggregated",
        prefill_servers=1,
        kv_capacity_tokens=60,
        max_batch_tokens=64,
        kv_transfer_bandwidth_bytes_per_s=1e30,
    )
    inst = Instance("recompute", wl, cl, ROUND)
    out = run(inst, RecomputeOnDecode(), seed=0)
    # both arrive at the decode server holding 11 tokens: 22 + 2 per step fits 19 steps (60),
    # then one request is preempted and recomputed (a prefill of 10 + 20 = 30 tokens) later
    assert out.finished.all()
    assert out.preemptions.tolist() in ([0, 1], [1, 0])
    decode_server = int(out.server[0])
    prefills = out.it_features[out.it_server == decode_server, 0]
    assert prefills.max() == 30.0  # the recompute ran on the decode server
    assert check(inst, out) == []


def test_a_decode_server_never_prefills_a_fresh_prompt():
    """Prefilling a transferred (not preempted) request on a decode server is a policy error."""

    class Wrong(RecomputeOnDecode):
        def next_batch(self, server):
            if server.role == "decode" and server.waiting:
                return Batch(prefill=[(server.waiting[0], 1)])
            return super().next_batch(server)

    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [3]})
    cl = Cluster(servers=2, mode="disaggregated", prefill_servers=1, max_batch_tokens=64)
    with pytest.raises(PolicyError, match="only recomputes the requests it preempted"):
        run(Instance("wrong", wl, cl, ROUND), Wrong(), seed=0)

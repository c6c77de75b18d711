"""Elastic clusters: pools, servers switched on, drained and moved, cost, plans and replay."""

import logging

import numpy as np
import pytest
from sim_cases import random_instance
from slolab.heuristics.baselines import (
    EDFTokens,
    LeastLoaded,
    PrefillFirstFCFS,
    RoundRobin,
    SarathiFCFS,
)
from slolab.heuristics.scalers import FixedScaler, ThresholdParams, ThresholdScaler
from slolab.instances.records import Cluster, Instance, Pool, Workload
from slolab.sim import (
    PlannedIteration,
    PolicyError,
    ScaleAction,
    ScaleEvent,
    ScalePlan,
    Schedule,
    check,
    metrics,
    replay,
    run,
)
from slolab.timing import preset
from slolab.timing.base import LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


class Newest:
    """Routes every request to the accepting server with the highest id."""

    def start(self, instance, seed):
        return None

    def route(self, request, servers, now):
        return max(range(len(servers)), key=lambda k: servers[k].id)


def test_server_switched_on_at_10_with_30s_load_serves_from_40_and_pays_from_10():
    """A server switched on at t=10 with a 30 s disk load takes its first iteration at 40."""
    wl = Workload({"arrival_s": [12.0], "prompt_tokens": [10], "output_tokens": [2]})
    inst = Instance("on", wl, Cluster(servers=1, max_batch_tokens=64, startup_s=30.0), ROUND)
    plan = ScalePlan(((10.0, ScaleAction.on("main")),))
    out = run(inst, SarathiFCFS(), Newest(), seed=0, plan=plan)
    # the request waits on the starting server 1 until it is ready at 10 + 30 = 40:
    # prefill 10 tokens: 0.010 + 0.010 = 0.020 -> 40.020; decode 0.012 -> 40.032
    assert out.server[0] == 1
    assert out.it_start[out.it_server == 1][0] == 40.0
    np.testing.assert_allclose(out.tokens_of(0), [40.020, 40.032], rtol=1e-12)
    assert out.server_on_s.tolist() == [0.0, 10.0]
    assert out.server_ready_s.tolist() == [0.0, 40.0]
    # cost: server 0 from 0 to the end 40.032, server 1 from 10: 40.032 + 30.032 = 70.064
    assert out.server_off_s.tolist() == pytest.approx([40.032, 40.032], rel=1e-12)
    assert out.cost_server_s == pytest.approx(70.064, rel=1e-12)
    assert out.cost_by_pool == {"main": out.cost_server_s}
    assert out.scale_events == (ScaleEvent(10.0, "on", 1, "main", 1),)
    assert check(inst, out) == []
    s = metrics.summary(inst, out)
    assert (s["servers_max"], s["scale_events"]) == (2, 1)
    assert s["cost_server_s"] == pytest.approx(70.064, rel=1e-12)
    # least-loaded prefers the ready server 0: served at 12 (12.020, 12.032), and server 1,
    # still starting when the run ends, costs 12.032 - 10 = 2.032
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0, plan=plan)
    np.testing.assert_allclose(out.tokens_of(0), [12.020, 12.032], rtol=1e-12)
    assert out.cost_server_s == pytest.approx(12.032 + 2.032, rel=1e-12)
    assert check(inst, out) == []


def _drain_instance():
    wl = Workload(
        {
            "arrival_s": [0.0, 0.0, 0.05],
            "prompt_tokens": [10, 20, 5],
            "output_tokens": [3, 2, 1],
        }
    )
    return Instance("drain", wl, Cluster(servers=2, max_batch_tokens=64), ROUND)


def test_drained_server_leaves_exactly_when_its_last_request_ends():
    """Server 1, drained at 5 ms while serving B, departs at B's last token (42 ms)."""
    inst = _drain_instance()
    plan = ScalePlan(((0.005, ScaleAction.drain(1)),))
    out = run(inst, SarathiFCFS(), RoundRobin(), seed=0, plan=plan)
    # server 0: A prefill 10 -> 0.020, decodes -> 0.032, 0.044
    # server 1: B prefill 20 -> 0.030, decode -> 0.042 (B done: server 1 departs)
    # C at 0.050 can only go to server 0 (idle): prefill 5 -> 0.015 -> 0.065
    np.testing.assert_allclose(out.tokens_of(1), [0.030, 0.042], rtol=1e-12)
    assert out.server_drain_s[1] == 0.005
    assert out.server_off_s[1] == out.tokens_of(1)[-1]
    assert out.server[2] == 0
    np.testing.assert_allclose(out.tokens_of(2), [0.065], rtol=1e-12)
    # cost: 0.065 (server 0, until the end) + 0.042 (server 1) = 0.107
    assert out.cost_server_s == pytest.approx(0.107, rel=1e-12)
    assert check(inst, out) == []


def test_draining_an_idle_server_stops_its_cost_at_once():
    """An empty server drained at 1 s departs at 1 s: cost 1 + end for the other."""
    wl = Workload({"arrival_s": [2.0], "prompt_tokens": [10], "output_tokens": [1]})
    inst = Instance("idle", wl, Cluster(servers=2, max_batch_tokens=64), ROUND)
    out = run(inst, SarathiFCFS(), seed=0, plan=ScalePlan(((1.0, ScaleAction.drain(0)),)))
    # the request goes to server 1 (the only one left): prefill 10 -> 2.020
    assert out.server[0] == 1
    assert out.server_off_s.tolist() == pytest.approx([1.0, 2.020], rel=1e-12)
    assert out.cost_server_s == pytest.approx(1.0 + 2.020, rel=1e-12)
    assert check(inst, out) == []


def test_move_counts_the_drain_and_the_move_delay():
    """Moved at 10 ms, server 0 drains until 44 ms, then serves pool b from 44 ms + 5 s."""
    wl = Workload({"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 20], "output_tokens": [3, 2]})
    cl = Cluster.from_pools(
        [Pool("a", servers=1), Pool("b", servers=0)], max_batch_tokens=64, move_s=5.0
    )
    inst = Instance("move", wl, cl, ROUND)
    out = run(inst, SarathiFCFS(), seed=0, plan=ScalePlan(((0.010, ScaleAction.move(0, "b")),)))
    # A on server 0: tokens 0.020, 0.032, 0.044; the drain completes at 0.044, when server 0's
    # next life (id 1, pool b) is switched on; ready at 0.044 + 5 = 5.044
    # B (arrives at 1.0) waits on server 1: prefill 20 -> 5.074, decode -> 5.086
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.032, 0.044], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [5.074, 5.086], rtol=1e-12)
    assert out.pool_names == ("a", "b")
    assert out.server_pool.tolist() == [0, 1]
    assert out.server_origin.tolist() == [-1, 0]
    assert out.server_on_s.tolist() == pytest.approx([0.0, 0.044], rel=1e-12)
    assert out.server_ready_s[1] == pytest.approx(5.044, rel=1e-12)
    # both delays: the move was issued at 0.010; the first iteration in pool b starts
    # 0.034 (drain) + 5.0 (move) later
    assert out.it_start[out.it_server == 1][0] == pytest.approx(0.010 + 0.034 + 5.0, rel=1e-12)
    # cost: pool a 0.044; pool b 5.086 - 0.044 = 5.042; total 5.086 (one device all along)
    assert out.cost_by_pool == pytest.approx({"a": 0.044, "b": 5.042}, rel=1e-12)
    assert out.cost_server_s == pytest.approx(5.086, rel=1e-12)
    assert out.scale_events == (ScaleEvent(0.010, "move", 0, "b", 1),)
    assert check(inst, out) == []


def test_routers_see_only_servers_accepting_new_work():
    """After server 1 is drained at 0.5 s, routers are offered server 0 alone."""
    seen = []

    class Spy(RoundRobin):
        def route(self, request, servers, now):
            seen.append([s.id for s in servers])
            return super().route(request, servers, now)

    wl = Workload({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 5], "output_tokens": [1, 1]})
    inst = Instance("spy", wl, Cluster(servers=2, max_batch_tokens=64), ROUND)
    out = run(inst, SarathiFCFS(), Spy(), seed=0, plan=ScalePlan(((0.5, ScaleAction.drain(1)),)))
    assert seen == [[0, 1], [0]]
    assert check(inst, out) == []


def test_pools_run_their_own_timing_and_limits():
    """A pool on the opt-13b-h100-slos preset times its iterations by that preset."""
    wl = Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [10, 10], "output_tokens": [1, 1]})
    cl = Cluster.from_pools(
        [Pool("here", servers=1), Pool("h100", servers=1, timing="opt-13b-h100-slos")],
        max_batch_tokens=64,
    )
    inst = Instance("hetero", wl, cl, ROUND)
    out = run(inst, SarathiFCFS(), RoundRobin(), seed=0)
    # request 0 on server 0 (ROUND): 0.010 + 10 x 0.001 = 0.020
    # request 1 on server 1 (4.177e-5 s per token + 0.02743 s): 0.02743 + 10 x 4.177e-5
    assert out.tokens_of(0)[0] == pytest.approx(0.020, rel=1e-12)
    assert out.tokens_of(1)[0] == pytest.approx(0.02743 + 10 * 4.177e-5, rel=1e-12)
    assert check(inst, out) == []
    # the checker judges server 1 by its pool's model: under ROUND everywhere it is wrong
    same = Cluster.from_pools(
        [Pool("here", servers=1), Pool("h100", servers=1)], max_batch_tokens=64
    )
    flat = Instance("flat", wl, same, ROUND)
    assert any("timing model gives 0.02s" in m for m in check(flat, out))


def test_fixed_scaler_is_the_fixed_cluster_and_costs_servers_times_end():
    """With FixedScaler nothing changes; cost = 2 servers x end time."""
    inst = _random_instance(3)
    plain = run(inst, SarathiFCFS(), LeastLoaded(), seed=0)
    fixed = run(inst, SarathiFCFS(), LeastLoaded(), seed=0, scaler=FixedScaler())
    assert np.array_equal(plain.token_times, fixed.token_times)
    assert fixed.scale_events == ()
    assert plain.cost_server_s == 2 * plain.end_s
    assert metrics.server_seconds(inst, plain) == 2 * plain.end_s
    assert metrics.summary(inst, plain)["servers_max"] == 2


def _random_instance(seed, n=60, servers=2, startup_s=0.3, move_s=0.0):
    return random_instance(
        seed, n=n, servers=servers, kv=60_000, horizon_s=6.0, startup_s=startup_s, move_s=move_s
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scaled_run_replays_exactly_from_its_plan_and_schedule(seed):
    """A threshold-scaled run: its plan (and its schedule) reproduce every token and cost."""
    inst = _random_instance(seed, n=150)
    params = ThresholdParams(metric="load", upper=2, lower=0.5, max_servers=5, cooldown_s=0.5)
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=seed, scaler=ThresholdScaler(params))
    assert len(out.scale_events) >= 2
    assert check(inst, out) == []
    plan = ScalePlan.from_outcome(out)
    again = run(inst, SarathiFCFS(), LeastLoaded(), seed=seed, plan=plan)
    assert np.array_equal(again.token_times, out.token_times)
    assert again.scale_events == out.scale_events
    assert again.cost_server_s == out.cost_server_s
    replayed = replay(inst, Schedule.from_outcome(out), plan=plan)
    np.testing.assert_allclose(replayed.token_times, out.token_times, rtol=1e-9)
    assert np.array_equal(replayed.server, out.server)
    np.testing.assert_allclose(replayed.server_off_s, out.server_off_s, rtol=1e-9)
    assert replayed.cost_server_s == pytest.approx(out.cost_server_s, rel=1e-9)
    assert check(inst, replayed) == []


def test_replay_of_a_hand_written_schedule_with_a_plan():
    """Server 1, switched on at 0.5 s with a 2 s start-up, runs B from 2.5 s."""
    wl = Workload({"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 20], "output_tokens": [2, 2]})
    inst = Instance("plan", wl, Cluster(servers=1, startup_s=2.0), ROUND)
    schedule = Schedule(
        (
            (PlannedIteration(((0, "prefill", 10),)), PlannedIteration(((0, "decode", 1),))),
            (PlannedIteration(((1, "prefill", 20),)), PlannedIteration(((1, "decode", 1),))),
        )
    )
    plan = ScalePlan(((0.5, ScaleAction.on("main")),))
    out = replay(inst, schedule, plan=plan)
    # A: 0.020, 0.032 on server 0; B waits for server 1 (ready 2.5): 2.530, 2.542
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.032], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [2.530, 2.542], rtol=1e-12)
    # cost 2.542 (server 0) + 2.042 (server 1 from 0.5)
    assert out.cost_server_s == pytest.approx(4.584, rel=1e-12)
    assert check(inst, out) == []
    with pytest.raises(ValueError, match=r"schedule has 2 servers, instance has 1"):
        replay(inst, schedule)


def test_policy_can_scale_at_a_decision_point():
    """A policy switching a server on (Batch.scale) when two requests wait: id 1, on at 0."""

    class ScaleOnQueue(SarathiFCFS):
        def __init__(self):
            super().__init__(token_budget=64)
            self.done = False

        def next_batch(self, server):
            batch = super().next_batch(server)
            if not self.done and len(server.waiting) >= 2:
                self.done = True
                batch.scale = [ScaleAction.on("main")]
            return batch

    wl = Workload({"arrival_s": [0.0, 0.0], "prompt_tokens": [100, 100], "output_tokens": [1, 1]})
    inst = Instance("pol", wl, Cluster(servers=1, max_batch_tokens=64, startup_s=1.0), ROUND)
    out = run(inst, ScaleOnQueue(), seed=0)
    assert out.scale_events == (ScaleEvent(0.0, "on", 1, "main", 1),)
    # no request reaches server 1 (both were routed to server 0 at t = 0); it costs until the end
    assert out.cost_server_s == pytest.approx(2 * out.end_s, rel=1e-12)
    assert check(inst, out) == []


def test_server_view_is_read_only_and_gives_token_deadlines():
    """Policies see tuples, a read-only id array and the metrics' token deadlines."""
    seen = {}

    class Look(SarathiFCFS):
        def next_batch(self, server):
            if server.decoding and "deadline" not in seen:
                r = server.decoding[0]
                seen["deadline"] = (r, server.generated(r), server.next_token_deadline(r))
                seen["types"] = (type(server.waiting), server.decoding_ids().flags.writeable)
                seen["engine"] = hasattr(server, "engine")
            return super().next_batch(server)

    inst = _random_instance(5, servers=1)
    out = run(inst, Look(), seed=0)
    r, generated, deadline = seen["deadline"]
    # the deadline of its next token is the metrics' deadline of token generated + 1
    assert deadline == metrics.token_deadlines(inst, out)[out.token_offsets[r] + generated]
    assert seen["types"] == (tuple, False)
    assert seen["engine"] is False


def test_request_larger_than_kv_capacity_is_rejected_instead_of_stalling_the_server(caplog):
    """A 150-token prompt on a 100-token server is rejected (logged); the rest all finish."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.1, 0.2, 0.3],
            "prompt_tokens": [20, 150, 20, 90],
            "output_tokens": [5, 5, 5, 11],
        }
    )
    inst = Instance(
        "kv", wl, Cluster(servers=1, kv_capacity_tokens=100, max_batch_tokens=64), ROUND
    )
    with caplog.at_level(logging.WARNING, logger="slolab"):
        out = run(inst, SarathiFCFS(), seed=0)
    # request 1 needs 150 + 5 > 100 tokens, request 3 needs 90 + 11 = 101 > 100: both rejected
    assert out.rejected.tolist() == [False, True, False, True]
    assert out.rejected_kv.tolist() == [False, True, False, True]
    assert out.finished.tolist() == [True, False, True, False]
    s = metrics.summary(inst, out)
    assert (s["finished"], s["rejected"], s["rejected_kv"]) == (2, 2, 2)
    assert "2 request(s) rejected: they need more KV memory than their server has" in caplog.text
    assert check(inst, out) == []


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (((0.1, ScaleAction.on("gpu")),), r"plan names unknown pool 'gpu'; known: main"),
        (((0.1, ScaleAction.drain(7)),), r"plan cannot drain server 7: it does not exist"),
        (
            ((0.1, ScaleAction.drain(0)), (0.2, ScaleAction.drain(0))),
            r"plan cannot drain server 0: it is departed \(drained\)",
        ),
        (
            ((0.1, ScaleAction.drain(0)), (0.2, ScaleAction.drain(1))),
            r"request \d+ arrived but no server accepts new requests",
        ),
    ],
)
def test_bad_scaling_actions_are_policy_errors(plan, message):
    """Unknown pools, unknown or departed servers, and a cluster left empty raise PolicyError."""
    inst = _random_instance(2)
    with pytest.raises(PolicyError, match=message):
        run(inst, SarathiFCFS(), seed=0, plan=ScalePlan(plan))


def test_move_between_pools_on_different_hardware_is_refused():
    """A server cannot move to a pool that runs another timing preset."""
    cl = Cluster.from_pools([Pool("a", servers=1), Pool("b", servers=0, timing="llama2-7b-h100")])
    inst = Instance("hw", _random_instance(1).workload, cl, ROUND)
    plan = ScalePlan(((0.1, ScaleAction.move(0, "b")),))
    with pytest.raises(PolicyError, match="the pools run different timing models"):
        run(inst, SarathiFCFS(token_budget=256), seed=0, plan=plan)


def test_disaggregated_pools_scale_and_switch_roles():
    """Prefill and decode pools: a decode server switched on, a prefill server moved to decode."""
    wl = _random_instance(4, n=80).workload
    cl = Cluster.from_pools(
        [Pool("prefill", "prefill", 2), Pool("decode", "decode", 1)],
        kv_capacity_tokens=60_000,
        max_batch_tokens=256,
        startup_s=0.4,
        move_s=0.1,
    )
    inst = Instance("pd", wl, cl, preset("llama2-7b-h100"))
    plan = ScalePlan(((1.0, ScaleAction.on("decode")), (2.0, ScaleAction.move(1, "decode"))))
    out = run(inst, SarathiFCFS(), seed=0, plan=plan)
    assert out.finished.all()
    # ids: 0, 1 prefill and 2 decode at the start; 3 switched on; 4 is server 1's decode life
    assert out.server_pool.tolist() == [0, 0, 1, 1, 1]
    assert out.server_origin.tolist() == [-1, -1, -1, -1, 1]
    assert set(out.server[out.server >= 0].tolist()) <= {2, 3, 4}
    assert check(inst, out) == []


def _random_plan(rng, horizon_s, initial, pools):
    """On, drain and move actions at random times, naming only servers that can take them."""
    actions = []
    accepting = list(range(initial))
    next_id = initial
    for t in np.sort(rng.uniform(0, horizon_s, 8)):
        kind = rng.choice(["on", "drain", "move"])
        if kind == "on" or len(accepting) <= 1:
            actions.append((float(t), ScaleAction.on(str(rng.choice(pools)))))
            accepting.append(next_id)
            next_id += 1
        else:
            victim = int(rng.choice(accepting))
            accepting.remove(victim)
            if kind == "drain":
                actions.append((float(t), ScaleAction.drain(victim)))
            else:
                actions.append((float(t), ScaleAction.move(victim, str(rng.choice(pools)))))
                accepting.append(next_id)
                next_id += 1
    return ScalePlan(tuple(actions))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", [SarathiFCFS, EDFTokens, PrefillFirstFCFS])
def test_random_plans_run_clean_and_replay_exactly(seed, policy):
    """Random on/drain/move plans over two pools: checker clean, cost = on-intervals, replays."""
    rng = np.random.default_rng(seed)
    base = _random_instance(seed, n=80, startup_s=0.2, move_s=0.05)
    cl = Cluster.from_pools(
        [Pool("a", servers=2), Pool("b", servers=1, kv_capacity_tokens=30_000)],
        kv_capacity_tokens=60_000,
        max_batch_tokens=256,
        startup_s=0.2,
        move_s=0.05,
    )
    inst = Instance("plans", base.workload, cl, base.timing)
    plan = _random_plan(rng, 6.0, 3, ["a", "b"])
    out = run(inst, policy(), LeastLoaded(), seed=seed, plan=plan)
    assert check(inst, out) == []
    assert out.finished.all()
    spans = np.where(np.isfinite(out.server_on_s), out.server_off_s - out.server_on_s, 0.0)
    assert out.cost_server_s == pytest.approx(spans.sum(), rel=1e-12)
    assert metrics.server_seconds(inst, out) == out.cost_server_s
    assert len(out.scale_events) == len(plan.actions)
    again = run(inst, policy(), LeastLoaded(), seed=seed, plan=ScalePlan.from_outcome(out))
    assert np.array_equal(again.token_times, out.token_times)
    if not len(out.preempt_request):
        replayed = replay(inst, Schedule.from_outcome(out), plan=plan)
        np.testing.assert_allclose(replayed.token_times, out.token_times, rtol=1e-9)
        assert check(inst, replayed) == []

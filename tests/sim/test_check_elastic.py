"""The checker catches broken server lives: each rule of elastic runs, mutated by hand."""

import dataclasses

import numpy as np
from slolab.heuristics.baselines import RoundRobin, SarathiFCFS
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import ScaleAction, ScalePlan, check, run
from slolab.timing.base import LinearTiming

ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


def switched_on_run():
    """Server 1 switched on at 10 s with a 30 s start-up serves a request from 40 s."""

    class Newest:
        def start(self, instance, seed):
            return None

        def route(self, request, servers, now):
            return len(servers) - 1

    wl = Workload({"arrival_s": [12.0], "prompt_tokens": [10], "output_tokens": [2]})
    inst = Instance("on", wl, Cluster(servers=1, max_batch_tokens=64, startup_s=30.0), ROUND)
    out = run(
        inst, SarathiFCFS(), Newest(), seed=0, plan=ScalePlan(((10.0, ScaleAction.on("main")),))
    )
    return inst, out


def drained_run():
    """Server 1 drained at 5 ms departs at 42 ms; request 2 (at 50 ms) goes to server 0."""
    wl = Workload(
        {"arrival_s": [0.0, 0.0, 0.05], "prompt_tokens": [10, 20, 5], "output_tokens": [3, 2, 1]}
    )
    inst = Instance("drain", wl, Cluster(servers=2, max_batch_tokens=64), ROUND)
    out = run(
        inst, SarathiFCFS(), RoundRobin(), seed=0, plan=ScalePlan(((0.005, ScaleAction.drain(1)),))
    )
    return inst, out


def test_clean_elastic_runs_have_no_violation():
    """Both reference runs check clean."""
    for inst, out in (switched_on_run(), drained_run()):
        assert check(inst, out) == []


def test_iteration_before_the_server_is_ready_is_caught():
    """Claiming server 1 was ready only at 40.5 s puts its 40 s iteration before readiness."""
    inst, out = switched_on_run()
    ready = out.server_ready_s.copy()
    ready[1] = 40.5
    v = check(inst, dataclasses.replace(out, server_ready_s=ready))
    assert any("runs before the server was ready (40.5s)" in m for m in v)
    # and its start-up no longer matches the pool's 30 s
    assert any("ready 30.5s after it was switched on, its start-up takes 30s" in m for m in v)


def test_iteration_after_departure_is_caught():
    """Claiming server 1 left at 40 ms, before its last iteration ended (42 ms), is caught."""
    inst, out = drained_run()
    off = out.server_off_s.copy()
    off[1] = 0.040
    v = check(inst, dataclasses.replace(out, server_off_s=off))
    assert any("runs after the server departed (0.04s)" in m for m in v)
    assert any("drained, departs at 0.04s but its last request left at 0.042s" in m for m in v)


def test_request_left_on_a_departed_server_is_caught():
    """Request 1's last token erased: the outcome leaves it unfinished on drained server 1."""
    inst, out = drained_run()
    times = out.token_times.copy()
    times[out.token_offsets[2] - 1] = np.inf  # request 1's second (last) token
    v = check(inst, dataclasses.replace(out, token_times=times))
    assert any("request 1: left unfinished on server 1, which departed at 0.042s" in m for m in v)


def test_cost_that_is_not_the_sum_of_on_intervals_is_caught():
    """Cost 0.107 s claimed as 0.2 s (and a pool's share changed) is caught."""
    inst, out = drained_run()
    v = check(inst, dataclasses.replace(out, cost_server_s=0.2))
    # on-intervals: server 0 from 0 to 0.065, server 1 from 0 to 0.042 -> 0.107
    assert len(v) == 1 and v[0].startswith("cost_server_s is 0.2 but the servers' on-intervals")
    v = check(inst, dataclasses.replace(out, cost_by_pool={"main": 0.1}))
    assert any("cost of pool 'main' is 0.1" in m for m in v)
    # moving a switch-off changes the sum the claim must equal
    off = out.server_off_s.copy()
    off[0] = 0.07
    v = check(inst, dataclasses.replace(out, server_off_s=off))
    assert any("cost_server_s is" in m for m in v)


def test_request_routed_to_a_draining_server_is_caught():
    """If server 0 had been drained at 45 ms, request 2 reached it at 50 ms while draining."""
    inst, out = drained_run()
    drain = out.server_drain_s.copy()
    drain[0] = 0.045
    v = check(inst, dataclasses.replace(out, server_drain_s=drain))
    # server 0's last iteration ends at 0.065 = max(drain, last end): its departure still holds
    assert v == ["request 2: routed to server 0 at 0.05s, outside its service [0s, drained 0.045s)"]


def test_request_routed_before_switch_on_is_caught():
    """A request routed at 12 s to a server claimed switched on at 13 s is caught."""
    inst, out = switched_on_run()
    on = out.server_on_s.copy()
    on[1] = 13.0
    v = check(inst, dataclasses.replace(out, server_on_s=on))
    assert any("request 0: routed to server 1 at 12s, outside its service [13s" in m for m in v)

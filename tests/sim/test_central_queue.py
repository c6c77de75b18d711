"""The central queue: a router holds a request, a server's policy pulls it; replay of a
schedule whose server is switched on after its request arrived; schedules carrying their plan."""

import logging

import numpy as np
import pytest
from slolab.heuristics.baselines import PrefillFirstFCFS
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import (
    HOLD,
    Batch,
    PlannedIteration,
    PolicyError,
    ScaleAction,
    ScalePlan,
    Schedule,
    check,
    replay,
    run,
)
from slolab.timing.base import LinearTiming

# T = 10 ms + 1 ms per prefill token + 2 ms per decode token
ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


class Hold:
    """Holds every request (a central queue)."""

    central = True

    def start(self, instance, seed):
        return None

    def route(self, request, servers, now):
        return HOLD


class PullOnServer(PrefillFirstFCFS):
    """vLLM-style, but only server ``sid`` pulls held requests (every one at once)."""

    def __init__(self, sid):
        super().__init__()
        self.sid = sid

    def next_batch(self, server):
        if server.id == self.sid and server.held:
            return Batch(prefill=[(r, server.prompt(r)) for r in server.held], pull=server.held)
        return super().next_batch(server)


def two_requests(**cluster):
    wl = Workload({"arrival_s": [0.0, 0.5], "prompt_tokens": [10, 20], "output_tokens": [2, 2]})
    return Instance("cq", wl, Cluster(**cluster), ROUND)


def test_held_request_waits_for_the_server_that_pulls_it():
    """Both requests held; server 1 pulls each on arrival: routed then, tokens from there."""
    inst = two_requests(servers=2)
    out = run(inst, PullOnServer(1), Hold(), seed=0)
    # A pulled at 0: prefill 0.010 + 0.010 = 0.020, decode 0.012 -> 0.032; B at 0.5:
    # 0.010 + 0.020 -> 0.530, decode -> 0.542; all on server 1, routed when pulled
    assert out.server.tolist() == [1, 1]
    np.testing.assert_allclose(out.routed_s, [0.0, 0.5])
    np.testing.assert_allclose(out.tokens_of(0), [0.020, 0.032], rtol=1e-12)
    np.testing.assert_allclose(out.tokens_of(1), [0.530, 0.542], rtol=1e-12)
    assert check(inst, out) == []


def test_a_held_arrival_cuts_a_fast_forwarded_window():
    """Server 1 decodes A in a repeat window; B, held at 0.1, is pulled at the next step end."""
    wl = Workload({"arrival_s": [0.0, 0.1], "prompt_tokens": [10, 10], "output_tokens": [40, 2]})
    inst = Instance("cut", wl, Cluster(servers=2), ROUND)
    out = run(inst, PullOnServer(1), Hold(), seed=0)
    # A: prefill ends 0.020, then decode steps of 0.012: 0.032, 0.044, ..., the step running at
    # 0.1 is 0.092..0.104; B is pulled at 0.104 (prefill-first: 0.104 + 0.020 = 0.124)
    assert out.routed_s[1] == pytest.approx(0.104, rel=1e-12)
    assert out.tokens_of(1)[0] == pytest.approx(0.124, rel=1e-12)
    assert check(inst, out) == []


def test_pulling_a_request_that_is_not_held_is_a_policy_error():
    """A pull of a request routed straight to a server names the request and the side."""

    class BadPull(PrefillFirstFCFS):
        def next_batch(self, server):
            return Batch(pull=[0])

    with pytest.raises(PolicyError, match="cannot pull request 0: it is not held on the entry"):
        run(two_requests(servers=1), BadPull(), seed=0)


def test_never_pulled_requests_stay_unfinished_with_a_warning(caplog):
    """Held requests nobody pulls are unfinished (inf tokens), rejected at the end, and the run
    says so."""
    inst = two_requests(servers=1)
    with caplog.at_level(logging.WARNING, logger="slolab"):
        out = run(inst, PrefillFirstFCFS(), Hold(), seed=0)
    assert np.isinf(out.token_times).all()
    assert out.rejected.all() and out.info["rejected_held"] == 2
    assert "2 request(s) held in a central queue never reached a server" in caplog.text


def test_central_router_holds_while_no_server_accepts():
    """Server 0 drained at 0.01; B (0.5) finds no server accepting and is held until server 1,
    switched on at 0.6 with a 0.2 s start-up, pulls it when ready."""
    inst = two_requests(servers=1, startup_s=0.2)
    plan = ScalePlan(((0.01, ScaleAction.drain(0)), (0.6, ScaleAction.on("main"))))

    class PullAnywhere(PrefillFirstFCFS):
        def next_batch(self, server):
            if server.held:
                return Batch(prefill=[(r, server.prompt(r)) for r in server.held], pull=server.held)
            return super().next_batch(server)

    out = run(inst, PullAnywhere(), Hold(), seed=0, plan=plan)
    # A pulled by server 0 at 0 (0.020, 0.032; server 0 departs at 0.032); B held from 0.5,
    # pulled by server 1 when ready at 0.8: 0.8 + 0.030 = 0.830, then 0.842
    assert out.server.tolist() == [0, 1]
    np.testing.assert_allclose(out.tokens_of(1), [0.830, 0.842], rtol=1e-12)
    assert out.server_off_s[0] == pytest.approx(0.032, rel=1e-12)
    assert check(inst, out) == []


def test_schedule_carries_its_plan_and_holds_requests_for_late_servers():
    """B scheduled on server 1, switched on at 0.6 after B arrived at 0.5: held, pulled at
    ready 0.8; replay(schedule) uses the schedule's own plan."""
    inst = two_requests(servers=1, startup_s=0.2)
    schedule = Schedule(
        (
            (PlannedIteration(((0, "prefill", 10),)), PlannedIteration(((0, "decode", 1),))),
            (PlannedIteration(((1, "prefill", 20),)), PlannedIteration(((1, "decode", 1),))),
        ),
        plan=ScalePlan(((0.01, ScaleAction.drain(0)), (0.6, ScaleAction.on("main")))),
    )
    out = replay(inst, schedule)
    # server 1 ready at 0.8: B 0.8 + 0.030 = 0.830, 0.842; server 0 leaves at 0.032
    np.testing.assert_allclose(out.tokens_of(1), [0.830, 0.842], rtol=1e-12)
    assert out.routed_s[1] == pytest.approx(0.8)
    # cost: server 0 from 0 to 0.032, server 1 from 0.6 to 0.842
    assert out.cost_server_s == pytest.approx(0.032 + 0.242, rel=1e-12)
    assert check(inst, out) == []


class RefuseFirst:
    """Routes to server 0, and says request 0 can never be served."""

    def start(self, instance, seed):
        return None

    def unservable(self, request):
        return "needs a server this cluster lacks" if request == 0 else None

    def route(self, request, servers, now):
        return 0


def test_a_request_its_router_calls_unservable_is_rejected_on_arrival_with_the_reason(caplog):
    """A is rejected at its arrival with the router's reason, never routed; B runs as alone."""
    inst = two_requests(servers=1)
    with caplog.at_level(logging.WARNING, logger="slolab"):
        out = run(inst, PrefillFirstFCFS(), RefuseFirst(), seed=0)
    # B alone from 0.5: prefill 0.010 + 20 x 0.001 -> 0.530, decode 0.010 + 0.002 -> 0.542
    assert out.rejected.tolist() == [True, False] and out.rejected_s[0] == 0.0
    assert out.info["unservable"] == {0: "needs a server this cluster lacks"}
    assert np.isinf(out.routed_s[0]) and out.server[0] == -1
    np.testing.assert_allclose(out.tokens_of(1), [0.530, 0.542], rtol=1e-12)
    assert "(first: request 0: needs a server this cluster lacks)" in caplog.text
    assert check(inst, out) == []


def test_a_decode_router_calls_unservable_when_the_kv_lands():
    """Disaggregated: A is prefilled, then rejected as its KV reaches the decode router."""
    inst = two_requests(servers=2, mode="disaggregated", prefill_servers=1)
    out = run(inst, PrefillFirstFCFS(), None, seed=0, decode_router=RefuseFirst())
    # A's prompt ran on prefill server 0 (first token at 0.010 + 0.010 = 0.020); its KV
    # landed after that, where it was rejected; B decodes on server 1
    assert out.rejected.tolist() == [True, False] and out.prefill_server[0] == 0
    assert out.rejected_s[0] > 0.020 and out.server[0] == -1
    assert out.info["unservable"] == {0: "needs a server this cluster lacks"}
    assert np.isfinite(out.last_token_s[1]) and check(inst, out) == []

"""PolyServe on a fleet smaller than its tiers: every held request reaches a server (an empty
server of another tier is handed over at once; an empty pending server serves its own tier
again), and the engine rejects, with a reason, held requests nothing will ever serve; a request
no tier admits, or no server can hold, is rejected on arrival and holds back no other."""

import logging

import numpy as np
import pytest
from slolab.harness.cli import main
from slolab.harness.serving import ServingSetup
from slolab.heuristics.baselines import PrefillFirstFCFS
from slolab.heuristics.policies import make_scheduler
from slolab.heuristics.polyserve import tier_pool
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import HOLD, check, run
from slolab.timing import LinearTiming

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token
LINE = LinearTiming(
    0.010, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4, "decode_kv_tokens": 1e-6}, name="line"
)


def test_empty_server_of_another_tier_is_handed_over_at_once():
    """Fleet of one: A (100 ms tier, 100 tokens) ends at about 1.03 s, after the 1 s scale-down
    check; B (20 ms) arrives at 1.2 s and takes the server at once, not after the next check."""
    wl = Workload(
        {
            "arrival_s": [0.0, 1.2],
            "prompt_tokens": [50, 50],
            "output_tokens": [100, 5],
            "ttft_slo_s": [1.0, 1.0],
            "tpot_slo_s": [0.1, 0.02],
        }
    )
    inst = Instance("handover", wl, Cluster(servers=1, kv_capacity_tokens=10**5), LINE)
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=1)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    # both finish; the 100 ms server is drained at B's first tick (1.2 + 5 ms), a 20 ms one on
    assert np.isfinite(out.last_token_s).all() and not out.rejected.any()
    drains = [e for e in out.scale_events if e.action == "drain"]
    assert drains[0].time_s == pytest.approx(1.205, abs=1e-9)
    ons = [e for e in out.scale_events if e.action == "on"]
    assert ons[-1].pool == tier_pool(0.02) and ons[-1].time_s < 1.2 + 0.011
    assert check(sched.instance, out) == []


def test_one_server_serves_every_request_of_the_conversation_trace():
    """`simulate --policy polyserve --servers 1` on 200 Azure conv requests: none is left held
    (it was 180 when the empty pending server was skipped by every tier)."""
    setup = ServingSetup("azure_conv_2023", policy="polyserve", servers=1, limit=200)
    instance, out, _ = setup.simulate()
    assert np.isfinite(out.last_token_s).all()
    assert out.info["rejected_held"] == 0 and not out.rejected.any()


class _HoldAll:
    """Holds every request and never places one."""

    central = False

    def start(self, instance, seed):
        return None

    def route(self, request, servers, now):
        return HOLD


def test_requests_held_forever_are_rejected_with_a_reason(caplog):
    """A router that never places: both requests are rejected at the end, counted and named."""
    wl = Workload({"arrival_s": [0.0, 0.5], "prompt_tokens": [10, 20], "output_tokens": [2, 2]})
    inst = Instance("held", wl, Cluster(servers=1), LINE)
    with caplog.at_level(logging.WARNING, logger="slolab"):
        out = run(inst, PrefillFirstFCFS(), _HoldAll(), seed=0)
    assert out.rejected.tolist() == [True, True]
    assert out.info["rejected_held"] == 2
    assert "2 request(s) held in a central queue never reached a server" in caplog.text
    assert "rejected, no server took them" in caplog.text
    assert check(inst, out) == []


def test_disaggregated_polyserve_on_one_server_is_refused_up_front(capsys):
    """A prefill pool and a decode tier need two servers: one line, exit 2."""
    argv = ["simulate", "azure_conv_2023", "--policy", "polyserve", "--mode", "disaggregated"]
    assert main([*argv, "--servers", "1", "--limit", "5", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "disaggregated PolyServe needs --servers >= 2" in err


def test_a_server_handed_over_is_not_drained_twice_at_the_scale_down_check():
    """Fleet of one, B (20 ms) arriving just before the 1 s scale-down check: the
    empty 100 ms server is drained once (handed over), not again by the check."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.999],
            "prompt_tokens": [50, 50],
            "output_tokens": [5, 5],
            "ttft_slo_s": [1.0, 1.0],
            "tpot_slo_s": [0.1, 0.02],
        }
    )
    inst = Instance("twice", wl, Cluster(servers=1, kv_capacity_tokens=10**5), LINE)
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=1)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    drains = [e.time_s for e in out.scale_events if e.action == "drain"]
    # one drain per server life: no server drained twice
    assert len(drains) == len({e.server for e in out.scale_events if e.action == "drain"})
    assert np.isfinite(out.last_token_s).all()
    assert check(sched.instance, out) == []


def test_a_request_no_tier_admits_no_longer_holds_back_the_requests_behind_it():
    """Head-of-line blocking: A, which no tier admits, is rejected on arrival with the reason;
    B (another tier) and C (A's tier) are served. It held B and itself for good before."""
    wl = Workload(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "prompt_tokens": [960, 50, 50],
            "output_tokens": [10, 5, 5],
            "ttft_slo_s": [1.0, 1.0, 1.0],
            "tpot_slo_s": [0.1, 0.02, 0.1],
        }
    )
    inst = Instance("blocked", wl, Cluster(servers=1, kv_capacity_tokens=1000), LINE)
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=1)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    # A holds 960 + 10 = 970 <= 1,000 KV tokens (the engine would run it), but its prompt alone
    # exceeds the 1,000 x (1 - 0.05) = 950 PolyServe's admission fills, on every tier; held,
    # it kept the fleet's one server in its 100 ms tier and B's 20 ms tier never got one
    assert out.rejected.tolist() == [True, False, False]
    assert out.rejected_s[0] == 0.0 and not out.rejected_kv.any()
    assert out.info["unservable"] == {
        0: "PolyServe's admission refuses it on every tier it may use, even on an empty "
        "server: its prompt (960 tokens) exceeds the 950 KV tokens PolyServe's admission "
        "fills (1,000 less the 5% reserve)"
    }
    assert out.info["rejected_held"] == 0
    assert np.isfinite(out.last_token_s[1:]).all()
    assert check(sched.instance, out) == []


def test_disaggregated_a_request_no_decode_tier_admits_is_rejected_before_its_prefill():
    """Disaggregated, A's KV would fill no decode tier: rejected on arrival, not prefilled and
    then held on the decode side for good (which held B there too)."""
    wl = Workload(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "prompt_tokens": [950, 50, 50],
            "output_tokens": [10, 5, 5],
            "ttft_slo_s": [1.0, 1.0, 1.0],
            "tpot_slo_s": [0.1, 0.02, 0.1],
        }
    )
    inst = Instance("blocked-pd", wl, Cluster(servers=2, kv_capacity_tokens=1000), LINE)
    sched = make_scheduler("polyserve", inst, mode="disaggregated", servers=2)
    out = sched.run(sched.instance, seed=0)
    # a decode server holds A's prompt and first token, 950 + 1 = 951 > 950 = 1,000 x 0.95
    assert out.rejected.tolist() == [True, False, False] and out.info["rejected_held"] == 0
    assert "its prompt and first token (951 tokens) exceed the 950" in out.info["unservable"][0]
    assert out.prefill_server[0] == -1 and np.isfinite(out.last_token_s[1:]).all()
    assert check(sched.instance, out) == []


def test_a_request_no_server_can_hold_leaves_no_phantom_held_request_in_its_tier():
    """A (100 ms tier) fits no server's KV: rejected for it on arrival, PolyServe never asked.
    Asked, it counted A as held in its tier for good, which then kept the fleet's one server
    and held B (20 ms, no looser tier to take) to the end of the run."""
    wl = Workload(
        {
            "arrival_s": [0.0, 1.0],
            "prompt_tokens": [2000, 50],
            "output_tokens": [10, 5],
            "ttft_slo_s": [1.0, 1.0],
            "tpot_slo_s": [0.1, 0.02],
        }
    )
    inst = Instance("phantom", wl, Cluster(servers=1, kv_capacity_tokens=1000), LINE)
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=1)
    out = run(sched.instance, sched.policy, sched.router, seed=0, scaler=sched.scaler)
    # A needs 2,000 + 10 = 2,010 KV tokens, a server holds 1,000
    assert out.rejected_kv.tolist() == [True, False] and out.rejected_s[0] == 0.0
    assert out.info["rejected_held"] == 0 and out.info["unservable"] == {}
    assert sched.router.held_count == [0, 0]
    assert np.isfinite(out.last_token_s[1])
    assert check(sched.instance, out) == []

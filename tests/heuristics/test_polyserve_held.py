"""PolyServe on a fleet smaller than its tiers: every held request reaches a server (an empty
server of another tier is handed over at once; an empty pending server serves its own tier
again), and the engine rejects, with a reason, held requests nothing will ever serve."""

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

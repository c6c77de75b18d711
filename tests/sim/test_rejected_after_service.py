"""A request may receive service and then be rejected (a stalled run rejects requests partly
prefilled; a run's end rejects held decode requests whose prefill ran): the checker accepts
service up to the rejection (``Outcome.rejected_s``) and refuses any after it, and the request
never meets its SLO. The checker used to refuse every such run ("rejected request N is
served")."""

import dataclasses

import numpy as np
from sim_cases import mooncake_setup, random_instance
from slolab.heuristics.policies import make_scheduler
from slolab.sim import Batch, check, metrics, run


class OneChunk:
    """Prefills 10 tokens of the server's first waiting request, then starts nothing: the run
    stalls with that request partly prefilled."""

    def start(self, instance, seed):
        self.done = False

    def next_batch(self, server):
        if self.done or not server.waiting:
            return Batch()
        self.done = True
        return Batch(prefill=[(server.waiting[0], 10)])


def test_a_stalled_run_rejects_a_partly_prefilled_request_and_passes_the_checker():
    """Request 0 gets one 10-token chunk, then the run stalls: every request is rejected at
    the stall, request 0 after its service, and none meets its SLO."""
    inst = random_instance(0, n=4, servers=1)
    out = run(inst, OneChunk(), seed=0)
    assert out.info["stalled"] == 4 and out.rejected.all()
    assert out.entry_request.tolist() == [0] and out.entry_tokens.tolist() == [10]
    assert out.rejected_s[0] >= out.it_end[0]
    assert check(inst, out) == []
    assert not metrics.met(inst, out).any()


def test_service_after_the_rejection_is_refused():
    """The same run with request 0's rejection dated before its chunk ends: one violation."""
    inst = random_instance(0, n=4, servers=1)
    out = run(inst, OneChunk(), seed=0)
    early = out.rejected_s.copy()
    early[0] = out.it_start[0]
    forged = dataclasses.replace(out, rejected_s=early)
    assert check(inst, forged) == [
        f"server 0 iteration at {out.it_start[0]:.9g}s: rejected request 0 is served after "
        "its rejection"
    ]


def test_held_decode_requests_rejected_at_the_end_after_their_prefill_pass_the_checker():
    """Sarathi with the hold decode router: no decode server takes the held requests, so each
    is rejected when the run ends, after its prefill ran; the run passes the checker and no
    request held meets its SLO."""
    inst = random_instance(0, n=12, servers=3, mode="disaggregated", prefill_servers=1, kv=20_000)
    scheduler = make_scheduler("sarathi", inst, decode_router="hold")
    out = scheduler.run(inst, seed=0)
    held = out.rejected
    # a request of one output token finishes with its prefill; every other one is held
    assert held.tolist() == (inst.workload.output_tokens > 1).tolist()
    assert out.info["rejected_held"] == held.sum() == 10
    assert np.isfinite(out.prefill_done_s).all()
    assert check(inst, out) == []
    assert not metrics.met(inst, out)[held].any()


def test_a_request_rejected_on_its_decode_server_left_its_prefill_server_at_its_prefill_end():
    """PolyServe disaggregated, 60 Mooncake requests at 12 req/s, its decode servers held to
    whole recomputes (PolyServe's former rule: a request preempted there whose recompute is
    longer than the token cap never restarts): the run stalls with 9 requests on a decode
    server (8 when the KV transfers ran all in parallel, before they queued on each prefill
    server's link), rejected at the stall; their prefill servers had drained and departed long before.
    The checker used to date those servers' last request at the rejection ("drained, departs
    at 8.29s but its last request left at 29.1s")."""
    # recorded with caching off: the stall and its 9 requests are that run's
    setup = dataclasses.replace(mooncake_setup("polyserve", "disaggregated"), prefix_cache="off")
    inst, scheduler = setup.prepare(setup.instance(12.0))
    policy = scheduler.policy
    chunked = policy._decode_batch

    def whole_recomputes_only(server):
        batch = chunked(server)
        whole = [(r, c) for r, c in batch.prefill if c == server.remaining_prefill(r)]
        if len(whole) == len(batch.prefill):
            return batch
        return Batch(prefill=whole, decode=batch.decode)

    policy._decode_batch = whole_recomputes_only
    out = scheduler.run(inst, seed=0)
    rejected = np.flatnonzero(out.rejected)
    assert out.info["stalled"] == len(rejected) == 9
    assert (out.prefill_done_s[rejected] < out.rejected_s[rejected]).all()
    prefill = np.unique(out.prefill_server[rejected])
    assert (out.server_off_s[prefill] < out.rejected_s[rejected].min()).all()
    assert check(scheduler.on(inst), out) == []

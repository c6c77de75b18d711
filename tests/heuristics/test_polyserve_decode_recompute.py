"""Disaggregated PolyServe recomputes a request preempted on a decode server even when its
prompt and generated tokens exceed the token cap of one iteration: in chunks, once all of its
KV fits. Whole recomputes only, the former rule, left such a request (and every transferred
request queued behind it) waiting forever: the run stalled."""

import numpy as np
from slolab.harness.serving import ServingSetup
from slolab.sim import check


def mooncake_disaggregated():
    """60 Mooncake requests at 12 req/s (Poisson, seed 0) on 2 prefill and 2 decode servers:
    the first decode server preempts a request whose recompute is longer than 2,048 tokens."""
    setup = ServingSetup(
        "mooncake_conversation",
        policy="polyserve",
        mode="disaggregated",
        servers=4,
        prefill_servers=2,
        limit=60,
        arrivals="poisson",
        seed=0,
    )
    instance, scheduler = setup.prepare(setup.instance(12.0))
    return instance, scheduler.run(instance, seed=0, record_iterations=True)


def test_a_recompute_longer_than_the_token_cap_runs_in_chunks():
    instance, outcome = mooncake_disaggregated()
    assert outcome.info["stalled"] == 0, outcome.info["stall"]
    assert not outcome.rejected.any()
    assert np.isfinite(outcome.token_times).all()
    # the run does preempt on a decode server (the case this file is about)
    decode_servers = np.unique(outcome.server[outcome.server != outcome.prefill_server])
    assert np.isin(outcome.preempt_server, decode_servers).any()
    assert check(instance, outcome) == []
